"""Choose (gitmd/loop/choose.py): from a window's causes, seen in two windows in a row, which trial
starts — a live one on the running job, or a launch trial over the workload's next runs — and which
jobs are not explored at all."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from gitmd.analysis.causes import LEVERS, Cause
from gitmd.experiments.equivalence import Check, Contract
from gitmd.jobs.registry import Job, Registration
from gitmd.service import Service
from tests.unit.loop.helpers import make_service, recurring, replace_reg, service_with_policy, set_config


def shows(svc: Service, n: int, causes: list[Cause]) -> None:
    """The job's attribution (whichever job is asked) is window ``n`` with ``causes``."""
    svc.loop.attribute.report = lambda job, window_id=0: SimpleNamespace(
        window_id=n, causes=causes, processes=[], cause_pid=0
    )  # type: ignore[method-assign,assignment,return-value]


def test_a_launch_trial_is_planned_only_for_a_cause_seen_in_two_windows_in_a_row(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2),))
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(replace_reg(reg, contract=contract))
    assert svc.jobs.get(view.job.id).workload_id == wid

    def window(n: int, *names: str) -> None:
        shows(svc, n, [Cause(c, 1e6, 0.5, 0.7, ("x",), LEVERS[c], True) for c in names])
        svc.loop.choose.launch(view.job.id)

    # start-up, before any window found the job's step: its windows do not count, however alike
    window(-2, "pageable_copy")
    window(-1, "pageable_copy")
    assert svc.trials.of_workload(wid) == []
    svc.states.of(view.job.id).steady = True  # a window found the step
    window(1, "pageable_copy")  # start-up: the weights copied once
    window(2, "fp32_gemm")
    window(2, "fp32_gemm")  # the same window again: still one
    assert svc.trials.of_workload(wid) == []
    window(3, "fp32_gemm")
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "tf32_override" and t.cause == "fp32_gemm"
    assert abs(t.predicted - 2.0) < 1e-9  # what attribution predicted: 1 / (1 - its cost share 50%)
    from gitmd.api.convert import trial_to_pb

    assert trial_to_pb(t).predicted == t.predicted  # shown beside the measured one (library show)


