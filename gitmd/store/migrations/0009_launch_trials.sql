-- Launch levers tried across runs of a recurring workload: each registration of the workload while
-- a trial runs gets the baseline (A) or the treatment (B) in its launch plan, pairs alternating
-- their order; each run's time per step comes from gitmd's own capture windows.
CREATE TABLE launch_trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload_id TEXT NOT NULL,
    lever TEXT NOT NULL,
    setting TEXT NOT NULL,            -- JSON
    cause TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,              -- running | promoted | reverted | abandoned
    runs TEXT NOT NULL DEFAULT '[]',  -- JSON: [{job_id, arm, step_ms, exit_code, metrics, uid}]
    decision TEXT NOT NULL DEFAULT '{}',
    created_ns INTEGER NOT NULL,
    updated_ns INTEGER NOT NULL
);
CREATE INDEX launch_trials_workload ON launch_trials (workload_id);
CREATE UNIQUE INDEX launch_trials_one_running ON launch_trials (workload_id) WHERE state = 'running';
