import sqlite3
from pathlib import Path

import pytest

from gitmd.errors import StoreError
from gitmd.store.db import Migration, Store, bundled_migrations


def test_bundled_migrations_apply_once(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    s = Store(db)
    n = len(bundled_migrations())
    assert s.schema_version() == n
    assert s.db["telemetry"].exists() and s.db["telemetry_1m"].exists()
    s.close()
    s = Store(db)  # second open: nothing re-applied
    rows = s.conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0]
    assert rows == n
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s.integrity_ok()
    s.close()


def test_new_migration_applies_on_top(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    Store(db).close()
    extra = [
        *bundled_migrations(),
        Migration(len(bundled_migrations()) + 1, "extra", "CREATE TABLE extra (x INTEGER);"),
    ]
    s = Store(db, extra)
    assert s.db["extra"].exists()
    s.close()


def test_failed_migration_leaves_previous_version(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    Store(db).close()
    n = len(bundled_migrations())
    bad = [
        *bundled_migrations(),
        Migration(n + 1, "bad", "CREATE TABLE ok1 (x INTEGER);\nCREATE TABLE broken (;\n"),
    ]
    with pytest.raises(StoreError):
        Store(db, bad)
    s = Store(db)
    assert s.schema_version() == n
    assert not s.db["ok1"].exists(), "a failed migration must roll back completely"
    s.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    Store(db).close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer than this gitmd knows"):
        Store(db)


def test_garbage_file_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError):
        Store(db)


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    s = Store(tmp_path / "g.db")
    with pytest.raises(RuntimeError), s.transaction() as db:
        db.execute("INSERT INTO schema_migrations VALUES (500, 'x', 0)")
        raise RuntimeError("boom")
    assert s.schema_version() == len(bundled_migrations())
    s.close()


def test_a_full_store_is_said_as_such_and_changes_nothing(tmp_path: Path) -> None:
    """Hardening issue, item 5: a full disk surfaced as "cannot rollback - no transaction is active"
    (SQLite had already rolled back). The client is told the store cannot grow, RESOURCE_EXHAUSTED,
    and the store is as it was; it works again once there is room."""
    from gitmd.errors import ResourceExhaustedError

    store = Store(tmp_path / "full.db")
    with store.transaction() as db:
        db.execute("CREATE TABLE t (x TEXT)")
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    store.conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full: not one page more
    full = pytest.raises(ResourceExhaustedError, match="cannot grow: database or disk is full")
    with full, store.transaction() as db:
        db.execute("INSERT INTO t VALUES (?)", ["y" * 100_000])
    assert not store.conn.in_transaction
    with store.reading() as db:
        assert db.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0
    store.conn.execute(f"PRAGMA max_page_count = {pages + 1000}")
    with store.transaction() as db:
        db.execute("INSERT INTO t VALUES (?)", ["y" * 100_000])


def test_the_log_is_checkpointed_from_a_connection_of_its_own(tmp_path: Path) -> None:
    """RegisterJob's p99 was SQLite's checkpoint (and its fsync) inside whichever commit crossed
    its threshold: the daemon checkpoints from a background thread instead, on a second
    connection, without the request path's lock; SQLite's own stays as a backstop at a larger log."""
    from gitmd.store.db import AUTOCHECKPOINT_PAGES

    s = Store(tmp_path / "g.db")
    assert s.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000  # SQLite's, until deferred
    s.defer_checkpoints()
    assert s.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == AUTOCHECKPOINT_PAGES
    ROW = "INSERT INTO audit (at_unix_ns, actor, action, outcome) VALUES (?, 'gitmd', 'a', 'ok')"
    for i in range(50):
        with s.transaction() as db:
            db.execute(ROW, [i])
    with s._lock:  # the request path's lock held: the checkpoint does not need it
        got = s.checkpoint()
    assert got is not None and got[0] > 0 and got[1] == got[0]  # every page of the log copied
    with s.transaction() as db:
        db.execute(ROW, [1])
    assert s.checkpoint() is not None
    s.close()
    assert Store(":memory:").checkpoint() is None