def test_a_run_too_short_for_two_windows_pairs_its_first_with_the_previous_runs_last(tmp_path: Path) -> None:
    """fp32_mlp on the H200 (2026-12-03): 15-s runs, a short first window in start-up and one full
    window each; no run ever saw the cause twice, so no trial was planned in two launches."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2),))
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")

    def run() -> str:
        view, _ = svc.register_job(replace_reg(reg, contract=contract))
        assert svc.jobs.get(view.job.id).workload_id == wid
        return view.job.id

    def window(job_id: str, n: int, *names: str) -> None:
        svc.states.of(job_id).steady = True  # each window here is past start-up
        shows(svc, n, [Cause(c, 1e6, 0.5, 0.7, ("x",), LEVERS[c], True) for c in names])
        svc.loop.choose.launch(job_id)

    first = run()
    window(first, 1, "pageable_copy")  # start-up
    window(first, 2, "fp32_gemm")  # its last window
    svc.report_exit(first, 0)
    second = run()
    window(second, 3, "pageable_copy")  # start-up again: not in the previous run's last window
    assert svc.trials.of_workload(wid) == []
    third = run()
    window(third, 4, "fp32_gemm")  # paired with the second run's last window: no
    assert svc.trials.of_workload(wid) == []
    svc.report_exit(third, 0)
    fourth = run()
    window(fourth, 5, "fp32_gemm")  # its first window, paired with the third run's last
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "tf32_override" and t.cause == "fp32_gemm"


def test_a_launch_with_its_validated_policy_is_not_explored(tmp_path: Path) -> None:
    """The recurring case runs with zero experiment windows (contended and transformer, H200
    2026-12-03: launches that got the policy were explored again for what remained of the cause);
    `experiments.explore_known` turns that back on; a job without a policy is explored only past
    its start-up."""
    svc = service_with_policy(tmp_path, [{"lever": "sched_priority", "setting": {}}])
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    known, plan = svc.register_job(reg)
    assert plan.policy_id
    fresh, _ = svc.register_job(Registration("new", ("python", "new.py"), "/srv", os.getuid(), os.getgid()))
    looked: list[str] = []

    def attribution(job: Job, window_id: int = 0) -> object:
        looked.append(job.id)
        cause = Cause("host_contention", 1e6, 0.5, 0.7, ("x",), LEVERS["host_contention"], True)
        return SimpleNamespace(window_id=len(looked), causes=[cause], processes=[], cause_pid=0)

    svc.loop.attribute.report = attribution  # type: ignore[method-assign,assignment]
    for job in (known.job.id, fresh.job.id):
        svc.states.of(job).steady = True
        svc.loop.choose.live(job)
        svc.loop.choose.launch(job)
    assert known.job.id not in looked and fresh.job.id in looked
    assert svc.loop.pub.known(known.job.id) and not svc.loop.pub.known(fresh.job.id)

    looked.clear()
    starting, _ = svc.register_job(
        Registration("new", ("python", "new.py"), "/srv", os.getuid(), os.getgid())
    )
    svc.loop.choose.live(starting.job.id)  # no window has found its step yet: start-up
    assert looked == []

    set_config(
        svc,
        dataclasses.replace(
            svc.config, experiments=dataclasses.replace(svc.config.experiments, explore_known=True)
        ),
    )
    assert not svc.loop.pub.known(known.job.id)


def test_an_experiment_needs_its_cause_in_two_windows_in_a_row(tmp_path: Path) -> None:
    """A bf16 job's warm-up window looked like a 25% sync stall on the H200 (2026-12-03) and a CPU
    experiment ran on it at once; its steady windows show none. A live experiment now needs its
    cause above threshold in the window before too — of this run, or for a run's first window, the
    previous run's last one — as launch trials already did."""
    from gitmd.levers.registry import make as make_lever

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    shown: list[list[str]] = []

    def attribution(job: Job, window_id: int = 0) -> object:
        causes = [Cause(n, 1e6, 0.5, 0.7, ("x",), LEVERS[n], True) for n in shown[-1]]
        return SimpleNamespace(window_id=len(shown), causes=causes, processes=[], cause_pid=0)

    tried: list[tuple[str, str]] = []
    svc.loop.attribute.report = attribution  # type: ignore[method-assign,assignment]
    svc.loop.targets.live_lever = lambda name, job: make_lever("sched_priority", nice=-5)  # type: ignore[method-assign]

    def submit(fn: object, job_id: str, lever: object, cause: str, cancel: object, *rest: object) -> None:
        tried.append((job_id, cause))  # as Trials.start_live submits run_live

    svc.loop.trials.pool.submit = submit  # type: ignore[method-assign,assignment]

    def run() -> str:
        view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", *me))
        svc.jobs.set_workload(view.job.id, "w1")
        svc.states.of(view.job.id).steady = True
        return view.job.id

    def window(job_id: str, causes: list[str]) -> None:
        shown.append(causes)
        svc.loop.choose.live(job_id)

    first = run()
    window(first, ["sync_stall"])  # start-up: seen once
    window(first, [])  # steady: gone
    window(first, ["host_contention"])
    assert tried == []
    window(first, ["host_contention"])  # twice in a row
    assert tried == [(first, "host_contention")]
    svc.states.of(first).experiment = None
    # the next run's first window: the previous run's last window had the cause too
    second = run()
    window(second, ["host_contention"])
    assert tried[-1] == (second, "host_contention")


def test_a_cache_lever_tried_live_gets_no_launch_trial_of_its_launch_form(tmp_path: Path) -> None:
    """alloc_churn: the allocator cause lists alloc_keep_cache_live first (decided within the run).
    While a live experiment acts on that cause nothing is planned for it across runs; once the live
    form was tried, its launch form (alloc_keep_cache) is not, and the next launch lever is. Every
    captured launch carries GITMD_LIVE_FLAGS=1, so gitmd's hook in the job can read the flag."""
    from gitmd.analysis.causes import CACHE_LEVERS

    svc = make_service(tmp_path)
    wid = recurring(svc, "churn")
    reg = Registration("churn", ("python", "c.py"), "/srv", os.getuid(), os.getgid(), launch_key="churn")
    view, plan = svc.register_job(reg)
    job_id = view.job.id
    assert plan.env["GITMD_LIVE_FLAGS"] == "1" and plan.env["GITM_SITE"]
    levers = (*CACHE_LEVERS, *(x for x in LEVERS["allocator"] if x not in CACHE_LEVERS))
    st = svc.states.of(job_id)
    st.steady = True

    def window(n: int) -> None:
        shows(svc, n, [Cause("allocator", 1e6, 0.6, 0.8, ("x",), levers, True)])
        svc.loop.choose.launch(job_id)

    window(1)
    with svc.states.exp_lock:  # what choose.live records when it starts alloc_keep_cache_live
        st.experiment = threading.Event()
        st.experiment_causes = {"allocator"}
        st.tried.add("alloc_keep_cache_live")
    window(2)  # seen twice, but the live lever is being tried on it
    assert svc.trials.of_workload(wid) == []
    with svc.states.exp_lock:  # it was decided (not faster, say): the cause remains
        st.experiment = None
        st.experiment_causes = set()
    window(3)
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "alloc_expandable_segments" and t.cause == "allocator"


