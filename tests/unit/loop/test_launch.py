"""Launch (gitmd/loop/launch.py): what a registered job starts with — here a validated cpu_affinity
policy, chosen at registration and set by the launcher before exec (or from the tick when it was
not)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gitmd.jobs.registry import Registration
from tests.unit.loop.helpers import make_service, mapping_child, pending, ring_for, service_with_policy


def test_a_cpu_affinity_policy_comes_with_the_launch_plan_and_is_set_at_exec(
    tmp_path: Path, write_ring: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validated cpu_affinity policy is chosen at registration, as many CPUs as the launcher starts
    on, and comes back in the plan, for the launcher to set before exec (contended, H200: the policy
    set a tick after the first CUDA call left the import and the first steps on the busy cores). A
    process already on those CPUs gets the policy's intervention recorded (its revert goes back to
    the CPUs the launcher started on; a CPU the host lacks is dropped); one whose launcher ignored the
    plan gets them set from the tick."""

    import gitmd.loop.targets as targets_mod

    start = os.sched_getaffinity(0)
    if len(start) < 2:
        pytest.skip("needs two CPUs")
    first = min(start)
    chosen: list[tuple[int, set[int] | None]] = []

    def quiet(
        count: int, prefer: set[int] | None = None, interval_s: float = 0.2, load: object = None
    ) -> set[int]:
        chosen.append((count, None))
        return {first}  # the quietest CPU, as if the others were busy

    monkeypatch.setattr(targets_mod, "quiet_cpus", quiet)
    svc = service_with_policy(tmp_path, [{"lever": "cpu_affinity", "setting": {}}])
    reg = Registration(
        "train",
        ("python", "train.py"),
        "/srv",
        os.getuid(),
        os.getgid(),
        launch_key="train",
        cpus=(*start, 9999),
    )
    view, plan = svc.register_job(reg)
    assert plan.cpus == (first,) and chosen[-1][0] == max(2, min(len(start), 8))
    assert pending(svc, view.job.id).items[0]["at_exec"] == [first]
    # no CPUs said (a scheduler's registration): nothing at exec, the tick finds CPUs as before
    other, plain = svc.register_job(dataclasses.replace(reg, cpus=()))
    assert plain.cpus == () and "at_exec" not in pending(svc, other.job.id).items[0]
    svc.states.of(other.job.id).live = None
    svc.loop.pool.submit = lambda fn, job_id: fn(job_id)  # type: ignore[method-assign,assignment]
    for honoured in (True, False):
        if not honoured:
            view, plan = svc.register_job(reg)
        child = mapping_child(plan.env["GITM_JOB_DIR"])
        try:
            os.sched_setaffinity(child.pid, set(plan.cpus) if honoured else start)
            ring_for(write_ring, plan.env["GITM_JOB_DIR"], child.pid, threads=1 if honoured else 2)
            svc.get_job(view.job.id)
            svc.duty_cycle()
            assert svc.states.of(view.job.id).live is None
            assert os.sched_getaffinity(child.pid) == {first}
            assert "cpu_affinity" in svc.states.of(view.job.id).tried  # no experiment on it in this run
            (iv,) = svc.interventions.list(view.job.id)
            assert iv.lever == "cpu_affinity" and iv.state == "promoted"
            assert ("set at exec by its launcher" in iv.reason) == honoured
            # the policy's intervention either way: reverting it puts the job back where it started
            svc.revert_intervention(iv.id, "operator")  # as `gitmctl revert` does
            assert os.sched_getaffinity(child.pid) == start
        finally:
            child.kill()
            child.wait()


def test_gpus_are_this_hosts_each_once_and_the_job_sees_only_them(tmp_path: Path) -> None:
    """Hardening issue, item 10: `--gpus 7` was accepted on a 2-GPU host, `0,0,1` kept, and nothing
    selected the GPUs."""
    from gitmd.errors import InvalidArgumentError

    svc = make_service(tmp_path)  # one simulated GPU
    me = (os.getuid(), os.getgid())
    view, plan = svc.register_job(Registration("g", ("prog",), "/", *me, gpus=(0, 0)))
    assert view.job.gpus == (0,) and plan.env["CUDA_VISIBLE_DEVICES"] == svc.gpus()[0].uuid
    with pytest.raises(InvalidArgumentError, match=r"no GPU 3 on this host \(it has 1: 0..0\)"):
        svc.register_job(Registration("g", ("prog",), "/", *me, gpus=(0, 3)))
    assert len(svc.jobs.list(include_exited=True)) == 1  # the refused one was not registered
    _, plain = svc.register_job(Registration("p", ("prog",), "/", *me))
    assert "CUDA_VISIBLE_DEVICES" not in plain.env  # no --gpus: the launcher's own environment stands


