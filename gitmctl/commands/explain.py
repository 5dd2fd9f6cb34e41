"""`gitmctl explain JOB` (the job's latest window, judged against its earlier ones) or
`gitmctl explain --capture FILE [--history FILE ...]` (capture files from `gitmctl trace --raw`, sent
to gitmd, which analyses them as it does a job's windows and keeps nothing): where the window's
time went per process — a bar per class, the step, the top kernels, pageable copies and what
pinned memory would save —, then the causes of lost time ranked by cost with their evidence, the
Granger tests that support them, and the lever classes each cause selects."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from gitmctl import render
from gitmctl.client import EXIT_USAGE, Client, ClientError, pb

NAME = "explain"
BAR = 40
LABELS = {
    "kernels": "GPU: kernels",
    "copies": "GPU: copies",
    "launch_gaps": "idle: launch gaps",
    "sync_stall": "idle: after syncs",
    "allocator": "idle: after alloc/free",
}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="where a job's (or a capture file's) window time went")
    p.add_argument("job", nargs="?", help="job id or name (its latest capture window)")
    p.add_argument(
        "--capture",
        type=Path,
        help="explain a capture file instead (gitmctl trace --raw), sent to gitmd; it keeps nothing",
    )
    p.add_argument(
        "--history",
        type=Path,
        nargs="*",
        default=[],
        metavar="FILE",
        help="earlier capture files of the same job: the expected kernel durations come from them",
    )
    p.add_argument("--window", type=int, default=0, help="a window id of the job (default: the latest)")
    p.add_argument("--top", type=int, default=8, help="kernels to list (capture files)")
    p.add_argument("--tests", action="store_true", help="list every Granger test, not only significant ones")


MAX_SEND_BYTES = 78 << 20  # capture files of one request (gitmd takes messages of 80 MiB)


def capture(args: argparse.Namespace, client: Client) -> int:
    """The capture file's window, analysed by gitmd from the files' bytes (ExplainCapture)."""
    files = []
    for f in [*args.history, args.capture]:
        try:
            files.append(pb.CaptureFile(name=str(f), data=f.read_bytes()))
        except OSError as e:
            print(f"gitmctl explain: {f}: {e.strerror or e}", file=sys.stderr)
            return 2
    if sum(len(f.data) for f in files) > MAX_SEND_BYTES:
        print(
            f"gitmctl explain: the capture files are more than {MAX_SEND_BYTES >> 20} MiB together; "
            "give fewer --history files",
            file=sys.stderr,
        )
        return 2
    *history, current = files
    client.timeout_s = max(client.timeout_s, 120.0)  # the Granger tests of a long window take a while
    try:
        report = client.call(
            client.stub.ExplainCapture,
            pb.ExplainCaptureRequest(capture=current, history=history, top=max(0, args.top)),
        )
    except ClientError as e:
        if e.exit_code != EXIT_USAGE:
            raise
        print(f"gitmctl explain: {e}", file=sys.stderr)  # the file is no capture file gitmd can read
        return 2
    code = show(args, report, f"capture {args.capture}")
    if not args.json:
        for line in consent(client, report, None):
            print(line)
    return code


NUMERIC_CHECKS = ("stdout_metric", "output_file")


def consent(client: Client, a: Any, job: Any) -> list[str]:
    """For a cause above threshold whose levers change numerics (TF32, cuDNN autotuning), when the
    job's contract compares no numbers: what the lever may recover and the exact command that lets
    gitmd try it, outputs checked (convergence issue, item 4: an fp32 cause ranked and TF32, 2.7x
    on that program, never tried)."""
    if job is not None and any(c.kind in NUMERIC_CHECKS for c in job.contract.checks):
        return []  # its numbers are compared: gitmd may try them already
    try:
        levers = {lv.name: lv for lv in client.call(client.stub.ListLevers, pb.ListLeversRequest()).levers}
    except ClientError:
        return []
    cmd = shlex.join(job.command) if job is not None and job.command else "CMD ARGS"
    out: list[str] = []
    for c in a.causes:
        if not c.above_threshold:
            continue
        for name in c.levers:
            lv = levers.get(name)
            if lv is None or lv.risk != "numerics-changing" or not lv.launch:
                continue
            most = f", at most {1 / (1 - c.ceiling):.2f}x" if 0 < c.ceiling < 1 else ""
            out += [
                f"\nconsent: {name} ({lv.summary}) may recover up to {100 * c.share:.0f}% of the window "
                f"({c.name}{most}). It changes numerics, so gitmd tries it only on runs whose outputs it "
                "compares. Let it, with a regex for a number your program prints (its loss):",
                f"  gitmctl run --metric 'loss=([0-9.eE+-]+)' --rtol 1e-3 -- {cmd}",
            ]
            if job is not None and job.workload_id:
                out.append(
                    "  or once, for every later run of its workload: gitmctl library contract "
                    f"{job.workload_id} --metric 'loss=([0-9.eE+-]+)' --rtol 1e-3"
                )
    return out


def run(args: argparse.Namespace, client: Client) -> int:
    if args.capture:
        return capture(args, client)
    if not args.job:
        print("gitmctl explain: give a job id or name, or --capture FILE", file=sys.stderr)
        return 2
    if args.window < 0:
        print("gitmctl explain: --window must be a window id (>= 1)", file=sys.stderr)
        return 2
    try:
        report = client.call(
            client.stub.GetAttribution, pb.GetAttributionRequest(job_id=args.job, window_id=args.window)
        )
    except ClientError as e:
        if e.exit_code != EXIT_USAGE:
            raise
        # an ended or uncaptured job has no window to explain; what was tried on it still shows
        job = client.call(client.stub.GetJob, pb.GetJobRequest(job_id=args.job))
        exps = client.call(client.stub.GetExperiment, pb.GetExperimentRequest(job_id=job.id)).experiments
        if args.json:
            render.print_json(
                {"job_id": job.id, "attribution": str(e), "experiments": [render.to_dict(x) for x in exps]}
            )
            return 0
        print(f"job {job.id}: no attribution ({e})")
        tried(exps)
        return 0
    exps = client.call(client.stub.GetExperiment, pb.GetExperimentRequest(job_id=report.job_id)).experiments
    if args.json:
        out = render.to_dict(report)
        out["experiments"] = [render.to_dict(e) for e in exps]
        render.print_json(out)
        return 0
    code = show(args, report, f"job {report.job_id}")
    tried(exps)
    job = client.call(client.stub.GetJob, pb.GetJobRequest(job_id=report.job_id))
    for line in consent(client, report, job):
        print(line)
    return code


def tried(exps: Any) -> None:
    """What gitmd tried on the job, the figures, and why each change was kept or reverted."""
    if not exps:
        return
    print("\ntried:")
    for e in exps:
        figures = ""
        if e.HasField("speedup"):
            figures = f" {e.speedup:.3f}x (95% {e.ci_low:.3f}-{e.ci_high:.3f}, {e.pairs} pairs)"
        print(f"  #{e.id} {e.lever} {e.setting_json} for {e.cause or '-'}: {e.state}{figures}")
        if e.reason:
            print(f"      {e.reason}")


def show(args: argparse.Namespace, a: Any, what: str) -> int:
    if args.json:
        render.print_json(a)
        return 0
    print(f"{what}: window {a.window_id}")
    for p in a.processes:
        print(f"\npid {p.pid}, {p.window_ms:.2f} ms of records")
        for c in p.classes:
            bar = "#" * round(c.share * BAR)
            print(f"  {LABELS.get(c.name, c.name):<24} {bar:<{BAR}} {100 * c.share:5.1f}%")
        st = p.step
        if st.found:
            print(
                f"  step: {st.median_ms:.3f} ms median (p10 {st.p10_ms:.3f}, p90 {st.p90_ms:.3f}), "
                f"{st.steps} steps of {st.period_kernels} kernels, confidence {st.confidence:.2f}"
            )
        else:
            print(f"  step: none found ({st.reason})")
        if p.pageable_copies:
            print(
                f"  pageable copies: {p.pageable_copies}, {render.bytes_h(p.pageable_bytes)} in "
                f"{p.pageable_ms:.3f} ms; at pinned bandwidth ({p.pinned_gb_per_s:.1f} GB/s) "
                f"{p.pageable_saving_ms:.3f} ms less"
            )
        if p.allocations or p.frees:
            print(
                f"  allocator: {p.allocations} allocations, {p.frees} frees ({p.syncing_frees} synchronizing)"
            )
        if p.top_kernels:
            render.table(
                ("  KERNEL", "COUNT", "TOTAL ms", "SHARE"),
                [
                    ("  " + k.name[:80], str(k.count), f"{k.total_ms:.3f}", f"{100 * k.share:.1f}%")
                    for k in p.top_kernels
                ],
            )
    if not a.processes:
        print("no kernels or copies in the window")
    show_context(a)
    show_ranks(a)
    show_causes(a, getattr(args, "tests", False))
    for note in a.notes:
        print(f"note: {note}")
    return 0


def show_ranks(a: Any) -> None:
    """A distributed job's ranks stepping together, and the one the others wait for."""
    if not a.ranks:
        return
    print(f"\nranks stepping together ({len(a.ranks)}), ms a step:")
    print("  PID       STEP   OWN    COMPUTE  COMM   COPIES  GAPS   SYNC")
    for r in a.ranks:
        print(
            f"  {r.pid:<8} {r.step_ms:6.3f} {r.own_ms:6.3f} {r.compute_ms:7.3f}  {r.communication_ms:6.3f} "
            f"{r.copies_ms:6.3f}  {r.launch_gap_ms:6.3f} {r.sync_ms:6.3f}"
        )
    if a.HasField("straggler"):
        s = a.straggler
        print(
            f"straggler: pid {s.pid}, {s.lag_ms:.3f} ms a step ({100 * s.share:.0f}%) the others wait: "
            f"{s.why}"
        )
        if s.collectives:
            print(f"  it started last in {s.last_arrivals} of the {s.collectives} collectives every rank ran")
    else:
        print("no straggler: the ranks' own time a step is within 5% of each other")