def test_no_launch_trial_on_a_cause_the_live_lever_being_tried_addresses(tmp_path: Path) -> None:
    """Contended (H200, 2026-12-03): while cpu_affinity was tried on host_contention, launch_bound
    (inflated by the same contention, and a cause cpu_affinity addresses) was seen twice and a
    launch trial of cuda_device_max_connections was planned; it ran on the next launches, the
    recurring one among them. Now the causes of the live lever being tried wait for its outcome."""
    from gitmd.levers.host import CpuAffinity

    svc = make_service(tmp_path)
    wid = recurring(svc, "loop")
    reg = Registration("loop", ("python", "l.py"), "/srv", os.getuid(), os.getgid(), launch_key="loop")
    view, _ = svc.register_job(reg)
    job_id = view.job.id
    st = svc.states.of(job_id)
    st.steady = True

    def window(n: int) -> None:
        causes = [
            Cause("host_contention", 1e6, 0.7, 0.8, ("x",), LEVERS["host_contention"], True),
            Cause("launch_bound", 1e6, 0.25, 0.8, ("x",), LEVERS["launch_bound"], True),
        ]
        shows(svc, n, causes)
        svc.loop.choose.launch(job_id)

    window(1)
    with svc.states.exp_lock:  # what choose.live records when it starts cpu_affinity
        st.experiment = threading.Event()
        st.experiment_causes = {"host_contention", *CpuAffinity.causes}
    window(2)
    assert svc.trials.of_workload(wid) == []
    with svc.states.exp_lock:  # decided: what remains of launch_bound may be tried across runs
        st.experiment = None
        st.experiment_causes = set()
    window(3)
    (t,) = svc.trials.of_workload(wid)
    assert t.cause == "launch_bound"


