"""`gitmctl tune [--budget S] -- CMD ARGS`: find the launch settings that make CMD faster with its
outputs unchanged, in short interleaved trials, and store the winner in gitmd's library.

The trials run here, as you (gitmd never runs your command). The first run is the reference: it is
captured, and gitmd's attribution of it picks the levers its causes select, tried first; the other
launch levers of gitmd's catalog (ListLevers) follow while the budget lasts (``--only-causes`` stops
after the selected ones). For each lever, ``--rounds`` pairs of runs alternate their order (AB, BA,
...); the metric is each run's wall time, or the last number ``--time REGEX`` finds on its stdout
(lower is better); under the equivalence contract (``--metric``, ``--output``, ``--output-numeric``;
the exit status always) gitmd compares each treatment run's outputs, as read here, with its pair's
baseline's (CompareOutputs). gitmd decides from those figures (promote only when the bootstrap
interval's lower bound clears min_gain and the outputs held), keeps the experiments, and stores the
best lever as a policy of the workload: your later launches of the command (`gitmctl run`) get it
at once. A numerics-changing lever (TF32) is tried only with a contract that compares numbers.
Progress goes to stderr; the command's own output is kept in a directory named at the start (``-v``
shows it instead).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from gitmctl import render
from gitmctl.client import Client, ClientError, pb
from gitmctl.commands.run import _contract, _gpus, add_contract_args
from gitmctl.launch import is_number, job_environment

NAME = "tune"
MAX_OUTPUT_BYTES = 64 << 20  # of an output file checksummed
# of an output file compared as numbers: gitmd compares (CompareOutputs) both runs' contents in one
# message of at most 80 MiB
MAX_NUMERIC_BYTES = 38 << 20
MAX_METRIC_VALUES = 1_000_000  # numbers of a stdout metric sent to be compared (gitmd takes as many)
PROBE_AFTER_S = 3.0  # into the reference run: past start-up, in its steady steps


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        NAME, parents=[common], help="try launch settings on a command in interleaved trials; keep the best"
    )
    p.add_argument("--budget", type=float, default=900.0, help="seconds of trials at most (default 900)")
    p.add_argument("--rounds", type=int, default=3, help="pairs of runs per lever (default 3, at least 3)")
    p.add_argument("--levers", default="", help="only these launch levers, comma-separated")
    p.add_argument(
        "--only-causes", action="store_true", help="only the levers the reference run's causes select"
    )
    p.add_argument(
        "--time", metavar="REGEX", help="the metric: a number on stdout (last match), lower is better"
    )
    p.add_argument(
        "--min-gain", type=float, default=0.0, help="required speedup, e.g. 0.03 (default: gitmd's)"
    )
    p.add_argument("--name", default="", help="job name (default: the command's basename)")
    p.add_argument("--launch-key", default="", help="what makes runs the same job (default: the script)")
    p.add_argument("--gpus", type=_gpus, default=(), help="GPU indices the command uses, e.g. 0,1")
    add_contract_args(p)
    p.add_argument("-v", "--verbose", action="store_true", help="show the command's output")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


@dataclass
class Trial:
    value: float
    wall_s: float
    exit_code: int
    job_id: str
    metrics: dict[str, list[float]] = field(default_factory=dict)  # stdout metric regex -> numbers
    files: dict[str, bytes] = field(default_factory=dict)  # numeric output file -> contents
    digests: dict[str, bytes] = field(default_factory=dict)  # checksummed output file -> SHA-256

    def outputs(self, checks: list[Any]) -> Any:
        """What the run produced that ``checks`` compare (a pb.RunOutputs)."""
        out = pb.RunOutputs(exit_status=self.exit_code)
        for c in checks:
            if c.kind == "stdout_metric" and c.regex in self.metrics:
                out.metrics.add(regex=c.regex, values=self.metrics[c.regex])
            elif c.kind == "output_file" and c.compare == "numeric" and c.path in self.files:
                out.files.add(path=c.path, data=self.files[c.path])
            elif c.kind == "output_file" and c.path in self.digests:
                out.files.add(path=c.path, sha256=self.digests[c.path])
        return out


def _segments(checks: list[Any]) -> list[list[Any]]:
    """The contract's checks in order, each numeric output file's check alone: one CompareOutputs
    request each, so no request carries two files' contents twice."""
    out: list[list[Any]] = []
    run: list[Any] = []
    for c in checks:
        if c.kind == "output_file" and c.compare == "numeric":
            if run:
                out.append(run)
                run = []
            out.append([c])
        else:
            run.append(c)
    if run:
        out.append(run)
    return out


