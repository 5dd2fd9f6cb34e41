"""The fleet store's schema, versioned like the local one: each migration runs once, in order, in
its own transaction, under an advisory lock (many nodes start at once)."""

from __future__ import annotations

from typing import Any

LOCK_ID = 0x6769746D  # "gitm": pg_advisory_xact_lock key for migrations
MAX_PAYLOAD_BYTES = 64 << 10  # an event's payload at most (a pulled row beyond is refused)

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "events",
        """
        CREATE TABLE fleet_events (
            seq BIGSERIAL PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('policy', 'revert')),
            node TEXT NOT NULL,
            origin TEXT NOT NULL,          -- node:local policy id where the policy was learned
            gpu_model TEXT NOT NULL,
            payload JSONB NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        CREATE INDEX fleet_events_origin ON fleet_events (origin);
        """,
    ),
    (
        2,
        "trust",
        # a node's confirmation of a policy learned elsewhere (held, not held, suspect), and an
        # admin's pin or unpin; nodes on version 1 stop syncing (a newer schema) and keep working alone
        """
        ALTER TABLE fleet_events DROP CONSTRAINT fleet_events_kind_check;
        ALTER TABLE fleet_events ADD CONSTRAINT fleet_events_kind_check
            CHECK (kind IN ('policy', 'revert', 'confirm', 'pin', 'unpin'));
        """,
    ),
)


def migrate(conn: Any) -> int:
    """Apply what is missing; returns the schema version."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_ID])
        conn.execute(
            "CREATE TABLE IF NOT EXISTS fleet_schema (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in conn.execute("SELECT version FROM fleet_schema").fetchall()}
        newest = max(done, default=0)
        if newest > MIGRATIONS[-1][0]:
            raise RuntimeError(f"the fleet store's schema is version {newest}, newer than this gitmd knows")
        for version, name, sql in MIGRATIONS:
            if version not in done:
                conn.execute(sql)
                conn.execute("INSERT INTO fleet_schema (version, name) VALUES (%s, %s)", [version, name])
    return MIGRATIONS[-1][0]
