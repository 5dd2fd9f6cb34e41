"""A program's run history (gitmd/jobs/history.py): lengths, and what a length is compared with,
are of one command line; a line with fewer runs than asked is planned on its script's other lines
too."""

import json
from pathlib import Path

from gitmd.config import CaptureConfig
from gitmd.jobs.registry import JobRegistry, Registration
from gitmd.store.db import Store


def test_lengths_are_of_one_command_line_and_a_new_line_is_planned_on_its_scripts(tmp_path: Path) -> None:
    """timm's benchmark.py runs one model by its arguments: ResNet-18 for 7 s, a ViT for 20 s. The
    key alone mixed them (the baseline a run's cost is measured against, the spread a trial stops
    on); each line now has its own, and a line not run yet is planned on the script's runs."""
    reg = JobRegistry(Store(tmp_path / "g.db"), tmp_path / "run", CaptureConfig(), max_per_user=20)

    def bench(model: str) -> Registration:
        return Registration(
            "b", ("python", "benchmark.py", "--model", model), "/w", 4001, 4001, capture=False
        )

    for model, s in (("resnet18", 7.0), ("vit", 20.0), ("resnet18", 7.2), ("vit", 20.4)):
        job = reg.register(bench(model))[0]
        reg.exited(job.id, 0, run_s=s)
    # one observed run of each: what its windows cost it
    for model, share, model_s in (("resnet18", 0.15, 0.3), ("vit", 0.02, 0.1)):
        job = reg.register(bench(model))[0]
        cost = json.dumps({"share": share, "capture_model_s": model_s, "window_s": 1.0})
        reg.exited(job.id, 0, windows=2, run_s=30.0, cost=cost)
    resnet = reg.register(bench("resnet18"))[0]
    key = resnet.launch_key
    line = (resnet.command, resnet.cwd)
    assert sorted(reg.plain_runs_s(key, set(), runs=9)) == [7.0, 7.2, 20.0, 20.4, 30.0, 30.0]  # both
    assert sorted(reg.plain_runs_s(key, set(), command=line)) == [7.0, 7.2, 30.0]
    assert reg.earlier_runs_s(key, resnet.created_ns, clock="run_s", command=line) == [30.0, 7.2, 7.0]
    assert reg.program_runs_s(resnet, clock="run_s") == [30.0, 7.2, 7.0]
    assert reg.program_cost_shares(resnet) == [0.15, 0.02]  # its own first (the key's latest: the ViT's)
    # fewer of its own than asked: topped up with the script's other lines' latest
    assert reg.program_runs_s(resnet, runs=5, clock="run_s") == [30.0, 7.2, 7.0, 30.0, 20.4]
    assert reg.observed_cost_shares(key, resnet.created_ns) == [0.02, 0.15]
    assert reg.program_window_slowdown(resnet) == 0.3
    # a model not run here yet: planned on the script's latest runs until it has its own
    new = reg.register(bench("convnext"))[0]
    assert new.launch_key == key
    assert reg.earlier_runs_s(key, new.created_ns, clock="run_s", command=(new.command, new.cwd)) == []
    assert reg.program_runs_s(new, clock="run_s") == [30.0, 30.0, 20.4]
    assert reg.program_cost_shares(new) == [0.02, 0.15] and reg.program_window_slowdown(new) == 0.1
