"""The gRPC servicer: one line per method. It converts and calls the service; no logic lives here.

Errors of the project's hierarchy become status codes here, in one place (``_errors``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from gitmd.api import convert
from gitmd.api.pb import pb, pb_grpc
from gitmd.errors import GitmdError, InvalidArgumentError, NotFoundError
from gitmd.experiments import equivalence
from gitmd.jobs.registry import Registration
from gitmd.service import Service

log = logging.getLogger(__name__)

_CODES: tuple[tuple[type[GitmdError], grpc.StatusCode], ...] = (
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
)

F = TypeVar("F", bound=Callable[..., Any])


def _errors(fn: F) -> F:
    @functools.wraps(fn)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(self, request, context)
        except GitmdError as e:
            for cls, code in _CODES:
                if isinstance(e, cls):
                    context.abort(code, str(e))
            log.exception("%s failed", fn.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")

    return unary  # type: ignore[return-value]


def _stream_errors(fn: F) -> F:
    @functools.wraps(fn)
    def streaming(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from fn(self, request, context)
        except GitmdError as e:
            for cls, code in _CODES:
                if isinstance(e, cls):
                    context.abort(code, str(e))
            context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")

    return streaming  # type: ignore[return-value]


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


class GitmdServicer(pb_grpc.GitmdServicer):
    def __init__(self, service: Service) -> None:
        self.svc = service

    @_errors
    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.status_to_pb(self.svc.status())

    @_errors
    def ListGpus(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ListGpusResponse(
            gpus=[convert.gpu_to_pb(g) for g in self.svc.gpus()],
            backend=self.svc.backend.name,
            driver_version=self.svc.backend.driver_version(),
        )

    @_errors
    def GetTelemetry(self, request: Any, context: grpc.ServicerContext) -> Any:
        page = self.svc.telemetry(
            _opt(request, "gpu_index"), request.since_unix_ns, request.until_unix_ns, request.limit
        )
        return pb.GetTelemetryResponse(
            samples=[convert.sample_to_pb(s) for s in page.samples], truncated=page.truncated
        )

    @_stream_errors
    def WatchTelemetry(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        watch = self.svc.watch_telemetry(_opt(request, "gpu_index"))
        context.add_callback(watch.cancel)
        for sample in watch:
            yield convert.sample_to_pb(sample)

    @_errors
    def RegisterJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        contract = equivalence.validate(
            [
                equivalence.Check(c.kind, c.rtol, c.atol, c.regex, c.path, c.compare)
                for c in request.contract.checks
            ]
        )
        view, plan = self.svc.register_job(
            Registration(
                name=request.name,
                command=tuple(request.command),
                cwd=request.cwd,
                uid=request.uid,
                gid=request.gid,
                capture=request.capture,
                launch_key=request.launch_key,
                gpus=tuple(request.gpus),
                contract=contract,
                allow_exploration=request.allow_exploration
                if request.HasField("allow_exploration")
                else True,
                scheduler_job_id=request.scheduler_job_id,
            )
        )
        return pb.RegisterJobResponse(
            job_id=view.job.id, plan=convert.plan_to_pb(plan), job=convert.job_to_pb(view)
        )

    @_errors
    def ReportJobExit(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.job_to_pb(self.svc.report_exit(request.job_id, request.exit_code))

    @_errors
    def ListJobs(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ListJobsResponse(
            jobs=[convert.job_to_pb(v) for v in self.svc.list_jobs(request.all)],
            untracked=[convert.untracked_to_pb(u) for u in self.svc.untracked_processes()],
        )

    @_errors
    def GetJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.job_to_pb(self.svc.get_job(request.job_id))

    @_stream_errors
    def TraceJob(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        result = self.svc.trace_job(request.job_id, request.duration_s, request.raw)
        for chunk in result.chunks:
            yield pb.TraceChunk(data=chunk)
        summary = dict(result.summary)
        steps = summary.pop("step", None)
        msg = pb.TraceSummary(**summary)
        if steps is not None:
            msg.step.CopyFrom(convert.steps_to_pb(steps))
        yield pb.TraceChunk(summary=msg)

    @_errors
    def ListWorkloads(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ListWorkloadsResponse(workloads=[convert.workload_to_pb(w) for w in self.svc.workloads()])

    @_errors
    def GetWorkload(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.workload_to_pb(self.svc.workload(request.workload_id))

    @_errors
    def PinPolicy(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.policy_to_pb(self.svc.pin_policy(request.policy_id, "operator"))

    @_errors
    def UnpinPolicy(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.policy_to_pb(self.svc.unpin_policy(request.policy_id))

    @_errors
    def RevertPolicy(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.policy_to_pb(self.svc.revert_policy(request.policy_id))

    @_errors
    def ExportLibrary(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.LibraryDocument(json=self.svc.export_library())

    @_errors
    def ImportLibrary(self, request: Any, context: grpc.ServicerContext) -> Any:
        workloads, policies = self.svc.import_library(request.json)
        return pb.ImportLibraryResponse(workloads_added=workloads, policies_added=policies)

    @_stream_errors
    def WatchJobs(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        watch = self.svc.watch_jobs(request.job_id)
        context.add_callback(watch.cancel)
        for event in watch:
            yield pb.JobEvent(kind=event.kind, at_unix_ns=event.at_ns, job=convert.job_to_pb(event.view))

    @_errors
    def GetAttribution(self, request: Any, context: grpc.ServicerContext) -> Any:
        return convert.attribution_to_pb(self.svc.attribution(request.job_id, request.window_id))