@dataclass
class Candidate:
    lever: Any  # a pb.Lever of the catalog (ListLevers), tried with its default setting
    why: str
    trials: list[tuple[str, Trial]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    checked: set[str] = field(default_factory=set)
    numbers: bool = False


def _say(msg: str) -> None:
    print(f"gitmctl tune: {msg}", file=sys.stderr, flush=True)


class Tuner:
    def __init__(self, args: argparse.Namespace, client: Client, command: list[str]) -> None:
        self.args = args
        self.client = client
        self.command = command
        self.cwd = os.getcwd()
        self.contract_pb = json_format.ParseDict(_contract(args, self.cwd), pb.EquivalenceContract())
        self.checks = list(self.contract_pb.checks) or [pb.EquivalenceCheck(kind="exit_status")]
        self.time_rx = re.compile(args.time) if args.time else None
        self.logs = Path(tempfile.mkdtemp(prefix="gitm-tune-"))
        self.started = time.monotonic()
        self.runs = 0
        self.causes: list[Any] = []
        self.current: tuple[str, subprocess.Popen[bytes]] | None = None  # the trial running now

    def interrupted(self) -> None:
        """Ctrl-C: the trial running now (it got the SIGINT too) ends as a job, not as a leftover."""
        if self.current is None:
            return
        job_id, child = self.current
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        try:
            self.client.call(
                self.client.stub.ReportJobExit,
                pb.ReportJobExitRequest(job_id=job_id, exit_code=child.returncode),
            )
        except ClientError:
            pass

    # -- one run -------------------------------------------------------------------------------
    def trial(self, env_extra: dict[str, str], capture: bool, label: str) -> Trial:
        resp = self.client.call(
            self.client.stub.RegisterJob,
            pb.RegisterJobRequest(
                name=self.args.name,
                command=self.command,
                cwd=self.cwd,
                uid=os.getuid(),
                gid=os.getgid(),
                capture=capture,
                launch_key=self.args.launch_key,
                gpus=self.args.gpus,
                contract=self.contract_pb,
                allow_exploration=False,  # nothing else may change under a trial
            ),
        )
        env = job_environment(os.environ, {**resp.plan.env, **env_extra})
        self.runs += 1
        log = self.logs / f"{self.runs:03d}-{label}.log"
        t0 = time.monotonic()
        with open(log, "wb") as err:
            child = subprocess.Popen(
                self.command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None if self.args.verbose else err,
            )
            self.current = (resp.job_id, child)
            probe = None
            if capture:
                probe = threading.Thread(target=self._probe, args=(resp.job_id, child), daemon=True)
                probe.start()
            stdout, _ = child.communicate()
            self.current = None
        seconds = time.monotonic() - t0
        if probe is not None:
            probe.join(timeout=30)
        log.write_bytes(log.read_bytes() + b"\n--- stdout ---\n" + stdout)
        if self.args.verbose:
            sys.stderr.write(stdout.decode("utf-8", "replace"))
        code = child.returncode
        try:
            self.client.call(
                self.client.stub.ReportJobExit, pb.ReportJobExitRequest(job_id=resp.job_id, exit_code=code)
            )
        except ClientError as e:
            _say(f"could not report the exit of trial job {resp.job_id}: {e}")
        text = stdout.decode("utf-8", "replace")
        value = seconds
        if self.time_rx is not None:
            found = [m for m in self.time_rx.findall(text) if is_number(m)]
            if not found:
                raise ClientError(f"--time {self.args.time!r} found no number in the output ({log})", 2)
            value = float(found[-1])
        trial = Trial(value, seconds, code, resp.job_id)
        for c in self.checks:
            if c.kind == "stdout_metric":
                found = [float(m) for m in re.findall(c.regex, text) if is_number(m)]
                trial.metrics[c.regex] = found[:MAX_METRIC_VALUES]
            elif c.kind == "output_file":
                numeric = c.compare == "numeric"
                try:
                    with open(c.path, "rb") as f:
                        data = f.read(MAX_NUMERIC_BYTES if numeric else MAX_OUTPUT_BYTES)
                except OSError:
                    continue  # missing: the contract reports it
                if numeric:
                    trial.files[c.path] = data
                else:
                    trial.digests[c.path] = hashlib.sha256(data).digest()
        return trial

    def compare(self, a: Trial, b: Trial) -> tuple[list[str], list[str], bool]:
        """gitmd's verdict on a pair's outputs under the contract (CompareOutputs): where they
        differ, what was compared, and whether numbers were."""
        failures: list[str] = []
        checked: list[str] = []
        numbers = False
        for checks in _segments(self.checks):
            v = self.client.call(
                self.client.stub.CompareOutputs,
                pb.CompareOutputsRequest(
                    contract=pb.EquivalenceContract(checks=checks),
                    baseline=a.outputs(checks),
                    treatment=b.outputs(checks),
                ),
            )
            failures += v.failures
            checked += v.checked
            numbers = numbers or v.numbers_checked
        return failures, checked, numbers

    def _probe(self, job_id: str, child: subprocess.Popen[bytes]) -> None:
        """While the reference run runs: gitmd's attribution of its steady state — the latest
        window once one has found its step (gitmd's duty windows look for it). Until then, from
        PROBE_AFTER_S after its first CUDA process, the latest window's attribution stands in, so a
        run whose step is never found is still judged before it ends. A program whose first steps
        come late (fp32 MLP training on the H200, 2026-12-03: no kernel in its first 10 s) is not
        judged on its start-up."""
        seen = None
        while child.poll() is None:
            try:
                job = self.client.call(self.client.stub.GetJob, pb.GetJobRequest(job_id=job_id))
            except ClientError:
                return
            if job.processes and seen is None:
                seen = time.monotonic()
            steady = job.step.found and job.step.steps > 0
            if seen is not None and (steady or time.monotonic() - seen >= PROBE_AFTER_S):
                try:
                    att = self.client.call(
                        self.client.stub.GetAttribution, pb.GetAttributionRequest(job_id=job_id)
                    )
                except ClientError as e:
                    if child.poll() is None:
                        _say(f"no attribution of the reference run ({e}); trying the launch levers in "
                             "catalog order")  # fmt: skip
                    return
                self.causes = [c for c in att.causes if c.above_threshold]
                if steady:
                    return
            time.sleep(0.5)

    # -- the whole tune -------------------------------------------------------------------------
    def candidates(self) -> list[Candidate]:
        catalog = self.client.call(self.client.stub.ListLevers, pb.ListLeversRequest()).levers
        launch = {lv.name: lv for lv in catalog if lv.launch and lv.env}
        wanted = [x.strip() for x in self.args.levers.split(",") if x.strip()]
        for n in wanted:
            if n not in launch:
                raise ClientError(
                    f"--levers: {n!r} is not a launch lever (known: {', '.join(sorted(launch))})", 2
                )
        out: list[Candidate] = []
        seen: set[str] = set()
        for c in self.causes:
            for n in c.levers:
                if n in launch and n not in seen and (not wanted or n in wanted):
                    seen.add(n)
                    out.append(
                        Candidate(launch[n], f"{c.name} cost {100 * c.share:.0f}% of the reference run")
                    )
        if not self.args.only_causes:
            for n in wanted or sorted(launch):
                if n not in seen:
                    seen.add(n)
                    out.append(Candidate(launch[n], "asked for" if wanted else "catalog"))
        numbers = any(c.kind in ("stdout_metric", "output_file", "payload") for c in self.checks)
        kept = []
        for cand in out:
            if cand.lever.risk == "numerics-changing" and not numbers:
                _say(
                    f"skipping {cand.lever.name}: it changes numerics and the contract compares no numbers "
                    "(give --metric REGEX or --output-numeric PATH)"
                )
                continue
            kept.append(cand)
        return kept

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.started)

    def run(self) -> tuple[Trial, list[Candidate]]:
        _say(f"reference run (captured); logs in {self.logs}")
        ref = self.trial({}, capture=True, label="reference")
        if ref.exit_code != 0:
            raise ClientError(
                f"the command failed (exit {ref.exit_code}); nothing to tune (log: {self.logs})", 1
            )
        _say(f"reference: {ref.value:.3f} {self.unit()}")
        for c in self.causes:
            _say(
                f"cause: {c.name} ({100 * c.share:.0f}% of the window) -> {', '.join(c.levers) or 'no lever'}"
            )
        cands = self.candidates()
        typical = ref.wall_s
        done: list[Candidate] = []
        for i, cand in enumerate(cands, 1):
            need = 2 * self.args.rounds * max(typical, 0.1)
            if need > self.left():
                _say(f"budget: {self.left():.0f} s left, {need:.0f} s needed per lever; stopping before "
                     f"{', '.join(c.lever.name for c in cands[i - 1:])}")  # fmt: skip
                break
            env = dict(cand.lever.env)  # gitmd's site directory too, when the lever needs it
            shown = {v: env[v] for v in cand.lever.variables if v in env}
            _say(f"[{i}/{len(cands)}] {cand.lever.name} ({cand.why}): {shown}")
            for r in range(self.args.rounds):
                pair: dict[str, Trial] = {}
                for arm in ("A", "B") if r % 2 == 0 else ("B", "A"):
                    t = self.trial(
                        env if arm == "B" else {}, capture=False, label=f"{cand.lever.name}-{arm}{r}"
                    )
                    pair[arm] = t
                    cand.trials.append((arm, t))
                    _say(f"    round {r + 1}/{self.args.rounds} {arm}: {t.value:.3f} {self.unit()}")
                failures, checked, numbers = self.compare(pair["A"], pair["B"])
                cand.failures += [f"round {r + 1}: {f}" for f in failures]
                cand.checked |= set(checked)
                cand.numbers = cand.numbers or numbers
            typical = statistics.median(t.wall_s for _, t in cand.trials)
            done.append(cand)
        return ref, done

    def unit(self) -> str:
        return "s" if self.time_rx is None else f"(/{self.args.time}/)"


