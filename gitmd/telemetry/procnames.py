"""Process names for GPU process lists, read from /proc (empty when the pid is not visible)."""

from __future__ import annotations

from pathlib import Path


def process_name(pid: int, proc: Path = Path("/proc")) -> str:
    try:
        return (proc / str(pid) / "comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
