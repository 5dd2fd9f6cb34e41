"""Opening the store: WAL, a busy timeout, and numbered migrations applied in order at start.

A migration is ``migrations/NNNN_name.sql``; each runs in its own transaction together with the row
that records it, so a crash mid-migration leaves the previous version intact. A database written by
a newer gitmd (a version this one does not know) is refused rather than guessed at.
"""

from __future__ import annotations

import importlib.resources
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from gitmd.errors import ResourceExhaustedError, StoreError, UnavailableError

log = logging.getLogger(__name__)

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def bundled_migrations() -> list[Migration]:
    found = []
    for entry in importlib.resources.files("gitmd.store.migrations").iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda x: x.version)
    for expected, mig in enumerate(found, start=1):
        if mig.version != expected:
            raise StoreError(
                f"migrations are not numbered 1..N without gaps: found {mig.version} at {expected}"
            )
    return found


# SQLite checkpoints the write-ahead log itself once it holds this many pages (its default: 1000),
# inside the commit that crossed it. The daemon checkpoints from a background connection instead
# (Store.checkpoint, daemon.checkpoint_every_s); this larger threshold is only the backstop for when
# that does not run (tools, tests) or falls behind: the log never grows past ~40 MiB.
AUTOCHECKPOINT_PAGES = 10_000


class Store:
    """One connection, serialised by a lock: the daemon's threads (sampler, RPC pool) share it.
    A second one, used only by ``checkpoint`` (a background thread), copies the write-ahead log
    into the database without taking that lock."""

    def __init__(self, path: Path | str, migrations: list[Migration] | None = None) -> None:
        self.path = path
        try:
            conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open the store {path}: {e}") from e
        self.db = sqlite_utils.Database(conn)
        self._lock = threading.RLock()
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self.migrate(migrations if migrations is not None else bundled_migrations())

    def defer_checkpoints(self) -> None:
        """From now on the log is checkpointed by ``checkpoint`` (a background thread); SQLite's
        own checkpoint only past AUTOCHECKPOINT_PAGES, as a backstop."""
        with self._lock:
            self.conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")

    def checkpoint(self) -> tuple[int, int] | None:
        """Copy what the write-ahead log holds into the database (PASSIVE: it waits for no reader
        or writer, and the request path's lock is not taken), from a connection of its own; the
        fsync happens here, not in a request's commit. (log pages, pages checkpointed); None when
        the store is in memory or the checkpoint could not run (it is tried again next time)."""
        if str(self.path) in ("", ":memory:"):
            return None
        with self._checkpoint_lock:
            try:
                if self._checkpointer is None:
                    self._checkpointer = sqlite3.connect(
                        str(self.path), check_same_thread=False, isolation_level=None, timeout=1.0
                    )
                row = self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as e:
                log.warning("store: background checkpoint failed (retried): %s", e)
                return None
        busy, pages, done = row
        return (int(pages), int(done)) if not busy else None

    @property
    def conn(self) -> sqlite3.Connection:
        return self.db.conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """Serialised, atomic: BEGIN IMMEDIATE .. COMMIT, ROLLBACK on any exception. A full disk or
        a busy store is said as such (store_error), never as "cannot rollback - no transaction is
        active" (SQLite has rolled back by itself after SQLITE_FULL: hardening issue, item 5)."""
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self.db
                    self.conn.execute("COMMIT")
                except BaseException:
                    if self.conn.in_transaction:
                        try:
                            self.conn.execute("ROLLBACK")
                        except sqlite3.Error as e:  # the original error is the one to tell
                            log.warning("store: rollback after an error failed: %s", e)
                    raise
            except sqlite3.OperationalError as e:
                mapped = self.store_error(e)
                if mapped is e:
                    raise
                raise mapped from e

    @contextmanager
    def reading(self) -> Iterator[sqlite_utils.Database]:
        with self._lock:
            try:
                yield self.db
            except sqlite3.OperationalError as e:
                mapped = self.store_error(e)
                if mapped is e:
                    raise
                raise mapped from e

    def store_error(self, e: sqlite3.OperationalError) -> Exception:
        """What a client is told of a store that cannot write: its disk full (RESOURCE_EXHAUSTED),
        busy or read-only (UNAVAILABLE); other errors as they are."""
        msg = str(e)
        if "full" in msg:
            return ResourceExhaustedError(
                f"gitmd's store ({self.path}) cannot grow: {msg}; nothing was changed "
                "(free space on its disk, or lower daemon.keep_days)"
            )
        if any(w in msg for w in ("locked", "busy", "readonly", "disk I/O")):
            return UnavailableError(f"gitmd's store ({self.path}) cannot be written now: {msg}; try again")
        return e

    def schema_version(self) -> int:
        with self._lock:
            if not self.db["schema_migrations"].exists():
                return 0
            row = self.conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
            return int(row[0] or 0)

    def migrate(self, migrations: list[Migration]) -> None:
        try:
            with self._lock:
                self.conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ns INTEGER NOT NULL)"
                )
                current = self.schema_version()
                known = migrations[-1].version if migrations else 0
                if current > known:
                    raise StoreError(
                        f"the store {self.path} has schema version {current}, newer than this gitmd knows "
                        f"({known}); it was written by a newer gitmd. Refusing to touch it."
                    )
                for mig in migrations:
                    if mig.version <= current:
                        continue
                    log.info("store: applying migration %04d_%s", mig.version, mig.name)
                    with self.transaction():
                        for statement in _statements(mig.sql):
                            self.conn.execute(statement)
                        self.conn.execute(
                            "INSERT INTO schema_migrations (version, name, applied_at_ns) VALUES (?, ?, ?)",
                            (mig.version, mig.name, time.time_ns()),
                        )
        except sqlite3.DatabaseError as e:
            raise StoreError(f"the store {self.path} is not usable: {e}") from e

    def integrity_ok(self) -> bool:
        with self._lock:
            return self.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def close(self) -> None:
        with self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        with self._lock:
            try:
                self.conn.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass
            self.conn.close()


def _statements(sql: str) -> Iterator[str]:
    """Split a migration into statements (executescript would commit our transaction)."""
    buf = ""
    for line in sql.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                yield buf.strip()
            buf = ""
    if buf.strip():
        raise StoreError(f"migration has an incomplete statement: {buf.strip()[:80]}")
