"""Conversions between the service's dataclasses and protobuf messages; plain functions."""

from __future__ import annotations

import json
from typing import Any

from gitmd.analysis.causes import THRESHOLD
from gitmd.analysis.report import CLASSES, WindowReport
from gitmd.analysis.steps import JobSteps, StepStats
from gitmd.api.pb import pb
from gitmd.errors import InvalidArgumentError
from gitmd.experiments import equivalence
from gitmd.experiments.interventions import Intervention
from gitmd.experiments.live import Experiment
from gitmd.experiments.runs import LaunchTrial
from gitmd.jobs.discovery import UntrackedProcess
from gitmd.jobs.launch import LaunchPlan
from gitmd.levers.describe import LeverInfo
from gitmd.levers.launch_env import SiteReport
from gitmd.service import JobView, Status
from gitmd.store.audit import AuditEntry
from gitmd.store.library import Policy, Workload
from gitmd.store.pause import PauseState
from gitmd.telemetry.backend import BYTE_METRICS, FLOAT_METRICS, GpuInfo, GpuSample

_OPTIONAL_SAMPLE_FIELDS = (*FLOAT_METRICS, *BYTE_METRICS)


def _optional(msg: Any, src: Any, *fields: str) -> Any:
    """Set proto3 optional fields that have a value; absent stays absent (never a fake 0)."""
    for f in fields:
        v = getattr(src, f)
        if v is not None:
            setattr(msg, f, v)
    return msg


def status_to_pb(s: Status) -> Any:
    return pb.GetStatusResponse(
        version=s.version,
        uptime_s=s.uptime_s,
        started_at_unix_ns=s.started_at_ns,
        backend=s.backend,
        gpu_count=s.gpu_count,
        driver_version=s.driver_version,
        socket_path=s.socket_path,
        state_dir=s.state_dir,
        sample_interval_s=s.sample_interval_s,
        samples_taken=s.samples_taken,
        sample_field_errors=s.sample_field_errors,
        config=s.config,
        pid=s.pid,
        pause=pause_to_pb(s.pause),
        config_toml=s.config_toml,
    )


def pause_to_pb(p: PauseState) -> Any:
    return pb.PauseState(paused=p.paused, by=p.by, reason=p.reason, since_unix_ns=p.since_ns)


def gpu_to_pb(g: GpuInfo) -> Any:
    msg = pb.Gpu(
        index=g.index,
        name=g.name,
        uuid=g.uuid,
        pci_bus_id=g.pci_bus_id,
        vendor=g.vendor,
        memory_total_bytes=g.memory_total_bytes,
    )
    return _optional(msg, g, "sm_clock_max_mhz", "mem_clock_max_mhz", "power_limit_mw")


def sample_to_pb(s: GpuSample) -> Any:
    msg = pb.TelemetrySample(
        gpu_index=s.gpu_index,
        uuid=s.uuid,
        ts_unix_ns=s.ts_ns,
        clock_event_reasons=list(s.clock_event_reasons),
        downsampled=s.downsampled,
        aggregated_samples=s.aggregated_samples,
    )
    _optional(msg, s, *_OPTIONAL_SAMPLE_FIELDS)
    for p in s.processes:
        _optional(msg.processes.add(pid=p.pid, name=p.name), p, "used_memory_bytes")
    for e in s.errors:
        msg.errors.add(field=e.field, message=e.message)
    return msg


def job_to_pb(view: JobView) -> Any:
    j = view.job
    msg = pb.Job(
        id=j.id,
        name=j.name,
        command=list(j.command),
        cwd=j.cwd,
        uid=j.uid,
        state=j.state,
        created_unix_ns=j.created_ns,
        ended_unix_ns=j.ended_ns or 0,
        runtime_dir=j.runtime_dir,
        capture=j.capture,
        windows=view.windows,
        launch_key=j.launch_key,
        workload_id=j.workload_id,
        policy_id=view.policy_id,
        gpus=list(j.gpus),
        allow_exploration=j.allow_exploration,
        scheduler_job_id=j.scheduler_job_id,
        user=j.user,
        background=j.background,
        run_s=j.run_s or 0.0,
        crash=j.crash,
        phase=j.phase,
        cost_json=j.cost,
        wall_s=j.wall_s or 0.0,
    )
    for c in j.contract.checks:
        msg.contract.checks.add(
            kind=c.kind, rtol=c.rtol, atol=c.atol, regex=c.regex, path=c.path, compare=c.compare
        )
    _optional(msg, j, "exit_code")
    if view.steps is not None:
        msg.step.CopyFrom(steps_to_pb(view.steps))
    for status, alive in view.processes:
        proc = msg.processes.add(
            pid=status.pid,
            start_time_ticks=status.start_time_ticks,
            status=status.status,
            reason=status.reason,
            records_written=status.records_written,
            ring_drops=status.ring_drops,
            cupti_drops=status.cupti_drops,
            missing_timestamps=status.missing_timestamps,
            alive=alive,
            windows_opened=status.windows_opened,
            detaches=status.detaches,
            gpus=view.gpus.get(status.pid, ()),
        )
        rank = view.ranks.get(status.pid)
        if rank is not None:
            proc.rank, proc.world_size = rank.rank, rank.world_size
            if rank.local_rank is not None:
                proc.local_rank = rank.local_rank
    return msg


