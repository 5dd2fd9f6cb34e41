-- Jobs registered with gitmd (by a scheduler, `gitmctl run`, or a Slurm prolog).
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    command TEXT NOT NULL,           -- JSON array
    cwd TEXT NOT NULL DEFAULT '',
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    state TEXT NOT NULL,             -- registered, running, exited
    created_ns INTEGER NOT NULL,
    ended_ns INTEGER,
    exit_code INTEGER,
    runtime_dir TEXT NOT NULL DEFAULT '',
    capture INTEGER NOT NULL DEFAULT 1
);

CREATE INDEX jobs_name ON jobs (name, created_ns);
CREATE INDEX jobs_state ON jobs (state);
