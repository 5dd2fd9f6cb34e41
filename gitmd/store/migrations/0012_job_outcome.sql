-- What a job's run came to, kept with it once it has ended (gitmd's memory keeps only running jobs):
-- its capture windows, the policy it was launched with, its steps as the last window found them.
ALTER TABLE jobs ADD COLUMN windows INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN policy_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN steps TEXT NOT NULL DEFAULT '';
