"""The Python frameworks a job's process runs, with their versions, from what the process has mapped
(fleet issue, item 2: a policy's evidence says what it was learned with; a node that gets it from the
fleet shows the difference and confirms it on its own runs).

From /proc/<pid>/maps: every mapped file under a ``site-packages`` or ``dist-packages`` folder
names a top-level package (torch, cupy, jaxlib, nvidia/cublas, ...). That folder's
``<name>-<version>.dist-info`` directories give the distributions installed there, their name and
version in the directory's own name, and ``top_level.txt`` the packages each provides. Nothing is
imported and no metadata file beyond top_level.txt is read: gitmd runs as root and these folders are
the job's user's, so a directory reached through a link is skipped, top_level.txt is opened without
following links and read to at most 4 KiB, and names and versions that are not plain ones are left
out.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MAX_FRAMEWORKS = 16
_SITE = re.compile(r"^(.*/(?:site|dist)-packages)/([^/]+)(?:/([^/]+))?")
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!-]{0,63}$")
_TOP_LEVEL_BYTES = 4096


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _read_small(path: Path) -> str:
    """A small file opened without following a link ("" : none, or not a plain file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        return os.read(fd, _TOP_LEVEL_BYTES).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _installed(site: str) -> dict[str, list[tuple[str, str]]]:
    """Top-level package -> the distributions (name, version) in ``site`` that provide it."""
    out: dict[str, list[tuple[str, str]]] = {}
    try:
        entries = list(os.scandir(site))
    except OSError:
        return out
    for e in entries:
        if not e.name.endswith(".dist-info") or not e.is_dir(follow_symlinks=False):
            continue
        stem = e.name[: -len(".dist-info")]
        name, sep, version = stem.partition("-")
        if not sep or not _PLAIN.match(name) or not _PLAIN.match(version):
            continue
        tops = _read_small(Path(e.path) / "top_level.txt").split() or [name]
        for top in tops[:64]:
            out.setdefault(_norm(top), []).append((name, version))
    return out


def plain_frameworks(raw: object) -> dict[str, str]:
    """Frameworks as another node sent them (a policy's evidence), kept only when plain: at most
    MAX_FRAMEWORKS names and versions as this module reads them (anything else is dropped, never
    shown)."""
    if not isinstance(raw, dict):
        return {}
    out = {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}
    return dict(
        sorted((k, v) for k, v in out.items() if _PLAIN.match(k) and _PLAIN.match(v))[:MAX_FRAMEWORKS]
    )


def maps_library(frameworks: dict[str, str], library: str) -> bool | None:
    """Whether a process whose frameworks (frameworks_of) are these maps the distribution ``library``
    (names compared as this module normalises them); None where that is not known: nothing read,
    or a list at MAX_FRAMEWORKS, which may have left it out (torch sorts after a CUDA wheel's eleven
    nvidia-* distributions)."""
    if not frameworks or len(frameworks) >= MAX_FRAMEWORKS:
        return None
    return _norm(library) in {_norm(k) for k in frameworks}


def frameworks_of(pid: int, proc: Path = Path("/proc")) -> dict[str, str]:
    """Distribution name -> version of the Python packages whose files the process has mapped (at
    most MAX_FRAMEWORKS, by name); {} when its maps cannot be read."""
    try:
        maps = (proc / str(pid) / "maps").read_text(errors="replace")
    except OSError:
        return {}
    wanted: dict[str, set[tuple[str, str]]] = {}  # site -> (top, the component under it)
    for line in maps.splitlines():
        fields = line.split(None, 5)  # address perms offset dev inode [path]
        m = _SITE.match(fields[5].strip()) if len(fields) == 6 else None
        if m:
            wanted.setdefault(m.group(1), set()).add((m.group(2), m.group(3) or ""))
    found: dict[str, str] = {}
    for site, tops in sorted(wanted.items()):
        installed = _installed(site)
        for top, sub in sorted(tops):
            top = top.removesuffix(".libs")  # auditwheel's folder of a package's vendored libraries
            dists = installed.get(_norm(top), [])
            if len(dists) > 1:  # a namespace several distributions share (nvidia/cublas, ...)
                dists = [d for d in dists if sub and _norm(sub) in _norm(d[0])]
            if len(dists) == 1:
                found[dists[0][0]] = dists[0][1]
    return dict(sorted(found.items())[:MAX_FRAMEWORKS])
