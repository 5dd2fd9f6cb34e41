"""A WindowReport as JSON and back, so that a job's last reports outlive it (`gitmctl explain` on an
ended job). Generic over the report's frozen dataclasses: their fields' types say how to rebuild
them (dataclasses, lists, tuples, optionals, numbers and strings; NaN kept)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

from gitmd.analysis.report import WindowReport

FORMAT = 1


def dumps(report: WindowReport) -> str:
    doc = {"format": FORMAT, "report": dataclasses.asdict(report)}
    return json.dumps(doc, separators=(",", ":"), default=_plain)


def _plain(o: Any) -> Any:
    """numpy scalars (a count or a duration taken from an array) as Python numbers."""
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} in a report")


def loads(text: str) -> WindowReport:
    """The report stored by dumps; ValueError for a document of another format or shape."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("not a stored report of this format")
    try:
        out = _build(WindowReport, doc["report"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"stored report unreadable: {e}") from None
    assert isinstance(out, WindowReport)
    return out


@typing.no_type_check
def _build(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(kinds[0], value) if len(kinds) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_build(item, v) for v in value]
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v) for v in value)
        return tuple(_build(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict:
        _, val = typing.get_args(tp)
        return {k: _build(val, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kw = {f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value}
        return tp(**kw)
    if tp is float:
        return float(value)
    if tp is int:
        return int(value)
    return value
