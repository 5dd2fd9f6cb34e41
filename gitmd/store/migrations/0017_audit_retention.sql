-- The audit stays append-only, with one exception: retention removes its oldest rows (by age,
-- daemon.keep_days, and by count, daemon.audit_max_rows: gitmd/store/prune.py). Rows at or below
-- audit_retention.below_id may be deleted; the mark only moves forward.
CREATE TABLE audit_retention (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    below_id INTEGER NOT NULL
);
INSERT INTO audit_retention (id, below_id) VALUES (1, 0);
CREATE TRIGGER audit_retention_forward BEFORE UPDATE ON audit_retention
WHEN NEW.below_id < OLD.below_id OR NEW.id != 1
BEGIN SELECT RAISE(ABORT, 'the audit retention mark only moves forward'); END;
CREATE TRIGGER audit_retention_kept BEFORE DELETE ON audit_retention
BEGIN SELECT RAISE(ABORT, 'the audit retention mark is kept'); END;
DROP TRIGGER audit_no_delete;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
WHEN OLD.id > (SELECT below_id FROM audit_retention WHERE id = 1)
BEGIN SELECT RAISE(ABORT, 'audit is append-only (retention removes only its oldest rows)'); END;