def steps_to_pb(steps: JobSteps) -> Any:
    msg = _step_fields(steps.stats)
    msg.pid = steps.pid
    msg.window_id = steps.window_id
    msg.anchor_kernel = steps.anchor_kernel
    return msg


def plan_to_pb(plan: LaunchPlan) -> Any:
    return pb.LaunchPlan(
        env=plan.env,
        warnings=list(plan.warnings),
        capture=plan.capture,
        workload_id=plan.workload_id,
        policy_id=plan.policy_id,
        policy_status=plan.policy_status,
        trial=plan.trial,
        cpus=list(plan.cpus),
    )


def policy_to_pb(p: Policy) -> Any:
    msg = pb.Policy(
        id=p.id,
        workload_id=p.workload_id,
        env=p.env,
        status=p.status,
        gpu_model=p.gpu_model,
        driver=p.driver,
        created_unix_ns=p.created_ns,
        updated_unix_ns=p.updated_ns,
        pinned_by=p.pinned_by,
        evidence_json=json.dumps(p.evidence),
        live_json=json.dumps(list(p.live)),
    )
    return _optional(msg, p, "speedup", "ci_low", "ci_high")


def workload_to_pb(w: Workload) -> Any:
    active = w.active_policy
    return pb.Workload(
        id=w.id,
        name=w.name,
        step_families=list(w.signature.sequence),
        first_seen_unix_ns=w.first_seen_ns,
        last_seen_unix_ns=w.last_seen_ns,
        run_count=w.run_count,
        launch_keys=list(w.launch_keys),
        policies=[policy_to_pb(p) for p in w.policies],
        active_policy_id=active.id if active else 0,
        active_reason=w.choice(),
    )


def contract_to_pb(c: equivalence.Contract) -> Any:
    msg = pb.EquivalenceContract()
    for x in c.checks:
        msg.checks.add(kind=x.kind, rtol=x.rtol, atol=x.atol, regex=x.regex, path=x.path, compare=x.compare)
    return msg


def fleet_policy_to_pb(r: dict[str, Any]) -> Any:
    msg = pb.FleetPolicy(
        origin=r["origin"],
        node=r["node"],
        workload_name=r["workload_name"],
        gpu_model=r["gpu_model"],
        env=r["env"],
        live_json=json.dumps(r["live"]),
        created_unix_ns=r["created_ns"],
        state=r["state"],
        local_policy_id=r["local_policy_id"],
    )
    for k in ("speedup", "ci_low", "ci_high"):
        if r[k] is not None:
            setattr(msg, k, r[k])
    for o in r["outcomes"]:
        out = msg.outcomes.add(node=o["node"], held=o["held"], suspect=o["suspect"], reason=o["reason"])
        if o["speedup"] is not None:
            out.speedup = o["speedup"]
    return msg


def site_report(request: Any) -> SiteReport:
    """A ReportJobExitRequest's site report, checked (a launcher's word on its own job: bounded)."""
    acted = tuple(request.site.acted)
    try:
        return SiteReport(bool(request.site.loaded), acted)
    except ValueError as e:
        raise InvalidArgumentError(f"site: {e} (got {len(acted)})") from None


def trial_to_pb(t: LaunchTrial) -> Any:
    d = t.decision
    msg = pb.LaunchTrial(
        id=t.id,
        lever=t.lever,
        setting_json=json.dumps(t.setting, sort_keys=True),
        cause=t.cause,
        state=t.state,
        reason=str(d.get("reason", "")),
    )
    for r in t.runs:
        run = msg.runs.add(job_id=r["job_id"], arm=r["arm"], done=bool(r.get("done")))
        if r.get("step_ms") is not None:
            run.step_ms = float(r["step_ms"])
        if r.get("run_s") is not None:
            run.run_s = float(r["run_s"])
        if r.get("exit_code") is not None:
            run.exit_code = int(r["exit_code"])
        run.crashed = str(r.get("crashed", ""))
        run.unpaired = str(r.get("unpaired", ""))
    msg.cause_share = t.cause_share
    if t.bound != float("inf"):
        msg.predicted_max = t.bound
    if t.predicted > 0:
        msg.predicted = t.predicted
    for field, key in (("speedup", "speedup"), ("ci_low", "low"), ("ci_high", "high")):
        if d.get(key) is not None:
            setattr(msg, field, float(d[key]))
    return msg