def test_no_live_trial_once_the_observation_has_ended_and_one_step_at_a_time(tmp_path: Path) -> None:
    """H200 2026-12-03 (sync_spin, unattended): one window's loop step ended the job's observation
    while another's started a live trial, which then got no window ("fewer than 3 samples of each
    arm") and was reverted. A job's loop steps now run one at a time, and a job whose observation
    has ended gets no live trial."""
    import threading
    import time

    from gitmd.levers.registry import make as make_lever

    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", os.getuid(), os.getgid()))
    job_id = view.job.id
    st = svc.states.of(job_id)
    st.steady = True
    report = SimpleNamespace(
        window_id=1,
        causes=[Cause("sync_stall", 1e6, 0.3, 0.7, ("x",), ("sched_priority",), True)],
        processes=[],
        cause_pid=0,
    )
    svc.loop.attribute.report = lambda job, window_id=0: report  # type: ignore[method-assign,assignment,misc]
    svc.loop.attribute.earlier_causes = lambda job, rep: {"sync_stall"}  # type: ignore[method-assign,assignment,misc]
    svc.loop.targets.live_lever = lambda name, job: make_lever("sched_priority", nice=-5)  # type: ignore[method-assign]
    started: list[str] = []
    svc.loop.trials.pool.submit = lambda fn, *a: started.append(a[0])  # type: ignore[method-assign,assignment,misc]
    st.observed = True
    svc.loop.choose.live(job_id)
    assert started == []  # ended: nothing to measure a live trial with
    st.observed = False
    # tried on an earlier run of its workload and not kept: not tried again (each try costs a run)
    svc.jobs.set_workload(job_id, "w1")
    svc.experiments.workload_levers = lambda wid: {"sched_priority": "reverted"} if wid == "w1" else {}  # type: ignore[method-assign]
    why = svc.loop.choose.live(job_id)
    assert started == [] and "sched_priority tried on an earlier run of its workload and not kept" in why
    svc.experiments.workload_levers = lambda wid: {}  # type: ignore[method-assign]
    # a launch trial of its workload planned meanwhile (after an earlier window of this run) does not
    # keep this run's own live trial from starting: refusing it did, on the H200's contended job
    # (2026-12-05: host_contention 65% in every window, no experiment decided)
    t = svc.trials.plan("w1", make_lever("cuda_device_max_connections"), "launch_bound", 0.5)
    assert t is not None
    assert svc.loop.choose.live(job_id) == "" and len(started) == 1
    started.clear()
    with svc.states.exp_lock:
        st.experiment = None
    st.tried.clear()
    svc.trials.end(t, "abandoned", {})

    inside, most = [0], [0]

    def slow_launch(jid: str) -> str:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.2)
        inside[0] -= 1
        return "nothing"

    kernels = SimpleNamespace(records=SimpleNamespace(kernels=[object()]))
    window = SimpleNamespace(window_id=1, processes=[kernels], start_real_ns=0, end_real_ns=1)
    svc.loop.observe.window = lambda jid: (window, False)  # type: ignore[method-assign,assignment,misc]
    svc.loop.observe.schedule_next = lambda jid, w: None  # type: ignore[method-assign,assignment,misc]
    svc.loop.choose.live = lambda jid: "nothing"  # type: ignore[method-assign]
    svc.loop.choose.launch = slow_launch  # type: ignore[method-assign]
    steps = [threading.Thread(target=svc.loop.run_window, args=(job_id,)) for _ in range(3)]
    for t in steps:
        t.start()
    for t in steps:
        t.join()
    assert most[0] == 1  # never two of the job's steps at once


def test_why_nothing_was_tried_is_said(tmp_path: Path) -> None:
    """Ten timm rounds on the H200 planned no trial and nobody could tell why (2026-12-03): each
    stage of choose now says why it started nothing, and explain shows it for a running job."""
    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", os.getuid(), os.getgid()))
    job_id = view.job.id
    choose = svc.loop.choose
    assert "starting up" in choose.live(job_id)  # no window has found its step
    st = svc.states.of(job_id)
    st.steady = True
    stall = Cause("sync_stall", 1e6, 0.3, 0.7, ("x",), ("sched_priority",), True)
    report = SimpleNamespace(window_id=7, causes=[stall], notes=[], processes=[], cause_pid=0)
    svc.loop.attribute.report = lambda job, window_id=0: report  # type: ignore[method-assign,assignment,misc]
    why = choose.live(job_id)  # the first window that shows it: one window only
    assert "sync_stall above threshold in its latest window" in why and "two windows in a row" in why
    assert choose.launch(job_id) == "no workload yet (its step has not been fingerprinted)"
    svc.loop.targets.live_lever = lambda name, job: None  # type: ignore[method-assign]
    report.window_id = 8
    assert choose.live(job_id) == "sync_stall: sched_priority has nothing to act on"
    st.observed = True
    assert choose.live(job_id) == "its observation has ended"


def test_the_lever_likeliest_to_pay_is_tried_first(tmp_path: Path) -> None:
    """Convergence issue, item 5: the order in which levers are tried uses what is expected of them —
    the gain attribution predicts, as likely as the lever's trials on this host were kept (Laplace's
    rule over its record). An allocator cause selects four launch levers; the one whose trials here
    were kept goes first, not the first in the table."""
    from gitmd.levers.registry import make as make_lever
    from gitmd.loop.choose import likelihood

    assert likelihood(None) == 0.5 and likelihood((0, 3)) == 0.2 and likelihood((2, 2)) == 0.75
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    history = (
        ("w1", "alloc_expandable_segments", "reverted"),
        ("w2", "alloc_expandable_segments", "reverted"),
        ("w3", "alloc_keep_cache", "promoted"),
    )
    for other, lever, state in history:  # other workloads' trials on this host
        t = svc.trials.plan(other, make_lever(lever), "allocator")
        assert t is not None
        svc.trials.end(t, state, {})
    assert svc.trials.lever_record()["alloc_expandable_segments"] == (0, 2)
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(reg)
    svc.states.of(view.job.id).steady = True
    assert LEVERS["allocator"][0] == "alloc_expandable_segments"  # first in the table
    for n in (1, 2):
        shows(svc, n, [Cause("allocator", 1e6, 0.4, 0.7, ("x",), LEVERS["allocator"], True)])
        svc.loop.choose.launch(view.job.id)
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "alloc_keep_cache"


