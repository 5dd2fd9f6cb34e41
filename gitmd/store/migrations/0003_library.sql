-- The library: workloads (by fingerprint), the launch keys seen for them, and their policies.
CREATE TABLE workloads (
    id TEXT PRIMARY KEY,              -- the first signature's id (gitmd.analysis.fingerprint)
    name TEXT NOT NULL DEFAULT '',
    signature TEXT NOT NULL,          -- JSON {"sequence": [...], "shares": {...}}
    first_seen_ns INTEGER NOT NULL,
    last_seen_ns INTEGER NOT NULL,
    run_count INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE launch_keys (
    key TEXT PRIMARY KEY,
    workload_id TEXT NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
    last_seen_ns INTEGER NOT NULL
);

CREATE INDEX launch_keys_workload ON launch_keys (workload_id);

CREATE TABLE policies (
    id INTEGER PRIMARY KEY,
    workload_id TEXT NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
    settings TEXT NOT NULL,           -- JSON {"env": {NAME: value}}
    status TEXT NOT NULL CHECK (status IN ('candidate', 'validated', 'pinned', 'reverted')),
    speedup REAL,
    ci_low REAL,
    ci_high REAL,
    evidence TEXT NOT NULL DEFAULT '{}',
    gpu_model TEXT NOT NULL DEFAULT '',
    driver TEXT NOT NULL DEFAULT '',
    created_ns INTEGER NOT NULL,
    updated_ns INTEGER NOT NULL,
    pinned_by TEXT NOT NULL DEFAULT ''
);

CREATE INDEX policies_workload ON policies (workload_id, status);

ALTER TABLE jobs ADD COLUMN launch_key TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN workload_id TEXT NOT NULL DEFAULT '';
