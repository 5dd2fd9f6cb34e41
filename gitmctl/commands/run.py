"""`gitmctl run [--name N] -- CMD ARGS`: register with gitmd, run CMD with the launch plan's
environment, pass stdin/stdout/stderr through, and exit with CMD's status.

If gitmd cannot be reached the command runs exactly as it would without gitmd (a note on stderr);
if gitmd refuses the registration (a bad contract or name), nothing runs and the exit status is 2.
SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to CMD; SIGINT and SIGQUIT from the terminal
reach CMD directly (same process group), so gitmctl ignores them and waits for CMD.

With ``--metric REGEX`` CMD's stdout passes through gitmctl (a pipe, not the terminal) so the
numbers it prints can be reported with the exit: across runs of a recurring job they are the
outputs gitmd's launch trials compare (gitmd never reads a job's stdout itself). When gitmd puts
this launch in a launch trial, a note on stderr says which arm it got. A run that gets no capture
window goes without the shim, gitmd's clock library in its place: the launcher names a file the
library stamps with each process's CUDA start, and reports the run's length from there with the
exit (cuda_s), beside its exec-to-exit time (wall_s).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitmctl import launch_client
from gitmctl.errors import EXIT_ERROR, EXIT_USAGE, ClientError
from gitmctl.launch import (
    clock_file,
    is_number,
    job_environment,
    process_age_s,
    read_clock,
    read_site_report,
    site_report_file,
)

NAME = "run"
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
MAX_METRIC_VALUES = 100_000


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="run a command as a gitmd job (captured by the shim)")
    p.add_argument("--name", default="", help="job name (default: the command's basename)")
    p.add_argument("--no-capture", action="store_true", help="register without injecting the shim")
    p.add_argument("-v", "--verbose", action="store_true", help="say the job id and plan on stderr")
    p.add_argument(
        "--gpus",
        type=_gpus,
        default=(),
        help="GPU indices (nvidia-smi's) the job may use, e.g. 0,1: gitmd sets CUDA_VISIBLE_DEVICES to them "
        "(by UUID) and acts on those GPUs only",
    )
    p.add_argument("--launch-key", default="", help="what makes runs the same job (default: the script)")
    p.add_argument("--scheduler-job-id", default="", help="the scheduler's id for this job (e.g. Slurm's)")
    p.add_argument("--no-explore", action="store_true", help="only known-good policies: no experiments")
    p.add_argument(
        "--background",
        action="store_true",
        help="yield the GPU to foreground jobs: gitmd may hold this job's kernel launches part of the time",
    )
    add_contract_args(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def add_contract_args(p: argparse.ArgumentParser) -> None:
    """The equivalence contract's options (run and tune share them)."""
    p.add_argument("--metric", metavar="REGEX", help="equivalence: a number on stdout, one capture group")
    p.add_argument(
        "--output",
        metavar="PATH",
        action="append",
        default=[],
        help="equivalence: an output file that must not change (checksum); repeatable",
    )
    p.add_argument(
        "--output-numeric",
        metavar="PATH",
        action="append",
        default=[],
        help="equivalence: a numeric output (npy/text) compared within --rtol; repeatable",
    )
    p.add_argument(
        "--rtol", type=float, default=1e-5, help="relative tolerance for --metric/--output-numeric"
    )