def show_context(a: Any) -> None:
    if a.HasField("host"):
        h = a.host
        print(
            f"\nhost: {len(h.cores)} core(s) allowed, {h.threads} threads; "
            f"busiest thread {h.main_tid} waited for a CPU {100 * h.main_wait_share:.1f}% of the window; "
            f"other tasks used {100 * h.others_load:.0f}% of the job's cores"
        )
    if a.HasField("gpu"):
        g = a.gpu
        parts = [f"GPU {','.join(map(str, g.gpus))}: utilization {g.util_pct:.0f}%"]
        if g.throttled_share:
            parts.append(
                f"slowed down ({', '.join(g.throttle_reasons)}) {100 * g.throttled_share:.0f}% of samples"
            )
        if g.power_capped_share:
            parts.append(
                f"at its {g.power_limit_w:.0f} W power limit {100 * g.power_capped_share:.0f}% of samples"
            )
        if g.cotenants:
            parts.append(
                f"{g.cotenants} other process(es), active {100 * g.cotenant_share:.0f}% of samples "
                f"at {g.cotenant_sm_pct:.0f}% SM"
            )
        print("; ".join(parts))


def show_causes(a: Any, all_tests: bool) -> None:
    if not a.causes:
        return
    basis = f"{a.history_windows} earlier window(s)" if a.history_windows else "this window itself"
    above = [c for c in a.causes if c.above_threshold]
    print(
        f"\ncauses (pid {a.cause_pid}; threshold {100 * a.threshold:.0f}% of the window; "
        f"expected kernel durations from {basis}):"
    )
    if not above:
        print("  none above threshold")
    for c in a.causes:
        if not c.above_threshold and c.share < 0.01:
            continue
        mark = "*" if c.above_threshold else " "
        bar = "#" * round(min(1.0, c.share) * BAR)
        print(
            f"{mark} {c.name:<16} {bar:<{BAR}} {100 * c.share:5.1f}%  {c.ms:8.2f} ms  conf {c.confidence:.2f}"
        )
        for e in c.evidence:
            print(f"      {e}")
        if c.above_threshold:
            print("      levers: " + (", ".join(c.levers) or "none in the catalog"))
            if c.ceiling < 1.0:
                print(f"      at most {100 * c.ceiling:.0f}% of the job's time: a lever gains at most "
                      f"{1 / (1 - c.ceiling):.2f}x")  # fmt: skip
    tests = [t for t in a.tests if all_tests or t.significant]
    if tests:
        print("\nGranger tests" + ("" if all_tests else " (significant)") + ":")
        for t in tests:
            status = f"lag {t.lag}, p={t.p_value:.3g}, q={t.q_value:.3g}" if not t.note else t.note
            print(f"  {t.series:>18} -> {t.target:<16} {status}{' (differenced)' if t.differenced else ''}")
