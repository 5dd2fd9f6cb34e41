"""One module per verb, each with ``register(subparsers, common)`` and ``run(args, client) -> int``."""

from gitmctl.commands import gpus, status, telemetry

VERBS = (status, gpus, telemetry)