def _gpus(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indices: {text!r}") from None


def _contract(args: argparse.Namespace, cwd: str) -> dict[str, Any]:
    """The run's equivalence contract (an EquivalenceContract in protobuf's JSON mapping)."""
    checks: list[dict[str, Any]] = []
    if args.metric:
        checks.append({"kind": "stdout_metric", "regex": args.metric, "rtol": args.rtol})
    for path in args.output:
        checks.append({"kind": "output_file", "path": os.path.join(cwd, path), "compare": "checksum"})
    for path in args.output_numeric:
        checks.append(
            {"kind": "output_file", "path": os.path.join(cwd, path), "compare": "numeric", "rtol": args.rtol}
        )
    if checks:
        checks.append({"kind": "exit_status"})
    return {"checks": checks}


def _note(msg: str) -> None:
    print(f"gitmctl run: {msg}", file=sys.stderr, flush=True)


def run_command(args: argparse.Namespace, socket_path: Path, timeout_s: float) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("gitmctl run: no command given (usage: gitmctl run [--name N] -- CMD ARGS)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    registered = False  # gitmd answered: the run is its job
    job_id = ""
    resp: dict[str, Any] = {}
    plan: dict[str, Any] = {}
    try:
        resp = launch_client.call(
            socket_path,
            "RegisterJob",
            {
                "name": args.name,
                "gpus": list(args.gpus),
                "launch_key": args.launch_key,
                "scheduler_job_id": args.scheduler_job_id,
                "allow_exploration": not args.no_explore,
                "background": args.background,
                "contract": _contract(args, os.getcwd()),
                "command": command,
                "cwd": os.getcwd(),
                "uid": os.getuid(),
                "gid": os.getgid(),
                "capture": not args.no_capture,
                "cpus": sorted(os.sched_getaffinity(0)),
            },
            timeout_s,
        )
        # every scalar and list is in the answer; a message (plan, job, contract) only when set
        job_id = str(resp["job_id"])
        plan = resp.get("plan") or {}
        registered = True
        env = job_environment(os.environ, plan.get("env") or {})
        for w in plan.get("warnings") or ():
            _note(w)
        if args.verbose:
            name = (resp.get("job") or {}).get("name", "")
            _note(f"job {job_id} ({name}), capture {'on' if plan.get('capture') else 'off'}")
        if plan.get("trial"):
            _note(plan["trial"])
        if int(plan.get("policy_id") or 0):
            _note(
                f"known workload {plan.get('workload_id', '')}: launching with its "
                f"{plan.get('policy_status', '')} policy {plan['policy_id']}"
            )
        if plan.get("cpus"):
            _pin([int(c) for c in plan["cpus"]])
    except ClientError as e:
        if e.exit_code in (EXIT_USAGE, EXIT_ERROR):
            # our request was wrong (a bad contract, a bad name): say so and run nothing
            print(f"gitmctl run: {e}", file=sys.stderr)
            return e.exit_code
        _note(f"{str(e).splitlines()[0]}; running the command untraced")  # gitmd unreachable
    # With a stdout metric in the contract, stdout passes through a pipe so its numbers can be
    # reported at exit (gitmd never sees a job's stdout): the launch trials' contract needs them.
    # The contract is the run's flags, or the one its workload's owner gave once (library contract).
    metric = args.metric
    if not metric and job_id:
        checks = ((resp.get("job") or {}).get("contract") or {}).get("checks") or ()
        metric = next((c.get("regex", "") for c in checks if c.get("kind") == "stdout_metric"), "")
    try:
        scan = [re.compile(metric)] if metric and registered else []
    except re.error:
        scan = []  # gitmd checked it; never stop the job over it
    report = site_report_file(env, plan.get("env") or {}) if registered else ""
    stamps = clock_file(env, plan.get("env") or {}, os.environ) if registered else ""
    # this launcher's own time before the exec (the interpreter's start, imports, registration): a
    # part of what gitmd costs the run, reported with the exit (launcher_s)
    before_s = process_age_s()
    started = time.monotonic_ns()
    try:
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE if scan else None)
    except BaseException as e:
        if report:
            read_site_report(report)  # removed
        if stamps:
            read_clock(stamps, 0, 0)  # removed
        if not isinstance(e, OSError):
            raise
        print(f"gitmctl run: cannot run {command[0]!r}: {e.strerror}", file=sys.stderr)
        code = 127 if isinstance(e, FileNotFoundError) else 126
        _report(socket_path, timeout_s, job_id, code, args.verbose)
        return code

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    found: list[float] = []
    if scan and child.stdout is not None:
        out = sys.stdout.buffer
        for line in iter(child.stdout.readline, b""):
            try:
                out.write(line)
                out.flush()
            except (BrokenPipeError, ValueError):
                pass  # our reader went away: the job runs on; keep scanning
            if len(found) < MAX_METRIC_VALUES:
                found += [float(m) for m in scan[0].findall(line.decode("utf-8", "replace")) if is_number(m)]
    status = child.wait()
    ended = time.monotonic_ns()
    wall_s = (ended - started) / 1e9  # the run's length where gitmd gave it no shim
    # and from its CUDA start, where gitmd gave it the clock library instead
    cuda_s = read_clock(stamps, started, ended) if stamps else None
    # protobuf's JSON mapping writes a non-finite double as a string ("NaN", "Infinity")
    values = [
        v if math.isfinite(v) else ("NaN" if v != v else "Infinity" if v > 0 else "-Infinity") for v in found
    ]
    metrics = [{"regex": metric, "values": values}] if scan else []
    site = None
    if report:
        loaded, acted = read_site_report(report)
        site = {"loaded": loaded, "acted": acted}
    launcher_s = None if before_s is None else before_s + (time.monotonic_ns() - ended) / 1e9
    if args.verbose and launcher_s is not None:
        _note(f"the launcher's own time around the command: {1000 * launcher_s:.0f} ms")
    _report(socket_path, timeout_s, job_id, status, args.verbose, metrics, wall_s, site, cuda_s, launcher_s)
    return 128 - status if status < 0 else status


def _pin(cpus: list[int]) -> None:
    """The plan's CPUs for the command, from its exec: this launcher's own affinity, which the child
    inherits (gitmctl only waits for it). Where they cannot be set, the command runs where it would
    have, and gitmd sets them once its processes show."""
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        _note(f"could not run on CPUs {cpus} ({e.strerror}); gitmd sets them once the job's processes show")
        return
    _note(f"running on CPUs {','.join(map(str, cpus))} (the policy's cpu_affinity)")


def _report(
    socket_path: Path,
    timeout_s: float,
    job_id: str,
    status: int,
    verbose: bool,
    metrics: list[dict[str, Any]] | None = None,
    wall_s: float = 0.0,
    site: dict[str, Any] | None = None,
    cuda_s: float | None = None,
    launcher_s: float | None = None,
) -> None:
    """The run's exit to gitmd (nothing where it was not registered: ``job_id`` empty)."""
    if not job_id:
        return
    request: dict[str, Any] = {
        "job_id": job_id,
        "exit_code": status,
        "metrics": metrics or [],
        "wall_s": wall_s,
        "cuda_s": cuda_s or 0.0,
        "launcher_s": launcher_s or 0.0,
    }
    if site is not None:
        request["site"] = site
    try:
        launch_client.call(socket_path, "ReportJobExit", request, timeout_s)
    except ClientError as e:
        if verbose:
            _note(f"could not report the exit to gitmd: {e}")
