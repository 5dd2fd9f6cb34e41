"""The library's launch keys (table ``launch_keys``): which workload a key was last linked to, and
whether the link may resolve a launch by itself (gitmd/loop/launch.py: Launch.workload_at_launch).

Three kinds of link:
- a key someone stated for its workload (``given``): an admin's import, or the fleet;
- a command key (gitmd.jobs.launch_key.command_key): one exact command line in one directory,
  linked when a run of it was fingerprinted (the newest MAX_COMMAND_KEYS per workload kept);
- a script's key linked by an observed run. It resolves nothing by itself: one script runs other
  programs by its arguments. It is neither listed, exported nor sent to the fleet.
"""

from __future__ import annotations

from typing import Any

from gitmd.jobs.launch_key import COMMAND_SEP, generic

# the links that may resolve a launch (the first two kinds above); ``k`` is launch_keys
RESOLVING = f"(k.given = 1 OR instr(k.key, '{COMMAND_SEP}') > 0)"
# command keys kept per workload (a job whose arguments change every run adds one a run)
MAX_COMMAND_KEYS = 16


def give(db: Any, key: str, workload_id: str, now: int) -> None:
    """Link a key someone stated for the workload (an import, the fleet): a key already linked to
    another workload stays there, one linked to this one is now a given one."""
    db.execute(
        "INSERT INTO launch_keys (key, workload_id, last_seen_ns, given) VALUES (?, ?, ?, 1) "
        "ON CONFLICT (key) DO UPDATE SET given = 1 WHERE launch_keys.workload_id = excluded.workload_id",
        [key, workload_id, now],
    )


def link(db: Any, workload_id: str, launch_key: str, command_key: str, now: int) -> None:
    """A fingerprinted run's keys linked to the workload it was seen as (library.observe). A generic
    key is not linked (it resolves to none). A stated key that the fingerprint moves to another
    workload was not stated for that one."""
    for key in (launch_key, command_key):
        if key and not generic(key):
            db.execute(
                "INSERT INTO launch_keys (key, workload_id, last_seen_ns) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET "
                "given = CASE WHEN workload_id = excluded.workload_id THEN given ELSE 0 END, "
                "workload_id = excluded.workload_id, last_seen_ns = excluded.last_seen_ns",
                [key, workload_id, now],
            )
    if command_key:
        # the newest MAX_COMMAND_KEYS of those linked here, the one just linked among them (stated
        # ones are the fleet's or an import's, not counted nor removed)
        db.execute(
            "DELETE FROM launch_keys WHERE workload_id = ? AND given = 0 AND instr(key, ?) > 0 "
            "AND key != ? AND key NOT IN (SELECT key FROM launch_keys WHERE workload_id = ? "
            "AND given = 0 AND instr(key, ?) > 0 ORDER BY last_seen_ns DESC LIMIT ?)",
            [workload_id, COMMAND_SEP, command_key, workload_id, COMMAND_SEP, MAX_COMMAND_KEYS],
        )


def resolving(conn: Any, workload_id: str, limit: int = -1, newest_first: bool = False) -> list[str]:
    """The workload's keys that may resolve a launch: what it lists and exports, and what the fleet
    carries with its policies (``limit`` of them, the newest first)."""
    order = "last_seen_ns DESC" if newest_first else "key"
    rows = conn.execute(
        f"SELECT key FROM launch_keys k WHERE workload_id = ? AND {RESOLVING} ORDER BY {order} LIMIT ?",
        [workload_id, limit],
    ).fetchall()
    return [r[0] for r in rows]


def lookup(conn: Any, keys: list[str]) -> dict[str, tuple[dict[str, Any], bool]]:
    """In one indexed read, for each of ``keys`` linked to a workload: that workload's row and
    whether the link may resolve a launch by itself."""
    cur = conn.execute(
        f"SELECT k.key AS link_key, {RESOLVING} AS link_resolves, w.* FROM launch_keys k "
        f"JOIN workloads w ON w.id = k.workload_id WHERE k.key IN ({','.join('?' * len(keys))})",
        keys,
    )
    names = [c[0] for c in cur.description]
    out = {}
    for r in cur.fetchall():
        row = dict(zip(names, r, strict=True))
        key, resolves = row.pop("link_key"), bool(row.pop("link_resolves"))
        out[key] = (row, resolves)
    return out
