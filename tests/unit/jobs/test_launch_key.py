import pytest

from gitmd.jobs.launch_key import launch_key


@pytest.mark.parametrize(
    ("command", "key"),
    [
        (["python", "train.py", "--batch", "64"], "python /w/train.py"),
        (["python3.12", "-u", "train.py", "--batch", "128", "--seed", "3"], "python /w/train.py"),
        (["/usr/bin/python3", "/abs/eval.py"], "python /abs/eval.py"),
        (["torchrun", "--nproc_per_node=8", "train.py", "--epochs", "3"], "python /w/train.py"),
        (["python", "-m", "pkg.train", "--lr", "1e-3"], "python -m pkg.train"),
        (["./bench", "--size", "4096"], "/w/bench"),
        (["nvidia-smi"], "nvidia-smi"),
        ([], ""),
    ],
)
def test_arguments_do_not_change_the_key(command: list[str], key: str) -> None:
    assert launch_key(command, "/w") == key


def test_inline_code_is_keyed_by_its_text() -> None:
    a = launch_key(["python", "-c", "print(1)"], "/w")
    assert a.startswith("python -c ") and a == launch_key(["python", "-c", "print(1)"], "/x")
    assert a != launch_key(["python", "-c", "print(2)"], "/w")


def test_a_jobs_default_name_is_its_script_not_its_interpreter() -> None:
    """Hardening issue, item 11: every Python job was named `python3`."""
    from gitmd.jobs.launch_key import default_name

    assert default_name(["/usr/bin/python3", "-u", "train.py", "--lr", "3"]) == "train"
    assert default_name(["python3.12", "-m", "torch.distributed.run", "x.py"]) == "torch.distributed.run"
    assert default_name(["torchrun", "--nproc_per_node", "8", "/srv/job/pretrain.py"]) == "pretrain"
    assert default_name(["python3", "-c", "print(1)"]) == "python3"
    assert default_name(["/opt/app/bin/solver", "in.dat"]) == "solver"
    assert default_name([]) == ""
