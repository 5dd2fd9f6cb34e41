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


def launch_key(command: list[str], cwd: str) -> str:
    if not command:
        return ""
    exe = os.path.basename(command[0])
    if _PYTHON.match(exe) or exe in _LAUNCHERS:
        args = command[1:]
        for i, a in enumerate(args):
            if a == "-m" and i + 1 < len(args):
                return f"python -m {args[i + 1]}"
            if a == "-c" and i + 1 < len(args):
                return "python -c " + hashlib.sha1(args[i + 1].encode()).hexdigest()[:12]
            if a.endswith(".py") and not a.startswith("-"):
                return "python " + _absolute(cwd, a)
        return f"python {exe}"
    return _absolute(cwd, command[0]) if "/" in command[0] else command[0]


def default_name(command: list[str]) -> str:
    """A job's name when none is given: the script for python and its launchers (`train` for
    `python3 train.py`, the module for `-m`), else the executable's basename. Every Python job was
    named `python3` before (hardening issue, item 11)."""
    if not command:
        return ""
    exe = os.path.basename(command[0])
    if _PYTHON.match(exe) or exe in _LAUNCHERS:
        args = command[1:]
        for i, a in enumerate(args):
            if a == "-m" and i + 1 < len(args):
                return args[i + 1]
            if a.endswith(".py") and not a.startswith("-"):
                return os.path.basename(a)[: -len(".py")] or exe
    return exe
