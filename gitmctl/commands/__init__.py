"""One module per verb, each with ``register(subparsers, common)`` and ``run(args, client) -> int``.

Imported on demand: `gitmctl run` is on every job's launch path, and importing every verb's module
(and building its parser) cost it ~40 ms of its ~200 (2-core CPU host, 2026-12-04)."""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = (
    "status",
    "gpus",
    "telemetry",
    "run",
    "jobs",
    "job",
    "trace",
    "library",
    "explain",
    "whoami",
    "audit",
    "slurm",
    "health",
    "interventions",
    "revert",
    "tune",
    "levers",
    "pause",
)


def modules(only: str | None = None) -> list[ModuleType]:
    """The verbs' modules in gitmctl's order; ``only``: that one alone (when it is a module's name)."""
    names = (only,) if only in NAMES else NAMES
    return [importlib.import_module(f"gitmctl.commands.{n}") for n in names]
