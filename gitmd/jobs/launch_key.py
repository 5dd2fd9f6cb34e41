"""Launch keys: what makes two launches "the same job" before any kernel has run.

The script (python, torchrun...) or the executable identifies the workload; options and arguments
(batch size, epochs, seeds, data paths) do not, so a recurring job keeps its key across them.
"""

from __future__ import annotations

import hashlib
import os
import re

_PYTHON = re.compile(r"^(python[\d.]*|pypy[\d.]*)$")
_LAUNCHERS = {"torchrun", "accelerate", "deepspeed", "python-m-torch.distributed.run"}


def _absolute(cwd: str, path: str) -> str:
    return os.path.normpath(path if os.path.isabs(path) or not cwd else os.path.join(cwd, path))


def _python_target(command: list[str]) -> tuple[str, str] | None:
    """What a python (or launcher) command line runs: ("-m", module), ("-c", code) or ("script",
    path); ("", "") when none is named; None when the command is no python one."""
    if not _PYTHON.match(os.path.basename(command[0])) and os.path.basename(command[0]) not in _LAUNCHERS:
        return None
    args = command[1:]
    for i, a in enumerate(args):
        if a in ("-m", "-c") and i + 1 < len(args):
            return a, args[i + 1]
        if a.endswith(".py") and not a.startswith("-"):
            return "script", a
    return "", ""


def launch_key(command: list[str], cwd: str) -> str:
    if not command:
        return ""
    exe = os.path.basename(command[0])
    target = _python_target(command)
    if target is None:
        return _absolute(cwd, command[0]) if "/" in command[0] else command[0]
    kind, what = target
    if kind == "-m":
        return f"python -m {what}"
    if kind == "-c":
        return "python -c " + hashlib.sha1(what.encode()).hexdigest()[:12]
    return "python " + _absolute(cwd, what) if kind == "script" else f"python {exe}"


def names_program(key: str) -> bool:
    """The key (owned or not) names one program, not just the interpreter or executable that ran
    it: a Python script, module or -c code. A shell, a compiled launcher or a bare interpreter
    (`bash`, `python python3`) names every program it runs alike."""
    key = key.split(" ", 1)[1] if key.startswith("uid:") and " " in key else key
    if not key.startswith("python "):
        return False
    what = key[len("python ") :]
    return what.startswith(("-m ", "-c ")) or what.endswith(".py")


def owned(uid: int, key: str) -> str:
    """A launch key bound to the user who launches (hardening issue, item 2): the same script of two
    users is two keys, so no user can claim another's workload or its policy by naming its key."""
    return f"uid:{uid} {key}" if key else ""


def default_name(command: list[str]) -> str:
    """A job's name when none is given: the script for python and its launchers (`train` for
    `python3 train.py`, the module for `-m`), else the executable's basename. Every Python job was
    named `python3` before (hardening issue, item 11)."""
    if not command:
        return ""
    exe = os.path.basename(command[0])
    kind, what = _python_target(command) or ("", "")
    if kind == "-m":
        return what
    if kind == "script":
        return os.path.basename(what)[: -len(".py")] or exe
    return exe
