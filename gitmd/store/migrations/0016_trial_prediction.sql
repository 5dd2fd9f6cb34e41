-- What attribution predicted a launch trial's lever would give (1 / (1 - the cause's cost share)),
-- beside what it measured; 0: no prediction (trials planned before this).
ALTER TABLE launch_trials ADD COLUMN predicted REAL NOT NULL DEFAULT 0;
