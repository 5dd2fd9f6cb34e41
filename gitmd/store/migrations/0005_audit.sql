-- Append-only record of who did what: every mutating call, every denial, and (with the levers) every
-- apply, revert and decision. Rows are committed before the action they record takes effect.
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_unix_ns INTEGER NOT NULL,
    actor TEXT NOT NULL,          -- "uid 1001 (alice)", "tls:slurm-ctl", "gitmd"
    actor_uid INTEGER,            -- NULL for remote callers and gitmd itself
    action TEXT NOT NULL,         -- the RPC or event, e.g. "RegisterJob", "PinPolicy"
    target TEXT NOT NULL DEFAULT '',  -- job id, policy id, ...
    outcome TEXT NOT NULL,        -- ok | denied | unauthenticated | failed
    detail TEXT NOT NULL DEFAULT '',
    scheduler_job_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_target ON audit (target);
CREATE INDEX audit_scheduler_job ON audit (scheduler_job_id);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