def test_a_numerics_changing_lever_its_workload_may_not_try_is_shown_with_how_to_allow_it(
    tmp_path: Path,
) -> None:
    """Convergence issue, item 4: an fp32 transformer's cause was ranked on every run and TF32 (2.7x
    on it) never tried, and nothing said so. The workload's latest kept report names the
    numerics-changing levers its causes select (`gitmctl library show` prints each with what it may
    recover and the command that allows it); none once the workload's contract compares numbers."""
    from gitmctl.commands.library import consent_lines
    from gitmd.analysis import report_codec
    from gitmd.analysis.report import WindowReport
    from gitmd.experiments.equivalence import Check, Contract

    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(reg)
    fp32 = Cause("fp32_gemm", 1e6, 0.4, 0.9, ("x",), LEVERS["fp32_gemm"], True, ceiling=0.6)
    below = Cause("allocator", 1e5, 0.02, 0.9, ("x",), LEVERS["allocator"], False)
    rep = WindowReport(view.job.id, 4, [], [], causes=[fp32, below])
    svc.report_exit(view.job.id, 0)
    svc.loop.d.reports.keep(view.job.id, {4: report_codec.dumps(rep)})
    hints = svc.numerics_hints(svc.workload(wid), svc.workload_contract(wid, os.getuid()))
    assert {h["lever"] for h in hints} <= set(LEVERS["fp32_gemm"])  # not the allocator's: below threshold
    (tf32,) = [h for h in hints if h["lever"] == "tf32_override"]
    assert tf32["cause"] == "fp32_gemm" and tf32["share"] == 0.4 and tf32["job_id"] == view.job.id
    msg = SimpleNamespace(**{**tf32, "summary": str(tf32["summary"])})
    lines = consent_lines(wid, [msg])
    assert "may recover up to 40% of a window (fp32_gemm, at most 2.50x" in lines[0]
    assert lines[1].strip() == f"gitmctl library contract {wid} --metric 'loss=([0-9.eE+-]+)' --rtol 1e-3"
    # once the user has given a contract that compares a number, there is nothing to ask them
    metric = Contract((Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-3),))
    svc.set_workload_contract(wid, os.getuid(), metric)
    assert svc.numerics_hints(svc.workload(wid), svc.workload_contract(wid, os.getuid())) == []
    assert svc.numerics_hints(svc.workload(wid), svc.workload_contract(wid, os.getuid() + 1))  # not theirs
    # and their next launch with no contract of its own is held to it; another user's is not
    view2, _ = svc.register_job(reg)
    assert [c.kind for c in svc.jobs.get(view2.job.id).contract.checks] == ["stdout_metric"]
    svc.set_workload_contract(wid, os.getuid(), Contract())  # cleared
    view3, _ = svc.register_job(reg)
    assert svc.jobs.get(view3.job.id).contract.checks == ()


def test_no_live_trial_in_a_run_with_no_time_left_for_a_pair(tmp_path: Path) -> None:
    """timm's 15-s training on the H200 (2026-12-04) started a CPU trial 5 s before each run's
    end: it ended at the exit with no pair, and made the next runs be observed to continue it. A
    live trial now starts only when the program's latest runs lasted long enough for one pair of
    windows from now; a program with fewer known runs may try."""
    from gitmd.levers.registry import make as make_lever

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    tried: list[str] = []
    svc.loop.targets.live_lever = lambda name, job: make_lever("sched_priority", nice=-5)  # type: ignore[method-assign]
    svc.loop.trials.pool.submit = lambda fn, job_id, *rest: tried.append(job_id)  # type: ignore[method-assign,assignment,misc]
    stall = Cause("host_contention", 1e6, 0.5, 0.7, ("x",), LEVERS["host_contention"], True)
    svc.loop.attribute.earlier_causes = lambda job, report: {"host_contention"}  # type: ignore[method-assign]
    shows(svc, 1, [stall])

    def run(lasted_s: float | None) -> str:
        """A run of the program, its window now; it then ends ``lasted_s`` after its launch."""
        view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", *me))
        svc.jobs.set_workload(view.job.id, "w1")
        svc.states.of(view.job.id).steady = True
        why = svc.loop.choose.live(view.job.id)
        svc.states.of(view.job.id).experiment = None
        if lasted_s is not None:
            with svc.jobs.store.transaction() as db:
                db.execute(
                    "UPDATE jobs SET state = 'exited', ended_ns = created_ns + ? WHERE id = ?",
                    [int(lasted_s * 1e9), view.job.id],
                )
        return why

    assert run(3.0) == "" and run(3.0) == ""  # runs of unknown length may try
    pair_s = 2 * (svc.config.capture.window_duration_s + svc.config.experiments.settle_s)
    assert pair_s > 3.0
    why = run(None)  # its latest two runs lasted 3 s: less than a pair from their launch
    assert "less than one pair of trial windows" in why, why
    assert len(tried) == 2


