-- Trials decided on the run's own clock (issue: a false promotion from capture windows), and runs
-- that crashed under gitmd.
-- run_s: the run's length by its own clock: from its first process's CUDA initialisation (the shim's
-- ring) to its last process's exit; NULL when not known (no CUDA, no shim).
ALTER TABLE jobs ADD COLUMN run_s REAL;
-- crash: set when the run died by a signal while gitmd had something in force on it (a capture
-- window or CUPTI attached, a trial arm, a live change): "may be gitmd's", with what was in force.
ALTER TABLE jobs ADD COLUMN crash TEXT NOT NULL DEFAULT '';
-- A launch trial stores what attribution predicted: the share of the run its cause cost, and so the
-- largest speedup removing that cause could give (1 / (1 - share)); a measured gain above it is a
-- measurement error, not a win.
ALTER TABLE launch_trials ADD COLUMN cause_share REAL NOT NULL DEFAULT 0;
-- A workload (or a launch key not yet tied to one) whose run crashed under gitmd: its next runs get
-- no capture and no trial until one has run clean without gitmd's capture.
CREATE TABLE suspect_crashes (
    key TEXT PRIMARY KEY,          -- 'workload:<id>' or 'launch:<launch key>'
    job_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    since_ns INTEGER NOT NULL
);
-- Policies promoted by launch trials before this decided on capture-window step times, which can
-- disagree with the run's own clock (a stored 3.0x the program never showed): marked unconfirmed.
UPDATE policies SET evidence = json_set(evidence, '$.unconfirmed',
    'decided on capture-window step times, not the run''s own clock; not re-checked since')
WHERE json_extract(evidence, '$.source') = 'runs';
