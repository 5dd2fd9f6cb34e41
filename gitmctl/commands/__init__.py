"""One module per verb, each with ``register(subparsers, common)`` and ``run(args, client) -> int``."""

from gitmctl.commands import (
    audit,
    explain,
    gpus,
    health,
    interventions,
    job,
    jobs,
    library,
    revert,
    run,
    slurm,
    status,
    telemetry,
    trace,
    tune,
    whoami,
)

VERBS = (
    status,
    gpus,
    telemetry,
    run,
    jobs,
    job,
    trace,
    library,
    explain,
    whoami,
    audit,
    slurm,
    health,
    interventions,
    revert,
    tune,
)