def test_a_lever_whose_last_two_tries_ended_with_no_pair_is_not_tried_again(tmp_path: Path) -> None:
    """timm's image-folder training (H200 2026-12-04) started a CPU trial on four runs in a row,
    each ended by the job's exit before a pair of windows: a lever whose last two tries on the
    program's runs measured no pair of their own is not started again; another lever may be."""
    from gitmd.levers.registry import make as make_lever

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    tried: list[str] = []
    svc.loop.targets.live_lever = lambda name, job: make_lever(name) if name == "sched_priority" else None  # type: ignore[method-assign]
    svc.loop.trials.pool.submit = lambda fn, job_id, *rest: tried.append(job_id)  # type: ignore[method-assign,assignment,misc]
    stall = Cause("host_contention", 1e6, 0.5, 0.7, ("x",), ("sched_priority",), True)
    svc.loop.attribute.earlier_causes = lambda job, report: {"host_contention"}  # type: ignore[method-assign]
    shows(svc, 1, [stall])

    def run() -> tuple[str, str]:
        view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", *me))
        svc.jobs.set_workload(view.job.id, "w1")
        svc.states.of(view.job.id).steady = True
        why = svc.loop.choose.live(view.job.id)
        svc.states.of(view.job.id).experiment = None
        return view.job.id, why

    for _ in range(2):  # each try ends with its job, no pair measured
        job_id, why = run()
        assert why == ""
        ended = {"promote": False, "reason": "abandoned (job ended or gitmd stopping)"}
        arms = [{"arm": "A", "window_id": 1, "step_ms": 2.0, "at_ns": 1}]
        svc.experiments.record(
            job_id, make_lever("sched_priority"), "host_contention", "abandoned", arms, ended
        )
    _, why = run()
    assert "sched_priority: its last two tries on this program's runs ended before a pair" in why, why
    assert len(tried) == 2
    # the stall lasts while the program's runs stay that short: its tries' runs lasted 5 s; a later
    # run of 8 s keeps it, as does a failed one of 12 s; a clean one of 12 s (twice as long as the
    # longest of them) ends it
    with svc.jobs.store.transaction() as db:
        db.execute("UPDATE jobs SET state = 'exited', exit_code = 0, ended_ns = created_ns + ? WHERE "
                   "workload_id = 'w1'", [int(5e9)])  # fmt: skip
    for lasted_s, code, stalls in ((8.0, 0, True), (12.0, 1, True), (12.0, 0, False)):
        later, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", *me))
        svc.jobs.set_workload(later.job.id, "w1")
        with svc.jobs.store.transaction() as db:
            db.execute("UPDATE jobs SET state = 'exited', exit_code = ?, ended_ns = created_ns + ? "
                       "WHERE id = ?", [code, int(lasted_s * 1e9), later.job.id])  # fmt: skip
        assert svc.experiments.stalled("w1", "sched_priority") is stalls, lasted_s
    _, why = run()
    assert why == "" and len(tried) == 3, why


