-- What a scheduler says at registration: GPUs, the equivalence contract, exploration, its job id.
ALTER TABLE jobs ADD COLUMN gpus TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN contract TEXT NOT NULL DEFAULT '{"checks": []}';
ALTER TABLE jobs ADD COLUMN allow_exploration INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN scheduler_job_id TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_scheduler_job ON jobs (scheduler_job_id);
