-- A job registered by a scheduler that will report its end itself (Slurm's Epilog): gitmd does not
-- reap it as lost while it has no processes (a batch job may run CPU work for hours between steps).
ALTER TABLE jobs ADD COLUMN scheduler_closes INTEGER NOT NULL DEFAULT 0;