def test_a_lever_the_window_bounds_is_predicted_at_its_bound_not_at_its_causes_share(tmp_path: Path) -> None:
    """Convergence issue, items 3 and 5: more hardware queues on a launch-bound job were predicted at
    the launch gaps' share (97%: 33x) and went first; they can reach only the kernels off the busiest
    stream (Cause.bounds, causes.queue_reach_ns). Bounded at 10% they predict 1.11x and an allocator
    lever at 20% (1.25x) goes first; alone, the queues' trial is planned at 1.11x, and its
    plausibility bound stays the cause's ceiling (a window's bound can miss what it cannot show)."""
    from gitmd.analysis.causes import MORE_QUEUES

    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(reg)
    svc.states.of(view.job.id).steady = True
    launch = Cause(
        "launch_bound", 9.7e6, 0.97, 0.9, ("x",), (MORE_QUEUES,), True, 0.97, ((MORE_QUEUES, 0.10),)
    )
    assert launch.bound(MORE_QUEUES) == 0.10 and launch.bound("cpu_affinity") == 1.0
    alloc = Cause("allocator", 2e6, 0.2, 0.7, ("x",), ("alloc_expandable_segments",), True, 0.2)
    for n in (1, 2):
        shows(svc, n, [launch, alloc])
        svc.loop.choose.launch(view.job.id)
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "alloc_expandable_segments" and t.predicted == pytest.approx(1.25)
    svc.trials.end(t, "reverted", {})
    for n in (3, 4):
        shows(svc, n, [launch])
        svc.loop.choose.launch(view.job.id)
    q = next(x for x in svc.trials.of_workload(wid) if x.lever == MORE_QUEUES)
    assert q.predicted == pytest.approx(1 / 0.9) and q.cause_share == pytest.approx(0.97)


@pytest.mark.parametrize(
    ("frameworks", "planned"),
    [({"cupy-cuda12x": "13.6.0", "numpy": "2.2.6"}, "cpu_threads"),
     ({"torch": "2.11.0"}, "dataloader_workers"), ({}, "dataloader_workers"),
     ({f"nvidia-lib{i:02d}": "12.0" for i in range(16)}, "dataloader_workers")],
)  # fmt: skip
def test_a_launch_lever_read_by_a_library_the_process_does_not_load_is_not_planned(
    tmp_path: Path, frameworks: dict[str, str], planned: str
) -> None:
    """H100 2026-12-07: DataLoader workers (read by gitmd's sitecustomize once PyTorch is imported)
    were planned on cupy-cg, a CuPy program: its trial's runs could not differ. A lever that acts
    through a library the workload's process was seen not to map (jobs/frameworks.py) is skipped
    and the next goes; with torch mapped, nothing known of its process, or a list at its cap
    (frameworks.MAX_FRAMEWORKS: torch, sorted late, may be the one left out), it is planned as before."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(reg)
    svc.states.of(view.job.id).steady = True
    if frameworks:
        svc.jobs.set_frameworks(view.job.id, frameworks)
    # dataloader_workers first by prediction (host contention's larger share), cpu_threads next
    host = Cause("host_contention", 4e6, 0.4, 0.8, ("x",), ("dataloader_workers",), True, 0.4)
    launch = Cause("launch_bound", 2e6, 0.2, 0.7, ("x",), ("cpu_threads",), True, 0.2)
    for n in (1, 2):
        shows(svc, n, [host, launch])
        why = svc.loop.choose.launch(view.job.id)
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == planned, why
    if planned == "cpu_threads":
        shows(svc, 3, [host])
        svc.trials.end(t, "reverted", {})
        why = svc.loop.choose.launch(view.job.id)
        assert "dataloader_workers: acts through torch, which its process does not load" in why


def test_a_levers_reach_is_every_cause_it_addresses_together() -> None:
    """Real H200 windows of tests/gpu's contended job (a launch-bound loop sharing its cores with a
    CPU hog, 2026-12-04, tests/fixtures/h200-2026-12-04): the planning window's host_contention
    alone (66%) bounded a CPU placement at 2.96x, but the job's own baseline and pinned windows
    measured 4.2x (0.146 and 0.230 ms steps against 0.044): the placement also removes the launch
    gaps the lost time slices stretched. Its reach is both causes together; sched_priority's too,
    stream priority's neither."""
    from pathlib import Path

    from gitmd.analysis.report import window_report
    from gitmd.analysis.steps import job_steps, time_per_step_ms
    from gitmd.capture import capture_file
    from gitmd.loop.choose import reach

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "h200-2026-12-04"
    plan = window_report(capture_file.loads(fixtures / "contended.w3.npz"), tester=None)
    above = {c.name: c.ceiling for c in plan.causes if c.above_threshold}
    assert set(above) == {"host_contention", "launch_bound"}
    got = reach(plan, "cpu_affinity")
    assert got == pytest.approx(above["host_contention"] + above["launch_bound"])
    a = capture_file.loads(fixtures / "contended.w7.npz")
    a_step = time_per_step_ms(a, job_steps(a))
    assert a_step is not None and 1 / (1 - above["host_contention"]) < a_step / 0.044 < 1 / (1 - got)
    assert reach(plan, "sched_priority") == got and reach(plan, "stream_priority") == 0.0
    # a host-only lever never reaches past the window's GPU-idle time (host contention is taken out
    # of the same idle time as the sync stalls and launch gaps)
    from gitmd.analysis.report import idle_share

    (main,) = [p for p in plan.processes if p.pid == plan.cause_pid]
    assert got <= idle_share(main.breakdown) + 1e-9


