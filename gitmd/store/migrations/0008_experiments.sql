-- Controlled experiments: one lever on one job, interleaved baseline/treatment windows, a decision.
CREATE TABLE experiments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    lever TEXT NOT NULL,
    setting TEXT NOT NULL,        -- JSON
    cause TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,          -- planned | baseline | treatment | decided | promoted | reverted | abandoned | failed
    arms TEXT NOT NULL DEFAULT '[]',  -- JSON: [{arm, window_id, step_ms, at_ns}]
    decision TEXT NOT NULL DEFAULT '{}',  -- JSON: promote, reason, speedup, low, high, pairs
    created_ns INTEGER NOT NULL,
    updated_ns INTEGER NOT NULL
);
CREATE INDEX experiments_job ON experiments (job_id);