def test_another_user_naming_a_workloads_launch_key_does_not_get_its_policy(tmp_path: Path) -> None:
    """Hardening issue, item 2: launch keys were free text, so any user could name another user's
    key and have gitmd treat the job as that workload (its policy at launch, its trials). A key is
    now bound to the user who launches: the same text from another user is another key."""
    from tests.unit.loop.helpers import recurring

    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    svc.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.5, (1.2, 1.8))
    me = Registration("train", ("python", "t.py"), "/w", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(me)
    assert plan.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "32" and view.job.workload_id == wid
    other = dataclasses.replace(me, uid=os.getuid() + 4242, gid=os.getgid() + 4242)
    view, plan = svc.register_job(other)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in plan.env and view.job.workload_id == ""
    assert view.job.launch_key == f"uid:{os.getuid() + 4242} train"


def test_a_command_that_names_no_one_program_gets_no_workload_at_launch(tmp_path: Path) -> None:
    """`bash a.sh` and `bash b.sh` were both keyed `bash` (and `python -m torch.distributed.run
    a.py` and `... b.py` both that module): the key's last workload came with every launch, so one
    program's policy (and the user's consent for it) was applied to another's run, and that run
    took an arm in the other's launch trial. A key that names no one program (launch_key.generic)
    now resolves to no workload: the run is observed and its fingerprint decides."""
    from tests.unit.loop.helpers import recurring

    svc = make_service(tmp_path)
    for key in ("srun", "python python3"):  # as a library written before this held them
        wid = recurring(svc, key)
    svc.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.5, (1.2, 1.8))
    me = (os.getuid(), os.getgid())
    for command in (("srun", "--ntasks=2", "./solver"), ("python3",)):
        view, plan = svc.register_job(Registration("", command, "/w", *me))
        assert view.job.workload_id == "" and plan.policy_id == 0, command
        assert "CUDA_DEVICE_MAX_CONNECTIONS" not in plan.env
    # the program behind a wrapper is named: its own key, which resolves once a run of it is seen
    view, _ = svc.register_job(Registration("", ("srun", "-n", "2", "python3", "train.py"), "/w", *me))
    assert view.job.launch_key == f"uid:{os.getuid()} python /w/train.py" and view.job.name == "train"


def test_a_script_whose_arguments_choose_the_program_is_resolved_by_its_command_line(tmp_path: Path) -> None:
    """timm's benchmark.py runs another model by --model (six of the corpus's programs). Resolved by
    the script alone, each model's launch came with the previous model's workload: its policy at
    launch, an arm in its launch trial (without the shim, so never fingerprinted). A launch now
    resolves by its exact command line (its fingerprint linked it), or by a key its launcher gave."""
    from gitmd.analysis.fingerprint import Signature
    from gitmd.jobs.launch_key import command_key

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())

    def reg(model: str) -> Registration:
        return Registration("", ("python", "benchmark.py", "--model", model), "/w", *me)

    key = f"uid:{os.getuid()} python /w/benchmark.py"
    view, plan = svc.register_job(reg("resnet18"))
    assert view.job.launch_key == key and plan.policy_id == 0
    wid = svc.library.observe(
        Signature(("conv",), {"conv": 1.0}), key, "benchmark", new_run=True, owner_uid=os.getuid(),
        command_key=command_key(key, list(reg("resnet18").command), "/w"),
    )  # fmt: skip
    svc.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.5, (1.2, 1.8))
    view, plan = svc.register_job(reg("resnet18"))  # the same command line: its workload's policy
    assert view.job.workload_id == wid and plan.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "32"
    view, plan = svc.register_job(reg("vit_small"))  # another model: observed first, no policy
    assert view.job.workload_id == "" and "CUDA_DEVICE_MAX_CONNECTIONS" not in plan.env
    assert any(
        f"without workload {wid}'s policy until a run of it is fingerprinted" in w for w in plan.warnings
    )
    given = dataclasses.replace(reg("vit_small"), launch_key="benchmark.py")  # the launcher says
    svc.library.observe(
        Signature(("conv",), {"conv": 1.0}), f"uid:{os.getuid()} benchmark.py", "benchmark", new_run=True,
        owner_uid=os.getuid(),
    )  # fmt: skip
    view, plan = svc.register_job(given)
    assert view.job.workload_id == wid and plan.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "32"
    # a Slurm job name is not stated: a run it linked does not bring the workload with the next
    weak = dataclasses.replace(given, command=(), launch_key="slurm-job-name:interactive")
    svc.library.observe(
        Signature(("conv",), {"conv": 1.0}), f"uid:{os.getuid()} slurm-job-name:interactive", "i",
        new_run=True, owner_uid=os.getuid(),
    )  # fmt: skip
    view, plan = svc.register_job(weak)
    assert view.job.workload_id == "" and plan.policy_id == 0