def steady_job(tmp_path: Path, name: str) -> tuple[Service, str, list[list[Cause]], list[str]]:
    """A steady job with a workload whose windows show ``shown[-1]`` (append to show the next), every
    live lever acting (sched_priority), and the causes live trials start on in ``tried``."""
    from gitmd.levers.registry import make as make_lever

    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration(name, ("python", f"{name}.py"), "/srv", os.getuid(), os.getgid()))
    job_id = view.job.id
    svc.jobs.set_workload(job_id, "w1")
    svc.states.of(job_id).steady = True
    shown: list[list[Cause]] = []
    svc.loop.attribute.report = lambda job, window_id=0: SimpleNamespace(  # type: ignore[method-assign,assignment]
        window_id=len(shown), causes=shown[-1], notes=[], processes=[], cause_pid=0
    )
    svc.loop.targets.live_lever = lambda name, job: make_lever("sched_priority", nice=-5)  # type: ignore[method-assign]
    tried: list[str] = []
    svc.loop.trials.pool.submit = lambda fn, jid, lever, cause, *rest: tried.append(cause)  # type: ignore[method-assign,assignment,misc]
    return svc, job_id, shown, tried


def test_a_cause_no_lever_addresses_does_not_hide_the_next_one(tmp_path: Path) -> None:
    """A DDP job's exposed collectives (`communication`, no lever: NCCL's tuning variables are for
    experiments only) can be its largest cause; the live trial goes to the largest cause a lever
    addresses. With nothing else above threshold, choose says that no lever addresses it."""
    svc, job_id, shown, tried = steady_job(tmp_path, "ddp")
    comm = Cause("communication", 3e6, 0.4, 0.6, ("x",), LEVERS["communication"], True)
    host = Cause("host_contention", 1e6, 0.2, 0.7, ("x",), LEVERS["host_contention"], True)
    shown.append([comm])
    svc.loop.choose.live(job_id)
    shown.append([comm])
    why = svc.loop.choose.live(job_id)
    assert tried == [] and "communication above threshold in two windows in a row" in why
    assert "no lever addresses it" in why
    shown.append([comm, host])
    svc.loop.choose.live(job_id)
    shown.append([comm, host])
    svc.loop.choose.live(job_id)
    assert tried == ["host_contention"]


def test_a_cause_whose_levers_are_all_out_of_reach_gives_way_to_the_next(tmp_path: Path) -> None:
    """fp32 GEMMs on top (TF32 is a launch lever, not live) and host contention beneath: the live
    trial goes to host contention's lever. The launch planner says why nothing was planned for a
    job whose only repeated cause has no lever."""
    svc, job_id, shown, tried = steady_job(tmp_path, "j")
    fp32 = Cause("fp32_gemm", 3e6, 0.5, 0.7, ("x",), LEVERS["fp32_gemm"], True)
    host = Cause("host_contention", 1e6, 0.2, 0.7, ("x",), LEVERS["host_contention"], True)
    comm = Cause("communication", 1e6, 0.3, 0.6, ("x",), LEVERS["communication"], True)
    shown.append([fp32, host])
    svc.loop.choose.live(job_id)
    shown.append([fp32, host])
    svc.loop.choose.live(job_id)
    assert tried == ["host_contention"]
    shown.append([comm])
    svc.loop.choose.launch(job_id)
    shown.append([comm])
    why = svc.loop.choose.launch(job_id)
    assert "communication above threshold in two windows in a row, and no lever addresses it" in why
