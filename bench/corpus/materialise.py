#!/usr/bin/env python3
"""Materialise the third-party corpus from local read-only git mirrors.

For every repo in manifest.toml, extracts the listed paths at the pinned commit from
<mirrors>/<owner>+<name>/repo into bench/corpus/src/<owner>+<name>/ with
`git --git-dir MIRROR archive COMMIT -- PATHS | tar -x`. Idempotent: a stamp file records the
commit and paths; a folder whose stamp matches is left alone.

    python3 bench/corpus/materialise.py            # materialise everything
    python3 bench/corpus/materialise.py --list     # programs and their commands
    python3 bench/corpus/materialise.py --mirrors DIR   (or env GITM_MIRRORS)

Python 3.11+, standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MANIFEST = HERE / "manifest.toml"
DEFAULT_DEST = HERE / "src"
DEFAULT_MIRRORS = "/work/.mirror"
STAMP = ".gitm-materialised.json"
REQUIRED = (
    "name",
    "repo",
    "commit",
    "licence",
    "paths",
    "command",
    "data",
    "step_clock",
    "output",
    "kind",
    "threads",
)


class CorpusError(Exception):
    pass


def slug(repo: str) -> str:
    owner, _, name = repo.partition("/")
    if not owner or not name or "/" in name:
        raise CorpusError(f"repo {repo!r} is not owner/name")
    return f"{owner}+{name}"


def load_manifest(path: Path) -> list[dict]:
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise CorpusError(f"manifest not found: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise CorpusError(f"{path}: {e}") from None
    programs = doc.get("program", [])
    if not programs:
        raise CorpusError(f"{path}: no [[program]] entries")
    seen = set()
    for p in programs:
        missing = [k for k in REQUIRED if k not in p]
        if missing:
            raise CorpusError(f"{path}: program {p.get('name', '?')!r} lacks {', '.join(missing)}")
        if p["name"] in seen:
            raise CorpusError(f"{path}: duplicate program name {p['name']!r}")
        seen.add(p["name"])
        if len(p["commit"]) != 40:
            raise CorpusError(f"{p['name']}: commit must be a full 40-hex sha")
        if not p["command"] or not all(isinstance(a, str) for a in p["command"]):
            raise CorpusError(f"{p['name']}: command must be a non-empty list of strings")
    return programs


def group_by_repo(programs: list[dict]) -> dict[str, dict]:
    repos: dict[str, dict] = {}
    for p in programs:
        r = repos.setdefault(p["repo"], {"commit": p["commit"], "paths": set(), "programs": []})
        if r["commit"] != p["commit"]:
            raise CorpusError(
                f"{p['repo']}: programs pin different commits "
                f"({r['commit'][:12]} vs {p['commit'][:12]}); use one commit per repo"
            )
        r["paths"].update(x.strip("/") for x in p["paths"])
        r["programs"].append(p["name"])
    return repos


def git(mirror: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(mirror), *args], capture_output=True, **kw)


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            fp = Path(root, f)
            if not fp.is_symlink():
                total += fp.stat().st_size
    return total


def materialise_repo(repo: str, commit: str, paths: list[str], mirrors: Path, dest: Path) -> str:
    mirror = mirrors / slug(repo) / "repo"
    if not mirror.is_dir():
        raise CorpusError(
            f"{repo}: no mirror at {mirror}; fetch it first "
            f"(a bare git mirror of github.com/{repo} must be at that path)"
        )
    if git(mirror, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise CorpusError(f"{repo}: commit {commit} not in mirror {mirror}; fetch a newer snapshot")
    for p in paths:
        ls = git(mirror, "ls-tree", commit, "--", p, text=True)
        if ls.returncode != 0 or not ls.stdout.strip():
            raise CorpusError(f"{repo}: path {p!r} does not exist at {commit[:12]}")

    out = dest / slug(repo)
    stamp = {"repo": repo, "commit": commit, "paths": paths}
    stamp_file = out / STAMP
    if stamp_file.is_file():
        try:
            old = json.loads(stamp_file.read_text())
        except (OSError, ValueError):
            old = None
        if old == stamp and all((out / p).exists() for p in paths):
            return "up to date"

    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{slug(repo)}.", dir=dest))
    try:
        archive = subprocess.Popen(
            ["git", "--git-dir", str(mirror), "archive", commit, "--", *paths],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        untar = subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout, capture_output=True)
        archive.stdout.close()
        a_err = archive.stderr.read()
        archive.stderr.close()
        if archive.wait() != 0:
            raise CorpusError(f"{repo}: git archive failed: {a_err.decode(errors='replace').strip()}")
        if untar.returncode != 0:
            raise CorpusError(f"{repo}: tar -x failed: {untar.stderr.decode(errors='replace').strip()}")
        (tmp / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return "materialised"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    ap.add_argument(
        "--mirrors",
        type=Path,
        default=Path(os.environ.get("GITM_MIRRORS", DEFAULT_MIRRORS)),
        help="folder holding <owner>+<name>/repo bare mirrors (default: $GITM_MIRRORS or /work/.mirror)",
    )
    ap.add_argument(
        "--dest", type=Path, default=DEFAULT_DEST, help="where to materialise (default: bench/corpus/src)"
    )
    ap.add_argument(
        "--list",
        action="store_true",
        help="print the programs, one per line, with folder and command; materialise nothing",
    )
    args = ap.parse_args(argv)

    try:
        programs = load_manifest(args.manifest)
        if args.list:
            for p in programs:
                print(f"{p['name']}\tsrc/{slug(p['repo'])}\t{shlex.join(p['command'])}")
            return 0
        repos = group_by_repo(programs)
        for repo, r in repos.items():
            state = materialise_repo(repo, r["commit"], sorted(r["paths"]), args.mirrors, args.dest)
            size = dir_size(args.dest / slug(repo))
            print(
                f"{repo}@{r['commit'][:12]}: {state}, {size / 2**20:.1f} MiB ({len(r['programs'])} programs)"
            )
    except CorpusError as e:
        print(f"materialise: error: {e}", file=sys.stderr)
        return 1
    total = sum(dir_size(args.dest / slug(repo)) for repo in repos)
    print(f"total: {total / 2**20:.1f} MiB in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
