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
        # launchers and wrappers are looked through to the program they start
        (
            ["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py", "--lr", "3"],
            "python /w/train.py",
        ),
        (
            ["python3", "-m", "torch.distributed.launch", "--nproc_per_node=8", "tools/t.py", "cfg/x.py"],
            "python /w/tools/t.py",
        ),
        (["python", "-m", "cProfile", "-o", "out.prof", "train.py"], "python /w/train.py"),
        (["python", "-m", "coverage", "run", "-m", "pkg.train"], "python -m pkg.train"),
        (["accelerate", "launch", "--config_file", "c.yaml", "t.py"], "python /w/t.py"),
        (["srun", "-n", "2", "python", "train.py"], "python /w/train.py"),
        (["numactl", "--cpunodebind=0", "python3", "-u", "train.py"], "python /w/train.py"),
        (["env", "A=1", "torchrun", "--nproc_per_node=2", "train.py"], "python /w/train.py"),
        (["/usr/bin/env", "python3", "train.py"], "python /w/train.py"),
        (["uv", "run", "--with", "torch", "train.py"], "python /w/train.py"),
        (["./train.py", "--lr", "3"], "python /w/train.py"),  # run by its #! line
        # a shell script is its program; a shell alone, or a wrapper around what is not read, is generic
        (["bash", "-x", "run.sh", "--fast"], "bash /w/run.sh"),
        (["bash", "-o", "pipefail", "run.sh"], "bash /w/run.sh"),
        (["srun", "bash", "job.sh"], "bash /w/job.sh"),
        (["bash", "-euxo", "pipefail", "run.sh"], "bash /w/run.sh"),
        (["bash", "--rcfile", "rc", "--login", "run.sh"], "bash /w/run.sh"),
        (["bash", "--", "run.sh"], "bash /w/run.sh"),
        (["bash"], "bash"),
        (["bash", ""], "bash"),
        (["bash", "-"], "bash"),
        (["srun", "./solver"], "srun"),
        (["mpirun", "--hostfile", "/etc/hosts", "./solver"], "mpirun"),
        (["python", "-m", "torch.distributed.run", "./solver"], "python python"),
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


def test_shell_code_is_keyed_by_its_text() -> None:
    a = launch_key(["bash", "-c", "python a.py"], "/w")
    assert a.startswith("bash -c ") and a != launch_key(["bash", "-c", "python b.py"], "/w")


def test_which_keys_are_generic() -> None:
    """A generic key names no one program; it never resolves to a workload (library.at_launch)."""
    from gitmd.jobs.launch_key import generic, owned

    for command in (["bash"], ["python3"], ["srun", "./a"], ["python", "-m", "torch.distributed.run", "x"]):
        assert generic(owned(1000, launch_key(command, "/w"))), command
    for command in (["bash", "a.sh"], ["python", "a.py"], ["./bench"], ["nvidia-smi"], ["python", "-m", "p"]):
        assert not generic(owned(1000, launch_key(command, "/w"))), command
    assert not generic("uid:1000 nightly-resnet")  # a scheduler's --launch-key names its job
    assert launch_key(["bash", "a.sh"], "/w") != launch_key(["bash", "b.sh"], "/w")


def test_a_jobs_default_name_is_its_script_not_its_interpreter() -> None:
    """Hardening issue, item 11: every Python job was named `python3`."""
    from gitmd.jobs.launch_key import default_name

    assert default_name(["/usr/bin/python3", "-u", "train.py", "--lr", "3"]) == "train"
    assert default_name(["python3.12", "-m", "torch.distributed.run", "x.py"]) == "x"
    assert default_name(["python3.12", "-m", "pkg.train", "x.py"]) == "pkg.train"
    assert default_name(["srun", "-n", "2", "bash", "run.sh"]) == "run"
    assert default_name(["torchrun", "--nproc_per_node", "8", "/srv/job/pretrain.py"]) == "pretrain"
    assert default_name(["python3", "-c", "print(1)"]) == "python3"
    assert default_name(["/opt/app/bin/solver", "in.dat"]) == "solver"
    assert default_name([]) == ""


def test_a_slurm_job_name_is_no_stated_key() -> None:
    """`gitmctl slurm` keys a job with no command by its Slurm job name, which unrelated jobs share
    ("interactive"): it keys the job's history, but does not say which workload a launch is."""
    from gitmd.jobs.launch_key import stated

    assert stated("nightly-resnet") and not stated("") and not stated("slurm-job-name:interactive")
    # nor does it name a command line: no command key, so a run it linked resolves no later launch
    from gitmd.jobs.launch_key import command_key

    assert command_key("uid:1000 slurm-job-name:interactive", [], "/home/u") == ""
    assert command_key("uid:1000 slurm-job-name:interactive", ["bash"], "/home/u") == ""
    assert command_key("uid:1000 python /w/a.py", [], "/w") == ""