def untracked_to_pb(u: UntrackedProcess) -> Any:
    msg = pb.UntrackedProcess(
        pid=u.pid,
        gpu_index=u.gpu_index,
        name=u.name,
        user=u.user,
        command=list(u.command),
        cwd=u.cwd,
        reason=u.reason,
        relaunch=u.relaunch,
    )
    return _optional(msg, u, "used_memory_bytes")


def _step_fields(st: StepStats) -> Any:
    return pb.StepStats(
        found=st.found,
        reason=st.reason,
        period_kernels=st.period_kernels,
        steps=st.steps,
        median_ms=st.median_ns / 1e6,
        p10_ms=st.p10_ns / 1e6,
        p90_ms=st.p90_ns / 1e6,
        confidence=st.confidence,
    )


def attribution_to_pb(rep: WindowReport) -> Any:
    msg = pb.Attribution(
        job_id=rep.job_id,
        window_id=rep.window_id,
        notes=rep.notes,
        cause_pid=rep.cause_pid,
        threshold=THRESHOLD,
        history_windows=rep.history_windows,
        kernel_excess_ms=rep.residuals.excess_ns / 1e6 if rep.residuals is not None else 0.0,
    )
    for r in rep.ranks:
        msg.ranks.add(
            pid=r.pid, step_ms=r.step_ms, compute_ms=r.compute_ms, communication_ms=r.communication_ms,
            copies_ms=r.copies_ms, launch_gap_ms=r.launch_gap_ms, sync_ms=r.sync_ms, own_ms=r.own_ms,
        )  # fmt: skip
    if (s := rep.straggler) is not None:
        msg.straggler.CopyFrom(
            pb.Straggler(
                pid=s.pid, lag_ms=s.lag_ms, share=s.share, why=s.why, last_arrivals=s.last_arrivals,
                collectives=s.collectives,
            )
        )  # fmt: skip
    for c in rep.causes:
        msg.causes.add(
            name=c.name,
            ms=c.cost_ns / 1e6,
            share=c.share,
            confidence=c.confidence,
            above_threshold=c.above_threshold,
            evidence=list(c.evidence),
            levers=list(c.levers),
            ceiling=c.ceiling,
        )
    for t in rep.tests:
        msg.tests.add(
            target=t.target,
            series=t.series,
            lag=t.lag,
            p_value=t.p_value,
            q_value=t.q_value,
            significant=t.significant,
            differenced=t.differenced,
            note=t.note,
        )
    if (h := rep.host) is not None:
        msg.host.CopyFrom(
            pb.HostContext(
                cores=list(h.cores),
                threads=h.threads,
                main_tid=h.main_tid,
                main_wait_share=h.main_wait_share,
                job_wait_ms=h.job_wait_ns / 1e6,
                others_load=h.others_load,
                samples=h.samples,
            )
        )
    if (g := rep.gpu) is not None:
        msg.gpu.CopyFrom(
            pb.GpuContext(
                gpus=list(g.gpus),
                throttled_share=g.throttled_share,
                throttle_reasons=list(g.reasons),
                power_capped_share=g.power_capped_share,
                power_limit_w=g.power_limit_w,
                cotenants=g.cotenants,
                cotenant_share=g.cotenant_share,
                cotenant_sm_pct=g.cotenant_sm_pct,
                util_pct=g.util_pct,
                samples=g.samples,
            )
        )
    for p in rep.processes:
        b = p.breakdown
        shares = b.shares()
        step = _step_fields(p.step)
        step.pid = p.pid
        step.window_id = rep.window_id
        msg.processes.add(
            pid=p.pid,
            window_ms=b.window_ns / 1e6,
            classes=[
                pb.TimeClass(name=c, share=shares[c], ms=shares[c] * b.window_ns / 1e6) for c in CLASSES
            ],
            step=step,
            pageable_copies=b.pageable_copies,
            pageable_bytes=b.pageable_bytes,
            pageable_ms=b.pageable_ns / 1e6,
            pageable_saving_ms=b.pageable_saving_ns / 1e6,
            pinned_gb_per_s=b.pinned_bytes_per_s / 1e9,
            allocations=b.alloc_count,
            frees=b.free_count,
            syncing_frees=b.syncing_frees,
            syncs=b.sync_count,
            top_kernels=[
                pb.KernelTime(name=k.name, count=k.count, total_ms=k.total_ns / 1e6, share=k.share)
                for k in p.top_kernels
            ],
        )
    return msg


