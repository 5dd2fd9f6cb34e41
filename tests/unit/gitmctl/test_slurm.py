from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitmctl.commands import slurm


def test_gpu_lists_from_slurm() -> None:
    assert slurm._gpus("0,1,3") == [0, 1, 3]
    assert slurm._gpus("") == [] and slurm._gpus("gpu:a100:2") == []


def test_plan_files_are_the_users_and_plain_exports(tmp_path: Path) -> None:
    d = tmp_path / "plans"
    assert slurm._plan_dir(d) == d
    slurm._write_plan(
        d,
        "42",
        {"GITM_JOB_ID": "abc", "BAD NAME": "x", "EVIL": "a\nexport LD_PRELOAD=/x"},
        os.getuid(),
        os.getgid(),
    )
    path = d / "42.env"
    assert path.read_text() == "export GITM_JOB_ID=abc\n"
    assert (path.stat().st_mode & 0o777) == 0o600
    link = d / "43.env"
    link.symlink_to(tmp_path / "elsewhere")
    slurm._write_plan(d, "43", {"A": "1"}, os.getuid(), os.getgid())  # the link is replaced, not followed
    assert (
        not (tmp_path / "elsewhere").exists() and link.read_text() == "export A=1\n" and not link.is_symlink()
    )


def test_a_plan_directory_others_can_write_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "open"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    assert slurm._plan_dir(d) is None
    assert "writable by it alone" in capsys.readouterr().err
