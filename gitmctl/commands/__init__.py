"""One module per verb, each with ``register(subparsers, common)`` and ``run(args, client) -> int``."""

from gitmctl.commands import explain, gpus, job, jobs, library, run, status, telemetry, trace

VERBS = (status, gpus, telemetry, run, jobs, job, trace, library, explain)
