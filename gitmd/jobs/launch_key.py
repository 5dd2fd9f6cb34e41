"""Launch keys: what makes two launches "the same job" before any kernel has run.

The program a command runs identifies the workload: a Python script, module or ``-c`` code, a shell
script, or an executable. Options and arguments (batch size, epochs, seeds, data paths) do not, so a
recurring job keeps its key across them. What only starts another program is looked through to the
program it starts: Python's launchers (``torchrun``, ``python -m torch.distributed.run``,
``accelerate launch``, ``python -m cProfile``...), and wrappers such as ``env``, ``numactl``,
``srun``, ``nohup`` or ``uv run`` in front of a Python or shell command.

A command in which no one program can be named (``bash`` alone, ``python`` with no script, a
wrapper in front of something this module does not read) gets a *generic* key: the interpreter or
wrapper it starts with. A generic key still keys the job's run history and crash suspicion (over-broad
there, which is the safe side), but never resolves to a workload: ``bash a.sh`` and ``bash b.sh``
both keyed ``bash`` made one workload of two programs, so one's policy was applied at the other's
launch and one's runs became arms of the other's launch trials.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from typing import NamedTuple

_PYTHON = re.compile(r"^(python[\d.]*|pypy[\d.]*)$")
# executables that run a Python script or module named later on their command line
_LAUNCHERS = {"torchrun", "accelerate", "deepspeed"}
# `python -m MODULE ...` where MODULE runs a script or module named after it
_RUNNER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "deepspeed.launcher.runner",
    "torch.utils.bottleneck",
    "cProfile",
    "profile",
    "pdb",
    "trace",
    "coverage",
    "memray",
    "scalene",
    "pyinstrument",
    "viztracer",
    "debugpy",
}
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}
# commands that run another command given later on their command line (with options of their own)
_WRAPPERS = {
    "env",
    "nohup",
    "time",
    "nice",
    "ionice",
    "setsid",
    "stdbuf",
    "chrt",
    "taskset",
    "numactl",
    "timeout",
    "sudo",
    "srun",
    "mpirun",
    "mpiexec",
    "uv",
    "poetry",
    "pipenv",
    "pixi",
    "hatch",
    "conda",
    "mamba",
    "micromamba",
    "apptainer",
    "singularity",
    "nsys",
    "ncu",
}


def _absolute(cwd: str, path: str) -> str:
    return os.path.normpath(path if os.path.isabs(path) or not cwd else os.path.join(cwd, path))


def _is_python(word: str) -> bool:
    return bool(_PYTHON.match(os.path.basename(word)))


def _python_target(command: list[str]) -> tuple[str, str] | None:
    """What a python (or launcher) command line runs: ("-m", module), ("-c", code) or ("script",
    path); ("", "") when none is named; None when the command is no python one."""
    if not _is_python(command[0]) and os.path.basename(command[0]) not in _LAUNCHERS:
        return None
    args = command[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-m", "-c") and i + 1 < len(args):
            if a == "-m" and args[i + 1] in _RUNNER_MODULES:
                i += 2  # a launcher module: the program is the one it is given
                continue
            return a, args[i + 1]
        if a.endswith(".py") and not a.startswith("-"):
            return "script", a
        i += 1
    return "", ""


def _wrapped(command: list[str]) -> list[str] | None:
    """The command a wrapper (``env``, ``numactl``, ``srun``...) runs: from its first word that is
    a Python interpreter, a Python launcher, a shell or a ``.py`` script; None when there is none
    (a wrapper's options take values, so nothing else is taken for the command)."""
    for i, a in enumerate(command[1:], start=1):
        base = os.path.basename(a)
        if _is_python(a) or base in _LAUNCHERS or base in _SHELLS:
            return command[i:]
        if a.endswith(".py") and not a.startswith("-") and "=" not in a:
            return ["python", *command[i:]]  # `uv run train.py`: the script itself
    return None


def _shell_target(command: list[str]) -> tuple[str, str]:
    """What a shell command line runs: ("-c", code), ("script", path), or ("", ""). An option
    cluster ending in o or O (`-o`, `-euxo`) takes the next word as its value; with c in it
    (`-ec`), the next word is the code."""
    args = command[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if not a or a == "-":
            return "", ""  # `bash ''`, `bash -` (the script on stdin): no script named
        if a in ("--rcfile", "--init-file"):
            i += 2
            continue
        if a.startswith("--") and a != "--":
            i += 1  # --login, --norc, --posix...
            continue
        if a == "--":
            return ("script", args[i + 1]) if i + 1 < len(args) and args[i + 1] else ("", "")
        if a.startswith(("-", "+")) and len(a) > 1:
            if "c" in a[1:] and a[0] == "-":
                return ("-c", args[i + 1]) if i + 1 < len(args) else ("", "")
            i += 2 if a[-1] in "oO" else 1
            continue
        return "script", a
    return "", ""


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


class _Program(NamedTuple):
    """What a command line runs: ``interp`` "python", a shell's name, or "" (an executable, or a
    wrapper around what is not read); ``kind`` "-m", "-c", "script", "exe" or "" (none named);
    ``what`` the module, code, path or executable; ``exe`` the basename of the word it starts with."""

    interp: str
    kind: str
    what: str
    exe: str


def _program(command: list[str], depth: int = 0) -> _Program:
    """The program a (non-empty) command line runs, looked through launchers and wrappers."""
    exe = os.path.basename(command[0])
    if exe in _WRAPPERS and depth < 4:
        inner = _wrapped(command)
        return _program(inner, depth + 1) if inner is not None else _Program("", "", exe, exe)
    if exe in _SHELLS:
        return _Program(exe, *_shell_target(command), exe)
    if command[0].endswith(".py") and not _is_python(command[0]):
        return _Program("python", "script", command[0], exe)  # run by its #! line: `python x.py` too
    target = _python_target(command)
    if target is None:
        return _Program("", "exe", command[0], exe)
    return _Program("python", *target, exe)


def launch_key(command: list[str], cwd: str) -> str:
    if not command:
        return ""
    p = _program(command)
    if not p.interp:  # an executable, or (generic) a wrapper around something not read here
        return _absolute(cwd, p.what) if p.kind == "exe" and "/" in p.what else p.what
    if p.kind == "-c":
        return f"{p.interp} -c {_digest(p.what)}"
    if p.kind == "script":
        return f"{p.interp} {_absolute(cwd, p.what)}"
    if p.kind == "-m":
        return f"python -m {p.what}"
    return f"python {p.exe}" if p.interp == "python" else p.interp  # generic: none named


COMMAND_SEP = " #command:"


def command_key(key: str, command: list[str], cwd: str) -> str:
    """The launch key narrowed to one exact command line in one directory ("" for a generic key):
    what resolves a launch and joins a run to a workload when the launch key alone is not enough
    (a script whose arguments choose the program it runs: timm's benchmark.py --model X)."""
    if not key or not command or generic(key) or _unowned(key).startswith(WEAK_PREFIXES):
        return ""  # no command line to name (a Slurm job with none: its job name is all it has)
    return f"{key}{COMMAND_SEP}{command_digest(command, cwd)}"


def command_digest(command: Sequence[str], cwd: str) -> str:
    """One exact command line in one directory, as 16 hex digits. Two runs with one digest ran the
    same arguments, so as far as gitmd can tell they did the same work: what a launch trial's pairs
    must have in common (one workload's command lines differ in steps, batch or data, and so in
    length), and what a run's length is compared with."""
    return hashlib.sha1("\0".join([cwd, *command]).encode()).hexdigest()[:16]


def _unowned(key: str) -> str:
    key = key.split(COMMAND_SEP, 1)[0]
    return key.split(" ", 1)[1] if key.startswith("uid:") and " " in key else key


def names_program(key: str) -> bool:
    """The key (owned or not) names one program by its source, not just the interpreter or
    executable that ran it: a Python script, module or -c code, or a shell script or -c code. A
    run whose fingerprint matches no workload may join the one such a key names (library.observe).
    An executable's path is not enough for that (a compiled launcher runs whatever its arguments
    say), nor is a bare interpreter (`bash`, `python python3`)."""
    key = _unowned(key)
    word, _, what = key.partition(" ")
    if word == "python":
        return what.startswith(("-m ", "-c ")) or what.endswith(".py")
    if word in _SHELLS:
        return what.startswith("-c ") or what.startswith("/")
    return False


def generic(key: str) -> bool:
    """The key (owned or not) names no one program: a shell, interpreter, launcher or wrapper with
    no program of its own read from the command line (`bash`, `python python3`, `srun`). Such a key
    never resolves to a workload (library.at_launch)."""
    key = _unowned(key)
    if not key:
        return True
    word, _, what = key.partition(" ")
    if word == "python":
        return not names_program(key)
    if what:
        return False
    return word in _SHELLS or word in _WRAPPERS or word in _LAUNCHERS or bool(_PYTHON.match(word))


# keys a launcher sends that it did not read from a program (`gitmctl slurm` for a job with no
# command: its Slurm job name, which many unrelated jobs share, e.g. "interactive")
WEAK_PREFIXES = ("slurm-job-name:",)


def stated(given: str) -> bool:
    """A key a launcher gave (``--launch-key``) states what makes its runs the same job, and may
    resolve a launch by itself; a weak one (WEAK_PREFIXES) does not."""
    return bool(given) and not given.startswith(WEAK_PREFIXES)


def owned(uid: int, key: str) -> str:
    """A launch key bound to the user who launches (hardening issue, item 2): the same script of two
    users is two keys, so no user can claim another's workload or its policy by naming its key."""
    return f"uid:{uid} {key}" if key else ""


def default_name(command: list[str]) -> str:
    """A job's name when none is given: the program it runs (`train` for `python3 train.py`, for
    `torchrun ... train.py` and for `srun python train.py`, the module for `-m`, `run` for
    `bash run.sh`), else the executable's basename. Every Python job was named `python3` before
    (hardening issue, item 11)."""
    if not command:
        return ""
    p = _program(command)
    if p.kind == "-m":
        return p.what
    if p.kind == "script":
        name = os.path.basename(p.what)
        return name.removesuffix(".sh" if p.interp != "python" else ".py") or p.exe
    if p.kind == "exe" or not p.interp:
        return os.path.basename(p.what)
    return p.exe
