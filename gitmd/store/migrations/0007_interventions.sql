-- Every change gitmd makes to a job, written (with its captured prior state) before it takes
-- effect; an intervention that is not promoted is reverted, at the latest when gitmd next starts.
CREATE TABLE interventions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    experiment_id INTEGER,
    lever TEXT NOT NULL,
    kind TEXT NOT NULL,
    setting TEXT NOT NULL,        -- JSON: the lever's parameters
    target TEXT NOT NULL,         -- JSON: pids with their start times, gpus, env
    saved TEXT NOT NULL,          -- JSON: the state capture() saw, what revert() restores
    state TEXT NOT NULL,          -- applying | applied | promoted | reverted | failed
    reason TEXT NOT NULL DEFAULT '',
    created_ns INTEGER NOT NULL,
    updated_ns INTEGER NOT NULL
);
CREATE INDEX interventions_job ON interventions (job_id);
CREATE INDEX interventions_state ON interventions (state);