def run(args: argparse.Namespace, client: Client) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(
            "gitmctl tune: no command given (usage: gitmctl tune [--budget S] -- CMD ARGS)", file=sys.stderr
        )
        return 2
    if args.rounds < 3:
        print("gitmctl tune: --rounds must be at least 3 (a decision needs three pairs)", file=sys.stderr)
        return 2
    if not args.budget > 0:
        print("gitmctl tune: --budget must be a positive number of seconds", file=sys.stderr)
        return 2
    if args.time:
        try:
            if re.compile(args.time).groups != 1:
                raise re.error("needs exactly one capture group")
        except re.error as e:
            print(f"gitmctl tune: --time: {e}", file=sys.stderr)
            return 2
    client.timeout_s = max(client.timeout_s, 30.0)  # the reference attribution takes a window
    tuner = Tuner(args, client, command)
    try:
        ref, done = tuner.run()
    except KeyboardInterrupt:
        tuner.interrupted()
        _say(f"interrupted: nothing recorded (the runs' logs are in {tuner.logs})")
        return 130
    if not done:
        _say("no lever was tried; nothing to record")
        if args.json:
            print(json.dumps({"reference": ref.value, "experiments": [], "note": "no lever tried"}))
        return 0
    req = pb.RecordTuneRequest(
        job_id=ref.job_id,
        metric=args.time or "wall seconds",
        min_gain=args.min_gain,
        levers=[
            pb.TuneLever(
                lever=c.lever.name,
                setting_json="{}",  # the catalog's default setting
                trials=[
                    pb.TuneTrial(arm=a, value=t.value, job_id=t.job_id, exit_code=t.exit_code)
                    for a, t in c.trials
                ],
                checked=sorted(c.checked),
                failures=c.failures,
                numbers_checked=c.numbers,
            )
            for c in done
        ],
    )
    resp = client.call(client.stub.RecordTune, req)
    if args.json:
        render.print_json(resp)
        return 0
    render.table(
        ("LEVER", "STATE", "SPEEDUP", "95% CI", "PAIRS", "WHY"),
        [
            (
                e.lever,
                e.state,
                f"{e.speedup:.3f}x" if e.HasField("speedup") else "-",
                f"{e.ci_low:.3f}-{e.ci_high:.3f}" if e.HasField("ci_low") else "-",
                str(e.pairs or "-"),
                e.reason[:90],
            )
            for e in resp.experiments
        ],
    )
    print(resp.note)
    if resp.HasField("policy"):
        env = " ".join(f"{k}={v}" for k, v in sorted(resp.policy.env.items()))
        print(f"policy {resp.policy.id}: {env}  (later `gitmctl run` launches of this command get it)")
    return 0