def test_a_new_command_line_of_a_script_is_observed_even_when_the_script_rests(tmp_path: Path) -> None:
    """The backoff lets a program observed on enough runs rest (no window, no shim). Counted by its
    script alone, a new model through the same script rested too, never seen, so never given a
    workload of its own: an unsure launch counts its own command line's observed runs."""
    import json as _json

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())

    def reg(model: str) -> Registration:
        return Registration("", ("python", "bench.py", "--model", model), "/w", *me, launcher_pid=os.getpid())

    for _ in range(2):  # two observed runs of one model
        v, _ = svc.register_job(reg("resnet18"))
        svc.jobs.exited(v.job.id, 0, windows=2, cost=_json.dumps({"share": 0.0}))
    v, plan = svc.register_job(reg("resnet18"))
    assert svc.states.of(v.job.id).resting and not plan.capture  # that command line rests
    v, plan = svc.register_job(reg("vit_small"))
    assert not svc.states.of(v.job.id).resting and plan.capture  # another one is observed


def test_a_stored_policy_variable_outside_the_allowlist_is_never_applied(tmp_path: Path) -> None:
    """Hardening issue, item 6: policy variables come from an allowlist (the catalog's own). It was
    checked where a policy comes in (experiments, import, fleet), not at launch: a policy stored
    before it, or written into the store by hand, still set BASH_ENV in the job. The launch checks
    each variable again, applies the rest and says what it refused."""
    import json

    from gitmd.levers.registry import env_variables
    from tests.unit.loop.helpers import recurring

    svc = make_service(tmp_path)
    svc.library.allowed_env = env_variables()  # as the daemon wires it
    wid = recurring(svc, "train")
    p = svc.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.5, (1.2, 1.8))
    smuggled = {"env": {"CUDA_DEVICE_MAX_CONNECTIONS": "32", "BASH_ENV": "/tmp/x", "NCCL_NET_PLUGIN": "y"}}
    with svc.jobs.store.transaction() as db:
        db.execute("UPDATE policies SET settings = ? WHERE id = ?", [json.dumps(smuggled), p.id])
    me = Registration("train", ("python", "t.py"), "/w", os.getuid(), os.getgid(), launch_key="train")
    _, plan = svc.register_job(me)
    assert plan.policy_id == p.id and plan.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "32"
    assert "BASH_ENV" not in plan.env and "NCCL_NET_PLUGIN" not in plan.env
    assert any(
        "sets BASH_ENV, NCCL_NET_PLUGIN, which no policy may set: not applied" in w for w in plan.warnings
    )


def test_a_sure_launch_counts_its_workloads_observed_runs_not_its_scripts(tmp_path: Path) -> None:
    """Two models of one script, each its own workload (its command line linked by a fingerprinted
    run), each observed once. Counted by the script, each had two observed runs, so each one's next
    run rested: observed once, never the observe_runs (2) runs its causes need to show twice. A sure
    launch counts its workload's observed runs."""
    from gitmd.analysis.fingerprint import Signature
    from gitmd.jobs.launch_key import command_key

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    key = f"uid:{os.getuid()} python /w/bench.py"

    def reg(model: str) -> Registration:
        return Registration("", ("python", "bench.py", "--model", model), "/w", *me, launcher_pid=os.getpid())

    for model, kernel in (("resnet18", "conv"), ("vit_small", "gemm")):
        v, plan = svc.register_job(reg(model))
        assert plan.capture and not svc.states.of(v.job.id).resting  # a first run: observed
        wid = svc.library.observe(
            Signature((kernel,), {kernel: 1.0}), key, model, new_run=True, owner_uid=os.getuid(),
            command_key=command_key(key, list(reg(model).command), "/w"),
        )  # fmt: skip
        svc.jobs.set_workload(v.job.id, wid)
        svc.jobs.exited(v.job.id, 0, windows=2)
    for model in ("resnet18", "vit_small"):
        v, plan = svc.register_job(reg(model))
        assert v.job.workload_id  # sure: its command line ran as its workload
        assert not svc.states.of(v.job.id).resting and plan.capture, svc.states.of(v.job.id).resting
        svc.jobs.exited(v.job.id, 0, windows=2)
    v, plan = svc.register_job(reg("resnet18"))  # its own two observed runs: now it may rest
    assert svc.states.of(v.job.id).resting and "observed on 2 earlier runs" in svc.states.of(v.job.id).resting
