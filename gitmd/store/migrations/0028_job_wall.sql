-- The job's command from exec to exit as its launcher timed it (gitmctl run; NULL: not known, e.g. a
-- job a scheduler closed). The observation backoff leaves most runs of a recurring program without
-- the shim (so their CUDA-lifetime clock, run_s, is not known): what an observed run cost is
-- measured on this clock, the same for runs with and without the shim.
ALTER TABLE jobs ADD COLUMN wall_s REAL;
