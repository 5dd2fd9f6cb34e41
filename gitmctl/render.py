"""Output: aligned tables for people, JSON (proto3 JSON mapping, field names as in the .proto) for tools."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO


def to_dict(msg: Any) -> dict[str, Any]:
    from google.protobuf import json_format  # only for --json: its import is 30 ms of every call

    return json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def print_json(obj: Any, out: TextIO = sys.stdout, compact: bool = False) -> None:
    if not isinstance(obj, dict | list):
        obj = to_dict(obj)
    out.write(json.dumps(obj, separators=(",", ":")) if compact else json.dumps(obj, indent=2))
    out.write("\n")
    out.flush()


MAX_CELL = 60  # a table cell's most characters; --json has every value whole


def cell(text: str, most: int = MAX_CELL) -> str:
    """One line of at most ``most`` characters: a longer value (a 200-character job name, a long
    command) ends in "…", so no table is 124-228 columns wide (hardening issue, item 11)."""
    text = " ".join(text.split()) if ("\n" in text or "\t" in text) else text
    return text if len(text) <= most else text[: most - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO = sys.stdout) -> None:
    rows = [[cell(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out.write(fmt.format(*headers).rstrip() + "\n")
    for row in rows:
        out.write(fmt.format(*row).rstrip() + "\n")
    out.flush()


def opt(msg: Any, field: str, fmt: str = "{:.0f}", scale: float = 1.0) -> str:
    if not msg.HasField(field):
        return "-"
    return fmt.format(getattr(msg, field) * scale)


def bytes_h(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def duration_h(seconds: float) -> str:
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h{m:02d}m"
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    if m:
        return f"{m}m{s:02d}s"
    return f"{seconds:.1f}s"


def clock_h(ts_ns: int, now_s: float | None = None) -> str:
    """Local time of day, with the date in front when it is not today (a job listed days later said
    only "14:02:11": hardening issue, item 11)."""
    t = ts_ns / 1e9
    local, today = time.localtime(t), time.localtime(now_s)
    same_day = (local.tm_year, local.tm_yday) == (today.tm_year, today.tm_yday)
    day = "" if same_day else time.strftime("%Y-%m-%d ", local)
    return day + time.strftime("%H:%M:%S", local) + f".{int((t % 1) * 1000):03d}"
