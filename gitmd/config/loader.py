"""Reading a config file: TOML parsed, every table checked against its schema, typed sections built.

Every error names the file, the key and its line; unknown keys and sections are errors.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gitmd.config.checks import EPISODE_SCHEMA, PROCESS_SCHEMA, SCHEMA, Checker
from gitmd.config.sections import (
    AccessConfig,
    CaptureConfig,
    Config,
    DaemonConfig,
    ExperimentsConfig,
    FleetConfig,
    MetricsConfig,
    RemoteConfig,
    SimConfig,
    SimProcess,
    TelemetryConfig,
    ThrottleEpisode,
)
from gitmd.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/gitmd/gitmd.toml")


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """1-based line of ``key`` inside ``[section]`` (or of the section header), best effort."""
    current = ""
    header_line = None
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        m = re.match(r"^\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?", stripped)
        if m:
            current = m.group(1)
            if current == section and header_line is None:
                header_line = n
            continue
        if key is not None and current == section and re.match(rf"^{re.escape(key)}\s*=", stripped):
            return n
    return header_line


class _Reporter:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text

    def error(self, section: str, key: str | None, message: str) -> ConfigError:
        line = _line_of(self.text, section, key)
        where = f"{section}.{key}" if key else f"[{section}]"
        at = f", line {line}" if line else ""
        return ConfigError(f"{self.path}{at}: {where} {message}")


def _check_table(
    rep: _Reporter, section: str, raw: Any, schema: Mapping[str, Checker], what: str
) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise rep.error(section, None, f"must be a table of {what}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in schema:
            known = ", ".join(sorted(schema))
            raise rep.error(section, key, f"is not a known setting (known: {known})")
        try:
            out[key] = schema[key](value)
        except ValueError as e:
            raise rep.error(section, key, f"{e} (got {value!r})") from None
    return out


def _items(rep: _Reporter, key: str, raw: Any, schema: Mapping[str, Checker], req: set[str]) -> list[dict]:
    if not isinstance(raw, list):
        raise rep.error("sim", key, "must be an array of tables")
    items = []
    for i, item in enumerate(raw):
        checked = _check_table(rep, "sim", item, schema, f"{key}[{i}] settings")
        missing = req - set(checked)
        if missing:
            raise rep.error("sim", key, f"[{i}] lacks {', '.join(sorted(missing))}")
        items.append(checked)
    return items


def parse(text: str, path: Path) -> Config:
    """Parse and validate a TOML document; raise ConfigError naming the key and line."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    rep = _Reporter(path, text)
    for section in raw:
        if section not in SCHEMA:
            known = ", ".join(sorted(SCHEMA))
            raise rep.error(section, None, f"is not a known section (known: {known})")
    sections = {s: _check_table(rep, s, raw.get(s, {}), SCHEMA[s], "settings") for s in SCHEMA}

    sim = dict(sections["sim"])
    sim["throttle_episodes"] = tuple(
        ThrottleEpisode(**d)
        for d in _items(
            rep,
            "throttle_episodes",
            sim.get("throttle_episodes", []),
            EPISODE_SCHEMA,
            {"gpu", "start_s", "duration_s"},
        )
    )
    sim["processes"] = tuple(
        SimProcess(**d)
        for d in _items(rep, "processes", sim.get("processes", []), PROCESS_SCHEMA, {"gpu", "pid"})
    )
    remote = RemoteConfig(**sections["remote"])
    if remote.listen:
        for key in ("cert", "key", "client_ca"):
            if getattr(remote, key) is None:
                raise rep.error(
                    "remote", key, "is required when remote.listen is set (the listener is mutual TLS only)"
                )
    return Config(
        daemon=DaemonConfig(**sections["daemon"]),
        experiments=ExperimentsConfig(**sections["experiments"]),
        access=AccessConfig(**sections["access"]),
        remote=remote,
        fleet=FleetConfig(**sections["fleet"]),
        telemetry=TelemetryConfig(**sections["telemetry"]),
        metrics=MetricsConfig(**sections["metrics"]),
        capture=CaptureConfig(**sections["capture"]),
        sim=SimConfig(**sim),
        source=path,
    )


def load(path: Path | None) -> Config:
    """Load ``path``; with None, the default file if it exists, else built-in defaults."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return Config()
        path = DEFAULT_CONFIG_PATH
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    return parse(text, path)
