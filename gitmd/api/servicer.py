"""The gRPC servicer: one line per method. It converts and calls the service; no logic lives here.

Every method first passes the gate (``gitmd.auth.gate``): the caller is established from the kernel
(or a client certificate), checked against the access table, and handed to the method, which checks
ownership of the job it touches. Errors of the project's hierarchy become status codes here, in one
place (``_abort``); refusals are audited.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from gitmd import capture_explain
from gitmd.api import convert, heap
from gitmd.api.pb import pb, pb_grpc
from gitmd.api.streams import CallSlots, StreamSlots
from gitmd.auth.access import ADMIN, Access, Caller
from gitmd.auth.gate import Gate
from gitmd.errors import (
    FailedPreconditionError,
    GitmdError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from gitmd.experiments import equivalence
from gitmd.experiments.tune import TunedLever
from gitmd.jobs.registry import Registration
from gitmd.levers import describe
from gitmd.service import Service
from gitmd.store import audit

log = logging.getLogger(__name__)
MAX_WALL_S = 1e8  # a launcher's wall clock for its command: over three years is not one

_CODES: tuple[tuple[type[GitmdError], grpc.StatusCode], ...] = (
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
)

Method = Callable[[Any, Any, grpc.ServicerContext, Caller], Any]  # (servicer, request, context, caller)
Handler = Callable[[Any, Any, grpc.ServicerContext], Any]  # what grpc calls


MAX_DETAILS = 2000  # a status message's most characters: one echoing a 10,000-character id was too
# large for gRPC's metadata, and the caller got RESOURCE_EXHAUSTED instead of NOT_FOUND


def _abort(context: grpc.ServicerContext, e: GitmdError, rpc: str) -> None:
    text = str(e)
    text = text if len(text) <= MAX_DETAILS else text[: MAX_DETAILS - 1] + "…"
    for cls, code in _CODES:
        if isinstance(e, cls):
            context.abort(code, text)
    log.exception("%s failed", rpc)
    context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")


def status_name(e: GitmdError) -> str:
    """The gRPC status code's name an error of the project's hierarchy is answered with."""
    return next((code.name for cls, code in _CODES if isinstance(e, cls)), grpc.StatusCode.INTERNAL.name)


def _rpc(fn: Method) -> Handler:
    """Unary: admit the caller through the gate, run, turn errors into status codes."""

    @functools.wraps(fn)
    def unary(self: GitmdServicer, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            caller = self.gate.admit(context, fn.__name__)
            with self.calls.hold(caller, fn.__name__):  # a worker thread while it runs
                return fn(self, request, context, caller)
        except GitmdError as e:
            _abort(context, e, fn.__name__)
        finally:
            heap.release(request)  # a large request's memory, answered or refused

    return unary


def _stream(fn: Method) -> Handler:
    @functools.wraps(fn)
    def streaming(self: GitmdServicer, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            caller = self.gate.admit(context, fn.__name__)
            with self.streams.hold(caller, fn.__name__):  # a worker thread for as long as it lasts
                yield from fn(self, request, context, caller)
        except GitmdError as e:
            _abort(context, e, fn.__name__)
        finally:
            heap.release(request)

    return streaming


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


class GitmdServicer(pb_grpc.GitmdServicer):
    def __init__(
        self, service: Service, gate: Gate, streams: StreamSlots | None = None, calls: CallSlots | None = None
    ) -> None:
        self.svc = service
        self.gate = gate
        self.streams = streams or StreamSlots(16)
        self.calls = calls or CallSlots(16)

    def call_as(self, caller: Caller, rpc: str, request: Any) -> Any:
        """A unary method for a caller admitted already (Gate.admit_peer: the launch socket), in
        one of the caller's call slots, as ``_rpc`` runs it for a gRPC call; its errors are raised
        (status_name says their code)."""
        fn = getattr(type(self), rpc).__wrapped__
        try:
            with self.calls.hold(caller, rpc):
                return fn(self, request, None, caller)
        finally:
            heap.release(request)

    # -- ownership -----------------------------------------------------------------------------
    def _deny(self, caller: Caller, rpc: str, target: str, why: str) -> PermissionDeniedError:
        self.gate.record(caller, rpc, "denied", target, why)
        return PermissionDeniedError(why)

    def _job_for(self, caller: Caller, rpc: str, id_or_name: str, detail: bool) -> Any:
        """The job, if the caller may read it (``detail``: inspect in detail or change it). A name or
        id prefix means one of the caller's own jobs unless they may read everyone's; a refusal
        names no one else (hardening issue, item 8: refusals told another user's job and uid)."""
        view = self.svc.get_job(id_or_name, self._scope(caller))
        job = view.job
        allowed = Access.may_touch_job(caller, job.uid) if detail else Access.may_read_job(caller, job.uid)
        if not allowed:
            raise self._deny(caller, rpc, job.id, self._not_yours(caller, job))
        return view

    @staticmethod
    def _scope(caller: Caller) -> int | None:
        """Whose jobs a name or id prefix is looked up among: everyone's for a caller that may read
        them all (readers, admins, schedulers), else the caller's own."""
        return None if caller.is_reader or caller.acts_for_others else caller.uid

    def _not_yours(self, caller: Caller, job: Any) -> str:
        if self._scope(caller) is None:
            return f"job {job.id} belongs to uid {job.uid}, not {caller.name}"
        return f"job {job.id} is not one of yours ({caller.name})"

    # -- daemon and telemetry (readers) --------------------------------------------------------
    @_rpc
    def GetStatus(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        return convert.status_to_pb(self.svc.status())

    @_rpc
    def SetPause(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        state = self._library_change(
            caller,
            "SetPause",
            "pause" if request.paused else "resume",
            lambda: self.svc.set_pause(request.paused, caller.name, request.reason),
        )
        return convert.pause_to_pb(state)

    @_rpc
    def ListGpus(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        return pb.ListGpusResponse(
            gpus=[convert.gpu_to_pb(g) for g in self.svc.gpus()],
            backend=self.svc.backend.name,
            driver_version=self.svc.backend.driver_version(),
        )

    @_rpc
    def GetTelemetry(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        page = self.svc.telemetry(
            _opt(request, "gpu_index"), request.since_unix_ns, request.until_unix_ns, request.limit
        )
        return pb.GetTelemetryResponse(
            samples=[convert.sample_to_pb(s) for s in page.samples], truncated=page.truncated
        )

    @_stream
    def WatchTelemetry(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Iterator[Any]:
        watch = self.svc.watch_telemetry(_opt(request, "gpu_index"))
        context.add_callback(watch.cancel)
        for sample in watch:
            yield convert.sample_to_pb(sample)

    # -- jobs (their owners; readers see summaries; schedulers act for users) ------------------
    @_rpc
    def RegisterJob(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        try:
            uid, gid = self.gate.access.registration_owner(caller, request.uid, request.gid)
        except PermissionDeniedError as e:
            raise self._deny(caller, "RegisterJob", "", str(e)) from None
        if len(request.cpus) > 65536 or any(c >= 65536 for c in request.cpus):
            raise InvalidArgumentError("cpus: at most 65536 CPU numbers, each below 65536")
        sid = request.scheduler_job_id
        if sid and not caller.acts_for_others and len(sid) <= 256:
            # a scheduler job's id is its user's to tag jobs with: one the scheduler said it started
            # for another user is refused (hardening issue, item 8: any user tagged jobs with any id)
            owner = self.svc.audit.scheduler_job_owner(sid)
            if owner is not None and owner != uid:
                raise self._deny(caller, "RegisterJob", "", f"scheduler job {sid[:64]!r} is not one of yours")
        contract = convert.contract_from_pb(request.contract)
        view, plan = self.svc.register_job(
            Registration(
                name=request.name,
                command=tuple(request.command),
                cwd=request.cwd,
                uid=uid,
                gid=gid,
                capture=request.capture,
                launch_key=request.launch_key,
                gpus=tuple(request.gpus),
                contract=contract,
                allow_exploration=request.allow_exploration
                if request.HasField("allow_exploration")
                else True,
                scheduler_job_id=request.scheduler_job_id,
                scheduler_closes=request.scheduler_closes and caller.acts_for_others,
                background=request.background,
                cpus=tuple(request.cpus),
                # the caller launches the job itself (it registers its own job, as gitmctl run does);
                # a scheduler registering for a user is not what waits for the job
                launcher_pid=caller.pid if caller.uid is not None and caller.uid == uid else 0,
            ),
            audit.row(caller.name, caller.uid, "RegisterJob", "ok", detail={"uid": uid, "gid": gid}),
        )
        return pb.RegisterJobResponse(
            job_id=view.job.id, plan=convert.plan_to_pb(plan), job=convert.job_to_pb(view)
        )

    @_rpc
    def ReportJobExit(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        job = self.svc.get_job(request.job_id, self._scope(caller)).job
        if not Access.may_close_job(caller, job.uid):
            raise self._deny(caller, "ReportJobExit", job.id, self._not_yours(caller, job))
        if len(request.metrics) > 32 or any(len(m.values) > 100_000 for m in request.metrics):
            raise InvalidArgumentError("at most 32 stdout metrics of at most 100000 values each")
        metrics = {m.regex[:1000]: [float(v) for v in m.values] for m in request.metrics}
        if not (0 <= request.wall_s <= MAX_WALL_S):  # NaN fails this too
            raise InvalidArgumentError(f"wall_s must be 0..{MAX_WALL_S:.0f} seconds")
        if not (0 <= request.cuda_s <= request.wall_s) and request.cuda_s:  # NaN fails this too
            raise InvalidArgumentError("cuda_s must be 0..wall_s seconds (a part of the run wall_s times)")
        if not (0 <= request.launcher_s <= MAX_WALL_S):  # NaN fails this too
            raise InvalidArgumentError(f"launcher_s must be 0..{MAX_WALL_S:.0f} seconds")
        site = convert.site_report(request) if request.HasField("site") else None
        view = self.svc.report_exit(
            job.id,
            request.exit_code,
            metrics,
            request.wall_s or None,
            site,
            request.cuda_s or None,
            request.launcher_s or None,
        )
        self.gate.record(
            caller, "ReportJobExit", "ok", job.id, f"exit {request.exit_code}", job.scheduler_job_id
        )
        return convert.job_to_pb(view)

    @_rpc
    def ListJobs(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        everyone = caller.is_reader or caller.acts_for_others
        views = self.svc.list_jobs(
            request.all or bool(request.scheduler_job_id),
            request.scheduler_job_id,
            uid=None if everyone else caller.uid,  # only the caller's own jobs are viewed
        )
        if not everyone:
            return pb.ListJobsResponse(jobs=[convert.job_to_pb(v) for v in views])
        return pb.ListJobsResponse(
            jobs=[convert.job_to_pb(v) for v in views],
            untracked=[convert.untracked_to_pb(u) for u in self.svc.untracked_processes()],
        )

    @_rpc
    def ReportSchedulerJob(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        sid = request.scheduler_job_id
        if not sid or len(sid) > 256 or "\0" in sid:
            raise InvalidArgumentError("scheduler_job_id must be 1..256 characters without NUL")
        detail = {"uid": request.uid, "gpus": list(request.gpus), "detail": request.detail[:1024]}
        if request.event == "start":
            self.gate.record(caller, "SchedulerJobStart", "ok", sid, json.dumps(detail), sid)
            return pb.SchedulerJobResponse()
        if request.event != "end":
            raise InvalidArgumentError('event must be "start" or "end"')
        closed = self.svc.close_scheduler_job(sid, request.exit_code)
        detail["closed"] = [v.job.id for v in closed]
        detail["exit_code"] = request.exit_code
        self.gate.record(caller, "SchedulerJobEnd", "ok", sid, json.dumps(detail), sid)
        return pb.SchedulerJobResponse(closed=[convert.job_to_pb(v) for v in closed])

    @_rpc
    def GetJob(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        return convert.job_to_pb(self._job_for(caller, "GetJob", request.job_id, detail=False))

    @_stream
    def WatchJobs(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Iterator[Any]:
        if request.job_id:
            job_id = self._job_for(caller, "WatchJobs", request.job_id, detail=False).job.id
        elif not caller.is_reader:
            raise self._deny(caller, "WatchJobs", "", "watching every job needs the reader role")
        else:
            job_id = ""
        watch = self.svc.watch_jobs(job_id)
        context.add_callback(watch.cancel)
        for event in watch:
            yield pb.JobEvent(kind=event.kind, at_unix_ns=event.at_ns, job=convert.job_to_pb(event.view))

    @_rpc
    def GetAttribution(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        job = self._job_for(caller, "GetAttribution", request.job_id, detail=True).job
        return convert.attribution_to_pb(self.svc.attribution(job.id, request.window_id))

    @_stream
    def TraceJob(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Iterator[Any]:
        job = self._job_for(caller, "TraceJob", request.job_id, detail=True).job
        result = self.svc.trace_job(job.id, request.duration_s, request.raw)
        self.gate.record(caller, "TraceJob", "ok", job.id, f"{request.duration_s:g} s", job.scheduler_job_id)
        for chunk in result.chunks:
            yield pb.TraceChunk(data=chunk)
        summary = dict(result.summary)
        steps = summary.pop("step", None)
        msg = pb.TraceSummary(**summary)
        if steps is not None:
            msg.step.CopyFrom(convert.steps_to_pb(steps))
        yield pb.TraceChunk(summary=msg)

    @_rpc
    def ExplainCapture(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        report = capture_explain.explain_capture(
            (request.capture.name[:256] or "the capture", request.capture.data),
            [(h.name[:256] or f"history file {i + 1}", h.data) for i, h in enumerate(request.history)],
            request.top if request.HasField("top") else 8,
        )
        return convert.attribution_to_pb(report)

    # -- the library (readers; changes need the admin role) -----------------------------------
    @_rpc
    def ListWorkloads(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        if request.fleet:  # what the fleet store knows, every node's (gitmctl library list --fleet)
            rows = self.svc.fleet_policies(request.limit or 100)
            return pb.ListWorkloadsResponse(fleet=[convert.fleet_policy_to_pb(r) for r in rows])
        return pb.ListWorkloadsResponse(workloads=[convert.workload_to_pb(w) for w in self.svc.workloads()])

    @_rpc
    def GetWorkload(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        w = self.svc.workload(request.workload_id)
        msg = convert.workload_to_pb(w)
        msg.launch_trials.extend(convert.trial_to_pb(t) for t in self.svc.trials.of_workload(msg.id))
        contract = equivalence.Contract()
        if caller.uid is not None:
            contract = self.svc.workload_contract(w.id, caller.uid)
        msg.contract.CopyFrom(convert.contract_to_pb(contract))
        msg.numerics_hints.extend(pb.NumericsHint(**h) for h in self.svc.numerics_hints(w, contract))
        return msg

    def _contract_uid(self, caller: Caller, rpc: str, target: str) -> int:
        if caller.uid is None:
            raise self._deny(caller, rpc, target, "a contract is a local user's consent for their own runs")
        return caller.uid

    @_rpc
    def SetWorkloadContract(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        uid = self._contract_uid(caller, "SetWorkloadContract", request.workload_id)
        contract = convert.contract_from_pb(request.contract)
        if any(c.kind != "stdout_metric" for c in contract.checks) or len(contract.checks) > 1:
            raise InvalidArgumentError(
                "a workload's contract compares one number its runs print (one stdout_metric): the "
                "files a run writes are not reported by every launcher (give them per run: gitmctl run "
                "--output)"
            )
        if contract.checks:
            contract = equivalence.Contract((*contract.checks, equivalence.Check("exit_status")))
        self._library_change(
            caller,
            "SetWorkloadContract",
            request.workload_id,
            lambda: self.svc.set_workload_contract(request.workload_id, uid, contract),
        )
        return convert.contract_to_pb(contract)

    @_rpc
    def GetWorkloadContract(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        uid = self._contract_uid(caller, "GetWorkloadContract", request.workload_id)
        self.svc.workload(request.workload_id)  # NOT_FOUND for no such workload
        return convert.contract_to_pb(self.svc.workload_contract(request.workload_id, uid))

    def _library_change(self, caller: Caller, rpc: str, target: str, action: Callable[[], Any]) -> Any:
        try:
            result = action()
        except GitmdError as e:
            self.gate.record(caller, rpc, "failed", target, str(e))
            raise
        self.gate.record(caller, rpc, "ok", target)
        return result

    @_rpc
    def PinPolicy(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        policy = self._library_change(
            caller,
            "PinPolicy",
            str(request.policy_id),
            lambda: self.svc.pin_policy(request.policy_id, caller.name),
        )
        return convert.policy_to_pb(policy)

    @_rpc
    def UnpinPolicy(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        policy = self._library_change(
            caller, "UnpinPolicy", str(request.policy_id), lambda: self.svc.unpin_policy(request.policy_id)
        )
        return convert.policy_to_pb(policy)

    @_rpc
    def RevertPolicy(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        policy = self._library_change(
            caller, "RevertPolicy", str(request.policy_id), lambda: self.svc.revert_policy(request.policy_id)
        )
        return convert.policy_to_pb(policy)

    @_rpc
    def ExportLibrary(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        return pb.LibraryDocument(json=self.svc.export_library())

    @_rpc
    def ImportLibrary(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        workloads, policies = self._library_change(
            caller, "ImportLibrary", "", lambda: self.svc.import_library(request.json)
        )
        return pb.ImportLibraryResponse(workloads_added=workloads, policies_added=policies)

    # -- interventions and experiments (the job's owner; readers see; admins revert any) ---------
    @_rpc
    def ListInterventions(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        if request.job_id:
            job_id = self._job_for(caller, "ListInterventions", request.job_id, detail=False).job.id
            ivs = self.svc.interventions.list(job_id, request.pending_only)
        else:
            ivs = self.svc.interventions.list("", request.pending_only)
            if not caller.is_reader:
                mine = {j.id for j in self.svc.jobs.list(include_exited=True) if j.uid == caller.uid}
                ivs = [iv for iv in ivs if iv.job_id in mine]
        return pb.ListInterventionsResponse(interventions=[convert.intervention_to_pb(iv) for iv in ivs])

    @_rpc
    def RevertIntervention(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        try:
            iv = self.svc.interventions.get(request.intervention_id)
        except KeyError:
            raise NotFoundError(f"no intervention {request.intervention_id}") from None
        self._job_for(caller, "RevertIntervention", iv.job_id, detail=True)
        return convert.intervention_to_pb(self.svc.revert_intervention(iv.id, caller.name))

    @_rpc
    def GetExperiment(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        if request.experiment_id:
            try:
                exps = [self.svc.experiments.get(request.experiment_id)]
            except KeyError:
                raise NotFoundError(f"no experiment {request.experiment_id}") from None
            self._job_for(caller, "GetExperiment", exps[0].job_id, detail=False)
        else:
            job_id = self._job_for(caller, "GetExperiment", request.job_id, detail=False).job.id
            exps = self.svc.experiments.of_job(job_id)
        return pb.ListExperimentsResponse(experiments=[convert.experiment_to_pb(e) for e in exps])

    @_rpc
    def RecordTune(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        job = self._job_for(caller, "RecordTune", request.job_id, detail=True).job
        levers = []
        for t in request.levers:
            try:
                setting = json.loads(t.setting_json or "{}")
            except ValueError:
                raise InvalidArgumentError(f"{t.lever}: setting_json is not JSON") from None
            levers.append(
                TunedLever(
                    t.lever,
                    setting,
                    tuple((x.arm, x.value, x.job_id) for x in t.trials),
                    tuple(t.checked),
                    tuple(t.failures),
                    t.numbers_checked,
                )
            )
        # An admin's results serve every launch of the workload; anyone else's only their own.
        scope = None if ADMIN in caller.roles else (caller.uid if caller.uid is not None else -1)
        exps, policy, workload_id, note = self.svc.record_tune(
            job.id, request.metric[:1000], levers, request.min_gain, scope, caller.name
        )
        resp = pb.RecordTuneResponse(
            experiments=[convert.experiment_to_pb(e) for e in exps], workload_id=workload_id, note=note
        )
        if policy is not None:
            resp.policy.CopyFrom(convert.policy_to_pb(policy))
        return resp

    @_rpc
    def CompareOutputs(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        contract = convert.contract_from_pb(request.contract)
        baseline = convert.outputs_from_pb(request.baseline, "baseline")
        treatment = convert.outputs_from_pb(request.treatment, "treatment")
        return convert.verdict_to_pb(equivalence.evaluate(contract, baseline, treatment))

    @_rpc
    def ListLevers(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        return pb.ListLeversResponse(levers=[convert.lever_to_pb(x) for x in describe.catalog()])

    # -- access ---------------------------------------------------------------------------------
    @_rpc
    def WhoAmI(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        return pb.WhoAmIResponse(name=caller.name, uid=caller.uid, roles=sorted(caller.roles))

    @_rpc
    def ListAudit(self, request: Any, context: grpc.ServicerContext, caller: Caller) -> Any:
        entries = self.svc.audit.list(
            request.limit or 100, request.target, request.scheduler_job_id, request.before_id
        )
        return pb.ListAuditResponse(entries=[convert.audit_to_pb(e) for e in entries])
