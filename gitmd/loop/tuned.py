"""`gitmctl tune`'s trials, run by the CLI one launch each and decided here from their figures
like any trial: kept as experiments of the reference job, the best promoted lever a policy of its
workload."""

from __future__ import annotations

import math
import time

from gitmd.errors import FailedPreconditionError, InvalidArgumentError
from gitmd.experiments.decide import Decision, decide
from gitmd.experiments.equivalence import Verdict
from gitmd.experiments.live import Experiment, decision_json
from gitmd.experiments.tune import MAX_NOTE_CHARS, TunedLever, tune_lever
from gitmd.levers.base import Lever
from gitmd.levers.launch_env import EnvLever
from gitmd.levers.registry import CATALOG
from gitmd.loop.deps import Deps
from gitmd.store.audit import Audit
from gitmd.store.audit import row as audit_row
from gitmd.store.library import Policy


def record_tune(
    d: Deps,
    audit: Audit,
    job_id: str,
    metric: str,
    levers: list[TunedLever],
    min_gain: float,
    scope_uid: int | None,
    actor: str,
) -> tuple[list[Experiment], Policy | None, str, str]:
    """Returns (experiments, policy, workload id, note); the policy scoped to ``scope_uid`` when given."""
    job = d.jobs.get(job_id)
    if not levers:
        raise InvalidArgumentError("no levers in the tune result")
    if any(e.cause == "tune" for e in d.experiments.of_job(job.id)):
        # once per reference job (gitmctl tune records once): a loop of RecordTune calls on one's own
        # job wrote experiment rows without bound (hardening issue, item 5)
        raise FailedPreconditionError(f"job {job.id}'s tune result is recorded already (once per job)")
    if len(levers) > len(CATALOG):
        raise InvalidArgumentError(f"at most {len(CATALOG)} levers in one tune result")
    if not 0 <= min_gain < 1 or not math.isfinite(min_gain):
        raise InvalidArgumentError("min_gain must be in [0, 1)")
    gain = min_gain or d.config.experiments.min_gain
    checked = [(t, *tune_lever(t)) for t in levers]  # every lever valid before anything is written
    exps: list[Experiment] = []
    best: tuple[float, Experiment, Lever, Decision] | None = None
    for t, lever, (a, b) in checked:
        failures = tuple(x[:MAX_NOTE_CHARS] for x in t.failures)  # stored: kept short (tune.MAX_NOTES)
        checks = [x[:MAX_NOTE_CHARS] for x in t.checked]
        verdict = Verdict(not failures, failures, tuple(checks), t.numbers_checked)
        dec = decide(a, b, verdict, lever.risk, gain, paired=True)
        arms = [
            {"arm": arm, "window_id": 0, "step_ms": value, "at_ns": time.time_ns(), "job_id": jid}
            for arm, value, jid in t.trials
        ]
        e = d.experiments.record(
            job.id, lever, "tune", "promoted" if dec.promote else "reverted", arms,
            {**decision_json(dec), "metric": metric[:MAX_NOTE_CHARS], "checked": checks},
        )  # fmt: skip
        exps.append(e)
        if dec.promote and dec.interval is not None and (best is None or dec.interval.speedup > best[0]):
            best = (dec.interval.speedup, e, lever, dec)
    policy, note = None, ""
    if best is None:
        note = "no lever was measurably faster with the outputs unchanged: nothing stored"
    elif not job.workload_id:
        note = (
            "not stored: gitmd never saw this job's steps (no capture window found them), so it "
            "has no workload to attach the policy to; run longer trials"
        )
    else:
        _, e, won, dec = best
        assert dec.interval is not None and isinstance(won, EnvLever)
        policy = d.library.add_policy(
            job.workload_id,
            won.values(),
            "validated",
            dec.interval.speedup,
            (dec.interval.low, dec.interval.high),
            {
                "source": "tune",
                "experiment": e.id,
                "job_id": job.id,
                "lever": won.describe(),
                "pairs": dec.interval.pairs,
                "metric": metric,
                "reason": dec.reason,
                "scope_uid": scope_uid,
                "by": actor,
                "scheduler_job_id": job.scheduler_job_id,
                "frameworks": d.jobs.workload_frameworks(job.workload_id),  # what it was learned with
            },
            gpu_model=d.gpu_model(),
            driver=d.backend.driver_version() or "",
        )
        note = f"stored as policy {policy.id} of workload {job.workload_id}" + (
            f" for uid {scope_uid}'s launches" if scope_uid is not None else " for every launch"
        )
    audit.append(
        audit_row(actor, None, "tune", "ok", job.id, {"experiments": [e.id for e in exps], "note": note})
    )
    return exps, policy, job.workload_id, note
