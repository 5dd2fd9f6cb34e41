-- The job's command from exec to exit as its launcher timed it (gitmctl run; NULL: not known, e.g. a
-- job a scheduler closed). The observation backoff leaves most runs of a recurring program without
-- the shim (so their CUDA-lifetime clock, run_s, is not known): what an observed run cost is
-- measured on this clock, the same for runs with and without the shim.
ALTER TABLE jobs ADD COLUMN wall_s REAL;
-- The process that registered the job and waits for it (gitmctl run), by pid and start time (clock
-- ticks since boot, /proc/<pid>/stat): a job without the shim has no ring to show it alive, so it
-- is alive while this process is (Exits.reap), across gitmd restarts. 0: not known.
ALTER TABLE jobs ADD COLUMN launcher_pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN launcher_ticks INTEGER NOT NULL DEFAULT 0;
