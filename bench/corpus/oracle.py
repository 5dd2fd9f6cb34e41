"""The corpus's oracle (issue 26, item 3): each launch lever of gitmd's catalog against plain runs
of the program, without gitmd in the runs, in AB/BA pairs judged by the program's own clock; the
best lever whose outputs held, and the best pair of them. bench/corpus/scoreboard.py runs it before
gitmd's runs; a call too short for a whole oracle measures it in parts (`--oracle-levers a,b`,
`--runs 0`), and bench/corpus/summary.py merges the parts, each lever's newest."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.corpus.summary import interval, measured_lever
from bench.crash_soak import Program, run_once
from bench.harness import Gitmd
from gitmctl.launch import read_site_report, site_report_file
from gitmd.api.pb import pb
from gitmd.levers.launch_env import SITE_REPORTED, SiteReport, job_environment, untouched

SITE = {"GITM_SITE"}  # shared by every lever that acts through gitmd's sitecustomize: no overlap


def seconds(p: Program, r: dict[str, Any]) -> float | None:
    """The run's time by the program's own clock: its step time, or its wall time for "wall"."""
    if r.get("exit") != 0:
        return None
    if p.clock and p.clock != "wall":
        return r.get("clock")
    return float(r["wall_s"])


def ratio(plain: float | None, treated: float | None) -> float | None:
    return round(plain / treated, 4) if plain and treated else None


def oracle(
    p: Program,
    g: Gitmd,
    levers: list[str] | None,
    pairs: int,
    logs: Path,
    timeout_s: float,
    uses: set[str],
    deadline: float = float("inf"),
    keep: Path | None = None,
    stamp: dict[str, Any] | None = None,
) -> dict:
    """Each launch lever against plain runs. A lever that acts through a library the program never
    loads (the manifest's ``needs``: PyTorch's allocator settings on a CuPy program) changes nothing
    in it by construction: it is listed as not applicable, not measured. No pair starts that would
    end past ``deadline`` (measure_env): a lever it stops keeps the pairs it had (``stopped``), one
    never started is "not measured". ``keep``: the oracle so far is written there after every pair,
    whole or not at all, with ``stamp`` (when and at which commit: the summary orders it by them),
    so a call killed mid-oracle keeps what it measured (H200 2026-12-05: 32 runs of an oracle lost
    to a call's limit). ``levers`` may name a pair, "a+b" (their settings together: the best pair of
    an oracle measured in parts, where no one call measured both); a name the catalog does not
    have is refused (ValueError) before anything runs."""
    if levers == []:
        return {"measured": False, "levers": {}}
    catalog = g.stub().ListLevers(pb.ListLeversRequest(), timeout=30).levers
    launch = {lv.name: dict(lv.env) for lv in catalog if lv.launch and lv.env}
    through = {lv.name: lv.acts_through for lv in catalog}
    named = [n for n in (levers or []) if "+" in n]
    bad = [n for n in (levers or []) if any(x not in launch for x in n.split("+"))]
    bad += [n for n in named if len(set(n.split("+"))) < 2 or _overlap(*(launch[x] for x in n.split("+")))]
    if bad:
        raise ValueError(
            f"not launch levers of the catalog, or a pair whose variables overlap: {sorted(set(bad))}"
        )
    for n in named:
        launch[n] = {k: v for x in n.split("+") for k, v in launch[x].items()}
        through[n] = next((through[x] for x in n.split("+") if through[x]), "")
    chosen = [n for n in (levers or sorted(x for x in launch if "+" not in x)) if n in launch]
    out: dict[str, Any] = {}
    for name in [n for n in chosen if through[n] and through[n] not in uses]:
        why = f"acts through {through[name]}, which it does not use"
        out[name] = {"env": launch[name], "not_applicable": why}
    chosen = [n for n in chosen if n not in out]

    def save() -> None:
        if keep is not None:
            doc = {"program": p.name, "partial": True, "measured_at": stamp or {}, **best_of(out)}
            tmp = keep.with_name(f".{keep.name}.tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            os.replace(tmp, keep)  # whole or not at all: a kill mid-write leaves the last one

    pace = [0.0]  # the last pair's length, carried from lever to lever: a pair that would end past
    # the deadline is not started, whichever lever it belongs to

    def measure(name: str, env: dict[str, str]) -> None:
        def so_far(got: dict[str, Any]) -> None:
            out[name] = got
            save()

        out[name] = measure_env(p, env, pairs, logs, timeout_s, deadline, label=name, each=so_far, pace=pace)
        save()

    for name in chosen:
        measure(name, launch[name])
    held = [
        n for n in chosen if "+" not in n and out[n].get("outputs_held") and (out[n].get("speedup") or 0) > 1
    ]
    held.sort(key=lambda n: out[n]["speedup"], reverse=True)
    # the best pair: the two best levers that held, when their variables do not overlap
    apart = [(a, b) for i, a in enumerate(held) for b in held[i + 1 :] if not _overlap(launch[a], launch[b])]
    if apart and "+".join(apart[0]) not in out:
        measure("+".join(apart[0]), {**launch[apart[0][0]], **launch[apart[0][1]]})
    return best_of(out)


def _overlap(*envs: dict[str, str]) -> bool:
    """Whether two levers' settings set one variable (gitmd's site directory, shared by every
    framework knob, aside)."""
    seen: set[str] = set()
    for env in envs:
        if (set(env) - SITE) & seen:
            return True
        seen |= set(env) - SITE
    return False


def best_of(out: dict[str, Any]) -> dict[str, Any]:
    """The oracle of the levers measured so far (``measured``: any lever has a pair): the best whose
    outputs held, "plain" at 1.0 when none beat the program as it is or every one changed its
    outputs (the best setting that keeps them is none), null when none was measured."""
    measured = {n: v for n, v in out.items() if measured_lever(v)}
    held = [n for n, v in measured.items() if v.get("outputs_held") and v.get("speedup") is not None]
    best = max(held, key=lambda n: out[n]["speedup"], default=None)
    top = out[best]["speedup"] if best else None
    if measured and (top is None or top < 1):
        best, top = "plain", 1.0
    return {"measured": bool(measured), "levers": out, "best": best, "best_speedup": top}


def measure_env(
    p: Program,
    env: dict[str, str],
    pairs: int,
    logs: Path,
    timeout_s: float,
    deadline: float = float("inf"),
    label: str = "lever",
    each: Callable[[dict[str, Any]], None] | None = None,
    pace: list[float] | None = None,
) -> dict[str, Any]:
    """``env`` against plain runs, ``pairs`` AB/BA pairs: each pair's ratio (plain over treated by
    the program's clock), their median, a 95% interval of the geometric mean (t over the log
    ratios; null below 2 pairs), and whether every output held. A pair starts only when it would
    end by ``deadline`` at the length of the last pair (each run's timeout capped to what is left),
    and ``each`` is given the measurement after every pair. ``pace``: the last pair's length, read
    and updated here (shared by an oracle's levers).

    The treated runs get the environment a launcher gives a plan (gitmd's site directory first on
    PYTHONPATH for a framework knob: before 2026-12-05 it was not, and no knob of gitmd's
    sitecustomize could act in an oracle run). A lever whose every variable is such a knob that
    reports (launch_env.SITE_REPORTED) is run with the site's report file: when its first pair's
    treated run adjusted PyTorch and the knob changed nothing, the lever cannot act in this program
    and gets no more pairs (``not_applicable``; its one pair is kept, never its best)."""
    launched = job_environment({**os.environ, **p.env}, env)  # as `gitmctl run` gives the plan
    treated = Program(p.name, p.argv, p.cwd, launched, p.output, p.clock, p.clock_stream)
    reported = any(k in SITE_REPORTED for k in env)  # whether its knobs changed anything: untouched()
    ratios: list[float | None] = []
    held = True
    stopped = ""
    pace = pace if pace is not None else [0.0]
    for i in range(pairs):
        left = deadline - time.monotonic()
        if left <= pace[0]:
            stopped = f"budget spent after {i} of {pairs} pairs"
            break
        t0 = time.monotonic()
        order = ("plain", "lever") if i % 2 == 0 else ("lever", "plain")
        got = {}
        cut = False
        for arm in order:
            log = logs / f"{p.name}-oracle.log"
            name = "plain" if arm == "plain" else label
            limit = max(1.0, min(timeout_s, deadline - time.monotonic()))
            prog, report = p, ""
            if arm == "lever":
                prog = treated
                if reported:
                    report = site_report_file(extra := {}, treated.env)
                    prog = Program(p.name, p.argv, p.cwd, {**treated.env, **extra}, p.output, p.clock,
                                   p.clock_stream)  # fmt: skip
            got[arm] = run_once(prog, [], log, limit, label=f"[{name}]")
            if report:
                got[arm]["site"] = read_site_report(report)
            if got[arm]["exit"] is None and limit < timeout_s:
                cut = True
                break
        if cut:  # a run stopped by the budget, not by its own timeout: no evidence either way
            stopped = f"budget spent during pair {i + 1} of {pairs}"
            break
        pace[0] = time.monotonic() - t0
        a, b = got["plain"], got["lever"]
        held = held and b["exit"] == a["exit"] and b["out"] == a["out"]
        ratios.append(ratio(seconds(p, a), seconds(treated, b)))
        site = b.get("site")
        why = untouched(env, SiteReport(site[0], tuple(site[1]))) if site and b["exit"] == 0 else ""
        if why:
            return {**_measured(env, ratios, held, ""), "not_applicable": why}
        if each is not None and i + 1 < pairs:
            each(_measured(env, ratios, held, f"{i + 1} of {pairs} pairs so far"))
    if not ratios:
        return {"env": env, "not_measured": stopped}
    return _measured(env, ratios, held, stopped)


def _measured(env: dict[str, str], ratios: list[float | None], held: bool, stopped: str) -> dict[str, Any]:
    ok = [x for x in ratios if x is not None]
    got = {"env": env, "ratios": ratios, "speedup": round(statistics.median(ok), 4) if ok else None,
           "interval": interval(ok), "outputs_held": held}  # fmt: skip
    if stopped:
        got["stopped"] = stopped
    return got
