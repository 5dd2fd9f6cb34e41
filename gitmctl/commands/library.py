"""`gitmctl library list|show|pin|unpin|revert|contract|export|import`: the workloads gitmd knows, their
policies, and the contract a workload's runs are held to."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from gitmctl import render
from gitmctl.client import Client, pb
from gitmd.jobs.launch_key import COMMAND_SEP

MAX_IMPORT_BYTES = 16 << 20  # gitmd.store.library_document.MAX_IMPORT_BYTES (a test holds them equal)

NAME = "library"


def keys_text(keys: Any) -> str:
    """A workload's launch keys for people: each stated key, and each program with how many of its
    exact command lines resolve to the workload ("python /w/train.py (3 command lines)")."""
    stated: list[str] = []
    lines: dict[str, int] = {}
    for k in keys:
        base, sep, _ = k.partition(COMMAND_SEP)
        if sep:
            lines[base] = lines.get(base, 0) + 1
        else:
            stated.append(k)
    out = [*stated]
    for base, n in lines.items():
        out.append(f"{base} ({n} command line{'s' if n > 1 else ''})")
    return ", ".join(out)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        NAME, parents=[common], help="workloads and their policies (list, show, pin, export...)"
    )
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = acts.add_parser("list", parents=[common], help="every workload (--fleet: every node's policies)")
    ls.add_argument(
        "--fleet", action="store_true", help="what the fleet store knows: each policy, its node, how it held"
    )
    ls.add_argument("--limit", type=int, default=100, help="with --fleet: the newest N policies (100)")
    show = acts.add_parser("show", parents=[common], help="one workload with its policies")
    show.add_argument("workload")
    for verb, text in (
        ("pin", "use this policy for its workload"),
        ("unpin", "back to validated"),
        ("revert", "never use this policy again"),
    ):
        a = acts.add_parser(verb, parents=[common], help=text)
        a.add_argument("policy", type=int)
    ct = acts.add_parser(
        "contract",
        parents=[common],
        help="hold your later runs of the workload to a number they print (lets gitmd try TF32...)",
        description="Given once, kept for your later runs of the workload whose launch gives no "
        "contract of its own: gitmd may then try numerics-changing levers (TF32, cuDNN autotuning) on "
        "them, and keeps one only if the number holds. It covers your own runs only. With no --metric: "
        "shows it; --clear: removes it.",
    )
    ct.add_argument("workload")
    ct.add_argument("--metric", default="", help="a number on stdout, one capture group (e.g. its loss)")
    ct.add_argument("--rtol", type=float, default=None, help="relative tolerance for --metric (1e-3)")
    ct.add_argument("--clear", action="store_true", help="remove your contract for the workload")
    ex = acts.add_parser("export", parents=[common], help="the library as a versioned JSON document")
    ex.add_argument("-o", "--output", type=Path, help="file (default: stdout)")
    im = acts.add_parser(
        "import", parents=[common], help="merge a document (validated first; never replaces a pin)"
    )
    im.add_argument("file", type=Path, help="the document, or - for standard input")


def contract_text(c: Any) -> str:
    """A contract in one line, as `gitmctl run` flags would give it."""
    parts = []
    for x in c.checks:
        if x.kind == "stdout_metric":
            parts.append(f"--metric {shlex.quote(x.regex)} --rtol {x.rtol:g}")
        elif x.kind == "output_file":
            flag = "--output-numeric" if x.compare == "numeric" else "--output"
            rtol = f" --rtol {x.rtol:g}" if x.compare == "numeric" else ""
            parts.append(f"{flag} {shlex.quote(x.path)}{rtol}")
    return " ".join(parts) or ("exit status" if c.checks else "none")


def consent_lines(workload_id: str, hints: Any) -> list[str]:
    """What each numerics-changing lever may recover on the workload, and the command that lets
    gitmd try it on its later runs (the convergence issue's item 4)."""
    out = []
    for h in hints:
        most = f", at most {1 / (1 - h.ceiling):.2f}x" if 0 < h.ceiling < 1 else ""
        out += [
            f"consent: {h.lever} ({h.summary}) may recover up to {100 * h.share:.0f}% of a window "
            f"({h.cause}{most}, run {h.job_id}). It changes numerics, so gitmd tries it only on runs "
            "whose outputs it compares. Let it, for this workload's later runs, with a number your "
            "program prints (its loss):",
            f"  gitmctl library contract {workload_id} --metric 'loss=([0-9.eE+-]+)' --rtol 1e-3",
        ]
    return out


def _contract(args: argparse.Namespace, client: Client) -> int:
    if args.rtol is not None and not args.metric:
        print("gitmctl library contract: --rtol goes with --metric", file=sys.stderr)
        return 2
    if args.metric and args.clear:
        print("gitmctl library contract: --clear takes no --metric", file=sys.stderr)
        return 2
    c = pb.EquivalenceContract()
    if args.metric:
        c.checks.add(kind="stdout_metric", regex=args.metric, rtol=1e-3 if args.rtol is None else args.rtol)
    wid = args.workload
    if not c.checks and not args.clear:  # show it
        got = client.call(client.stub.GetWorkloadContract, pb.GetWorkloadRequest(workload_id=wid))
        if args.json:
            render.print_json(got)
        else:
            print(f"workload {wid}: your runs' contract: {contract_text(got)}")
        return 0
    got = client.call(
        client.stub.SetWorkloadContract, pb.SetWorkloadContractRequest(workload_id=wid, contract=c)
    )
    if args.json:
        render.print_json(got)
    elif args.clear:
        print(f"workload {wid}: your contract removed; your runs are held to what their launch gives")
    else:
        print(f"workload {wid}: your later runs are held to {contract_text(got)} when their launch "
              "gives no contract; numerics-changing levers may be tried on them")  # fmt: skip
    return 0


def _trial_run(r: Any) -> str:
    if r.crashed:
        return f"{r.arm}:crashed"
    if r.unpaired:  # no run of its command line came to pair with it
        return f"{r.arm}:unpaired"
    if r.HasField("run_s"):
        return f"{r.arm}:{r.run_s:.1f}"
    if r.HasField("step_ms"):  # a trial decided on capture windows, before the run's own clock
        return f"{r.arm}:{r.step_ms:.2f}ms/step"
    return f"{r.arm}:{'-' if r.done else '…'}"


def _source(evidence: dict[str, Any]) -> str:
    """Where a policy came from: a live trial or a launch trial here, `gitmctl tune`, an import, or
    another node through the fleet (its node)."""
    src = str(evidence.get("source") or "-")
    if src == "fleet":
        suspect = evidence.get("suspect")
        flag = f" (suspect on {suspect.get('node', '?')})" if isinstance(suspect, dict) else ""
        return f"fleet: {evidence.get('node', '?')}{flag}"
    return src


def _policy_row(p: Any, active: int) -> tuple[str, ...]:
    speed = f"{p.speedup:.3f}x" if p.HasField("speedup") else "-"
    evidence = json.loads(p.evidence_json or "{}")
    if evidence.get("unconfirmed"):
        speed += " (unconfirmed)"
    ci = f"[{p.ci_low:.3f}, {p.ci_high:.3f}]" if p.HasField("ci_low") and p.HasField("ci_high") else "-"
    env = " ".join(f"{k}={v}" for k, v in sorted(p.env.items()))
    for item in json.loads(p.live_json or "[]"):
        args = ",".join(f"{k}={v}" for k, v in sorted(item.get("setting", {}).items()))
        env += f" live:{item['lever']}" + (f"({args})" if args else "")
    status = p.status + (" *" if p.id == active else "")
    return (str(p.id), status, speed, ci, p.gpu_model or "-", _source(evidence), env)


def _held(evidence: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """How a policy held on each node that tried it on its own runs: this node's confirmation of a
    policy from the fleet, the others' (evidence.nodes), a suspicion another node raised."""
    rows = []
    mine = evidence.get("confirmed")
    if isinstance(mine, dict):
        rows.append(("this node", *_outcome(mine)))
    for node, o in sorted((evidence.get("nodes") or {}).items()):
        if isinstance(o, dict):
            rows.append((str(node), *_outcome(o)))
    if evidence.get("driver_differs"):
        rows.append(("-", "driver", "-", str(evidence["driver_differs"])))
    return rows


def _learned_with(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """The frameworks the policy was learned with (distribution and version) and, for one from
    the fleet, where this node's runs of the workload ran other versions."""
    fw = evidence.get("frameworks")
    if not isinstance(fw, dict) or not fw:
        return []
    said = ", ".join(f"{k} {v}" for k, v in sorted(fw.items()))
    return [(said, str(evidence.get("frameworks_differ") or "-"))]


def _outcome(o: dict[str, Any]) -> tuple[str, str, str]:
    word = "held" if o.get("held") else "suspect" if o.get("suspect") else "not held"
    speed = f"{o['speedup']:.3f}x" if isinstance(o.get("speedup"), (int, float)) else "-"
    return word, speed, str(o.get("reason", ""))[:90]


def _fleet(args: argparse.Namespace, client: Client) -> int:
    if args.limit < 1 or args.limit > 1000:
        print("gitmctl library list: --limit must be 1..1000", file=sys.stderr)
        return 2
    resp = client.call(client.stub.ListWorkloads, pb.ListWorkloadsRequest(fleet=True, limit=args.limit))
    if args.json:
        render.print_json(resp)
        return 0
    rows = []
    for f in resp.fleet:
        env = " ".join(f"{k}={v}" for k, v in sorted(f.env.items()))
        for item in json.loads(f.live_json or "[]"):
            env += f" live:{item.get('lever', '?')}" if isinstance(item, dict) else ""
        held = ", ".join(
            f"{o.node}: " + ("held" if o.held else "suspect" if o.suspect else "not held") for o in f.outcomes
        )
        rows.append((
            f.origin, f.workload_name or "-", f.gpu_model or "-",
            f"{f.speedup:.3f}x" if f.HasField("speedup") else "-", f.state,
            str(f.local_policy_id or "-"), held or "-", env.strip()[:60],
        ))  # fmt: skip
    render.table(("ORIGIN", "WORKLOAD", "GPU", "SPEEDUP", "STATE", "HERE", "HELD ON", "SETTINGS"), rows)
    return 0


def run(args: argparse.Namespace, client: Client) -> int:
    stub = client.stub
    if args.action == "list" and args.fleet:
        return _fleet(args, client)
    if args.action == "list":
        resp = client.call(stub.ListWorkloads, pb.ListWorkloadsRequest())
        if args.json:
            render.print_json(resp)
            return 0
        render.table(
            ("WORKLOAD", "NAME", "RUNS", "LAST SEEN", "POLICIES", "ACTIVE", "LAUNCH KEYS"),
            [
                (
                    w.id,
                    w.name,
                    str(w.run_count),
                    render.clock_h(w.last_seen_unix_ns),
                    str(len(w.policies)),
                    str(w.active_policy_id or "-"),
                    keys_text(w.launch_keys)[:60],
                )
                for w in resp.workloads
            ],
        )
        return 0
    if args.action == "show":
        w = client.call(stub.GetWorkload, pb.GetWorkloadRequest(workload_id=args.workload))
        if args.json:
            render.print_json(w)
            return 0
        render.table(
            ("", ""),
            [
                ("workload", w.id),
                ("name", w.name),
                ("runs", str(w.run_count)),
                ("launch keys", keys_text(w.launch_keys) or "-"),
                ("one step", " > ".join(w.step_families)[:200]),
                ("in force", w.active_reason or "-"),
                ("your contract", contract_text(w.contract)),
            ],
        )
        for line in consent_lines(w.id, w.numerics_hints):
            print(line)
        print()
        render.table(
            ("POLICY", "STATUS", "SPEEDUP", "INTERVAL", "GPU", "FROM", "SETTINGS"),
            [_policy_row(p, w.active_policy_id) for p in w.policies],
        )
        held = [(str(p.id), *r) for p in w.policies for r in _held(json.loads(p.evidence_json or "{}"))]
        if held:
            print()
            render.table(("POLICY", "NODE", "ON ITS OWN RUNS", "SPEEDUP", "WHY"), held)
        learned = [
            (str(p.id), *r) for p in w.policies for r in _learned_with(json.loads(p.evidence_json or "{}"))
        ]
        if learned:
            print()
            render.table(("POLICY", "LEARNED WITH", "HERE"), learned)
        if w.launch_trials:
            print()
            render.table(
                (
                    "TRIAL",
                    "LEVER",
                    "CAUSE (gain predicted, most it allows)",
                    "STATE",
                    "RUNS (arm: s by its clock)",
                    "DECISION",
                ),
                [
                    (
                        str(t.id),
                        t.lever,
                        (t.cause or "-")
                        + (
                            " ("
                            + (f"~{t.predicted:.2f}x, " if t.HasField("predicted") else "")
                            + f"≤{t.predicted_max:.2f}x)"
                            if t.HasField("predicted_max")
                            else ""
                        ),
                        t.state,
                        " ".join(_trial_run(r) for r in t.runs) or "-",
                        t.reason[:80] or "-",
                    )
                    for t in w.launch_trials
                ],
            )
        return 0
    if args.action == "contract":
        return _contract(args, client)
    if args.action in ("pin", "unpin", "revert"):
        method = {"pin": stub.PinPolicy, "unpin": stub.UnpinPolicy, "revert": stub.RevertPolicy}[args.action]
        p = client.call(method, pb.PolicyRequest(policy_id=args.policy))
        if args.json:
            render.print_json(p)
        else:
            print(f"policy {p.id} of workload {p.workload_id}: {p.status}")
        return 0
    if args.action == "export":
        doc = client.call(stub.ExportLibrary, pb.ExportLibraryRequest())
        if args.output:
            args.output.write_bytes(doc.json)
            print(f"wrote {args.output} ({render.bytes_h(len(doc.json))})", file=sys.stderr)
        else:
            sys.stdout.write(doc.json.decode())
        return 0
    try:
        data = sys.stdin.buffer.read() if str(args.file) == "-" else args.file.read_bytes()
    except OSError as e:
        print(f"gitmctl library import: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    if len(data) > MAX_IMPORT_BYTES:
        print(
            f"gitmctl library import: {args.file} is {render.bytes_h(len(data))}; gitmd takes a document "
            f"of at most {render.bytes_h(MAX_IMPORT_BYTES)} (import it in parts, or share it through the "
            "fleet store)",
            file=sys.stderr,
        )
        return 2
    resp = client.call(stub.ImportLibrary, pb.LibraryDocument(json=data))
    if args.json:
        render.print_json(resp)
    else:
        print(f"imported {resp.workloads_added} workloads, {resp.policies_added} policies")
    return 0