def audit_to_pb(e: AuditEntry) -> Any:
    return pb.AuditEntry(
        id=e.id,
        at_unix_ns=e.at_ns,
        actor=e.actor,
        actor_uid=e.actor_uid,
        action=e.action,
        target=e.target,
        outcome=e.outcome,
        detail=e.detail,
        scheduler_job_id=e.scheduler_job_id,
    )


def intervention_to_pb(iv: Intervention) -> Any:
    return pb.Intervention(
        id=iv.id,
        job_id=iv.job_id,
        experiment_id=iv.experiment_id or 0,
        lever=iv.lever,
        kind=iv.kind,
        setting_json=json.dumps(iv.setting, sort_keys=True),
        state=iv.state,
        reason=iv.reason,
        created_unix_ns=iv.created_ns,
        updated_unix_ns=iv.updated_ns,
    )


def experiment_to_pb(e: Experiment) -> Any:
    d = e.decision
    return pb.Experiment(
        id=e.id,
        job_id=e.job_id,
        lever=e.lever,
        setting_json=json.dumps(e.setting, sort_keys=True),
        cause=e.cause,
        state=e.state,
        arms=[
            pb.ExperimentArm(
                arm=a["arm"],
                window_id=int(a.get("window_id") or 0),
                step_ms=a.get("step_ms"),
                # an arm carried from an earlier run's trial has neither window nor time here
                at_unix_ns=int(a.get("at_ns") or 0),
                carried_from=int(a.get("from") or 0),
            )
            for a in e.arms
        ],
        promote=bool(d.get("promote", False)),
        reason=str(d.get("reason", "")),
        speedup=d.get("speedup"),
        ci_low=d.get("low"),
        ci_high=d.get("high"),
        pairs=int(d.get("pairs", 0)),
        created_unix_ns=e.created_ns,
        updated_unix_ns=e.updated_ns,
    )


def lever_to_pb(info: LeverInfo) -> Any:
    return pb.Lever(
        name=info.name,
        kind=info.kind,
        risk=info.risk,
        summary=info.summary,
        changes=info.changes,
        causes=info.causes,
        launch=info.launch,
        live=info.live,
        host_only=info.host_only,
        defaults_json=json.dumps(dict(info.defaults), sort_keys=True),
        env=dict(info.env),
        variables=info.variables,
        counterpart=info.counterpart,
        acts_through=info.acts_through,
    )


def contract_from_pb(msg: Any) -> equivalence.Contract:
    """A request's equivalence contract, checked (InvalidArgumentError when it cannot be evaluated)."""
    return equivalence.validate(
        [equivalence.Check(c.kind, c.rtol, c.atol, c.regex, c.path, c.compare) for c in msg.checks]
    )


# numbers per stdout metric, and payload samples, of one run (the first MAX_COMPARED are compared,
# every one is looked at for NaN and Inf)
MAX_OUTPUT_VALUES = 1_000_000


def outputs_from_pb(msg: Any, which: str) -> equivalence.Outputs:
    """A run's outputs as a client read them (``which``: "baseline" or "treatment", for messages)."""
    if len(msg.metrics) > equivalence.MAX_CHECKS or len(msg.files) > equivalence.MAX_CHECKS:
        raise InvalidArgumentError(f"{which}: at most {equivalence.MAX_CHECKS} metrics and files")
    if len(msg.payloads) > MAX_OUTPUT_VALUES or any(len(m.values) > MAX_OUTPUT_VALUES for m in msg.metrics):
        raise InvalidArgumentError(f"{which}: at most {MAX_OUTPUT_VALUES} values per metric and payload")
    if any(len(m.regex) > 1000 for m in msg.metrics) or any(len(f.path) > 4096 for f in msg.files):
        raise InvalidArgumentError(f"{which}: a metric's regex or a file's path is too long")
    files: dict[str, bytes] = {}
    digests: dict[str, bytes] = {}
    for f in msg.files:
        if f.sha256 and len(f.sha256) != 32:
            raise InvalidArgumentError(f"{which}: file {f.path}: sha256 must be 32 bytes")
        if f.sha256 and not f.data:
            digests[f.path] = bytes(f.sha256)
        else:
            files[f.path] = bytes(f.data)
    return equivalence.Outputs(
        exit_status=msg.exit_status if msg.HasField("exit_status") else None,
        payloads=tuple(msg.payloads),
        files=files,
        metrics={m.regex: tuple(m.values) for m in msg.metrics},
        digests=digests,
    )


def verdict_to_pb(v: equivalence.Verdict) -> Any:
    return pb.CompareOutputsResponse(
        ok=v.ok, failures=v.failures, checked=v.checked, numbers_checked=v.numbers_checked
    )
