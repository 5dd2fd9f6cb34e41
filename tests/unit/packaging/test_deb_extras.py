"""What the .deb adds for operators: generated man pages and completion, DPKG_ROOT-aware maintainer
scripts, a machine-readable copyright file (packaging/deb/, tools/manpages.py, tools/completion.py)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from gitmctl.__main__ import build_parser as gitmctl_parser
from gitmd.__main__ import build_parser as gitmd_parser
from gitmd.config import DEFAULT_CONFIG_PATH, DaemonConfig

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ROOT / "tools"
DEB = ROOT / "packaging" / "deb"
SCRIPTS = ("postinst", "prerm", "postrm")

# Requests the generator writes; any other line starting with . or ' would be roff taking text for one.
MACROS = {"TH", "SH", "SS", "TP", "PP", "RS", "RE", "nh", "br", '\\"'}
# Escapes the generator writes; a backslash that starts anything else was not escaped.
ESCAPES = re.compile(r"\\(?:f[BIR]|-|e|&|\(dq|\[u[0-9A-F]{4,6}\])")


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction:
    [sub] = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


def verbs() -> list[str]:
    return list(_subparsers(gitmctl_parser()[0]).choices)


def long_options(p: argparse.ArgumentParser) -> list[str]:
    return [s for a in p._actions for s in a.option_strings if s.startswith("--")]


def roff(text: str) -> str:
    return text.replace("-", "\\-")


def run_tool(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("man")
    run_tool(str(TOOLS / "manpages.py"), "--out", str(out))
    return {p.name: p.read_text(encoding="ascii") for p in out.iterdir()}


@pytest.fixture(scope="module")
def completion(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "gitmctl"
    run_tool(str(TOOLS / "completion.py"), "--output", str(path))
    return path


def manpages_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gitmd_tools_manpages", TOOLS / "manpages.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


def roff_problems(page: str) -> list[str]:
    """Lines roff would misread: a request that is not one of ours, an unescaped - or backslash."""
    bad = []
    for n, line in enumerate(page.splitlines(), 1):
        if line.startswith((".", "'")):
            name = line[1:].split(" ", 1)[0]
            if line.startswith("'") or name not in MACROS:
                bad.append(f"{n}: not a macro: {line}")
            if name in ("TH", '\\"'):
                continue  # the title's date and the comment may hold plain hyphens
        if not line.startswith('.\\"') and re.search(r"(?<!\\)-", line):
            bad.append(f"{n}: unescaped hyphen: {line}")
        if "\\" in ESCAPES.sub("", line.removeprefix('.\\"')):
            bad.append(f"{n}: unknown escape: {line}")
    return bad


# --- man pages ---------------------------------------------------------------------------------


def test_the_man_pages_name_every_verb_and_every_option(pages: dict[str, str]) -> None:
    assert set(pages) == {"gitmd.8", "gitmctl.1"}
    ctl, daemon = pages["gitmctl.1"], pages["gitmd.8"]
    assert ctl.count(".TH GITMCTL 1 ") == 1 and daemon.count(".TH GITMD 8 ") == 1
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "FILES", "SEE ALSO"):
        assert f".SH {section}\n" in ctl and f".SH {section}\n" in daemon
    names = verbs()
    assert {"run", "status", "library", "slurm", "pause", "resume", "tune"} <= set(names)
    for verb in names:
        assert f'.SS "gitmctl {verb}"' in ctl, verb
    run = _subparsers(gitmctl_parser()[0]).choices["run"]
    for opt in long_options(run):  # --json, --socket, --timeout are in OPTIONS, the rest under run
        assert f"\\fB{roff(opt)}\\fR" in ctl, opt
    for opt in long_options(gitmd_parser()):
        assert f"\\fB{roff(opt)}\\fR" in daemon, opt
    # the actions of library and slurm, each with its own options
    assert "\\fBgitmctl library export\\fR" in ctl and "\\fBgitmctl slurm prolog\\fR" in ctl
    assert "\\fB\\-\\-background\\-partitions\\fR" in ctl


def test_files_come_from_the_configuration_defaults(pages: dict[str, str]) -> None:
    files = pages["gitmd.8"].split(".SH FILES\n", 1)[1].split(".SH ", 1)[0]
    d = DaemonConfig()
    for path in (DEFAULT_CONFIG_PATH, d.state_dir, d.runtime_dir, d.socket_path, d.db_path):
        assert f"\\fI{roff(str(path))}\\fR" in files, path
    assert "/etc/gitmd/gitmd.toml" in files and "/var/lib/gitmd" in files


def test_the_man_pages_are_clean_roff(pages: dict[str, str]) -> None:
    for name, page in pages.items():
        assert roff_problems(page) == [], name
        assert "\n\n" not in page  # blank lines are requests to roff too


def test_help_text_that_looks_like_roff_is_escaped() -> None:
    m = manpages_module()
    p = argparse.ArgumentParser(prog="gitmctl", description="Control it.")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    v = sub.add_parser("run", help=".so /etc/passwd")
    v.add_argument("--dot", help=".TH nope")
    v.add_argument("--quote", help="'br nope")
    v.add_argument("--slash", help="a \\fBback\\ slash, 100%% -- done")
    v.add_argument("--accent", help="déjà vu …")
    page = m.gitmctl_page(p)
    assert roff_problems(page) == []
    assert "\\&.so /etc/passwd" in page and "\\&.TH nope" in page and "\\&'br nope" in page
    assert "a \\efBback\\e slash, 100% \\-\\- done" in page
    assert "d\\[u00E9]j\\[u00E0] vu \\[u2026]" in page
    if shutil.which("groff"):  # and roff shows the text as written
        r = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww"], input=page, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0 and r.stderr == "", r.stderr
        shown = re.sub(r"\x1b\[[0-9;]*m|.\x08", "", r.stdout)  # no bold or underline
        for text in (".so /etc/passwd", ".TH nope", "'br nope", "\\fBback\\ slash", "déjà vu"):
            assert text in shown, text


@pytest.mark.skipif(shutil.which("groff") is None, reason="no groff")
def test_groff_reads_the_pages_without_warnings(pages: dict[str, str]) -> None:
    for name, page in pages.items():
        r = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0 and r.stderr == "", (name, r.stderr)


# --- bash completion ---------------------------------------------------------------------------


def complete(script: Path, *words: str) -> list[str]:
    """What _gitmctl offers for the command line ``words`` (the last one being completed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    prog = (
        f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); "
        'PATH=/nonexistent; _gitmctl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.split("\n") if w]


def test_the_completion_script_is_valid_bash_and_lists_every_verb(completion: Path) -> None:
    r = subprocess.run(["bash", "-n", str(completion)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = completion.read_text()
    assert "complete -F _gitmctl gitmctl" in text
    [line] = [x for x in text.splitlines() if x.strip().startswith("subs[gitmctl]=")]
    assert line.split("=", 1)[1].strip("'").split() == verbs()
    assert complete(completion, "gitmctl", "") == verbs()


def test_the_completion_knows_each_verbs_options_and_actions(completion: Path) -> None:
    run = _subparsers(gitmctl_parser()[0]).choices["run"]
    offered = complete(completion, "gitmctl", "run", "--")
    assert set(long_options(run)) <= set(offered)
    assert complete(completion, "gitmctl", "run", "--no-") == ["--no-capture", "--no-explore"]
    assert complete(completion, "gitmctl", "--socket", "/x", "li") == ["library"]
    assert complete(completion, "gitmctl", "library", "") == [
        "list",
        "show",
        "pin",
        "unpin",
        "revert",
        "contract",
        "export",
        "import",
    ]
    assert "--background-partitions" in complete(completion, "gitmctl", "slurm", "prolog", "--")
    assert "--background-partitions" not in complete(completion, "gitmctl", "slurm", "epilog", "--")
    assert complete(completion, "gitmctl", "telemetry", "--gpu", "") == []  # a number: nothing offered


# --- maintainer scripts ------------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_maintainer_scripts_are_posix_sh(script: str) -> None:
    path = DEB / script
    assert path.read_text().startswith("#!/bin/sh\n")
    for shell in ("sh", "dash"):
        if shutil.which(shell):
            r = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (shell, r.stderr)


class Host:
    """Fake systemctl / systemd-sysusers / systemd-tmpfiles that record their arguments, and the
    scripts rewritten to see a systemd-booted host (a temporary folder for /run/systemd/system)."""

    def __init__(self, tmp: Path) -> None:
        self.bin, self.log, self.scripts = tmp / "bin", tmp / "calls.log", tmp / "scripts"
        booted = tmp / "run-systemd-system"
        for d in (self.bin, self.scripts, booted):
            d.mkdir()
        for tool in ("systemctl", "systemd-sysusers", "systemd-tmpfiles", "addgroup", "getent"):
            fake = self.bin / tool
            fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{self.log}"\n')
            fake.chmod(0o755)
        for name in SCRIPTS:
            text = (DEB / name).read_text()
            assert "/run/systemd/system" in text
            (self.scripts / name).write_text(text.replace("/run/systemd/system", str(booted)))

    def run(self, script: str, arg: str, dpkg_root: str | None) -> list[str]:
        self.log.write_text("")
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.bin)}
        if dpkg_root is not None:
            env["DPKG_ROOT"] = dpkg_root
        r = subprocess.run(
            ["sh", str(self.scripts / script), arg], capture_output=True, text=True, timeout=60, env=env
        )
        assert r.returncode == 0, r.stderr
        return self.log.read_text().splitlines()


def _has_root(call: str, root: Path) -> bool:
    return f"--root={root} " in call + " " or f"--root {root} " in call + " "


def test_postinst_with_dpkg_root_leaves_the_running_system_alone(tmp_path: Path) -> None:
    host, root = Host(tmp_path), tmp_path / "target"
    root.mkdir()
    calls = host.run("postinst", "configure", str(root))
    assert not [c for c in calls if c.startswith("systemctl")], calls
    sysusers = [c for c in calls if c.startswith("systemd-sysusers ")]
    tmpfiles = [c for c in calls if c.startswith("systemd-tmpfiles ")]
    assert len(sysusers) == 1 and _has_root(sysusers[0], root) and sysusers[0].endswith(" gitmd.conf")
    assert len(tmpfiles) == 1 and _has_root(tmpfiles[0], root) and "--create" in tmpfiles[0]
    assert not [c for c in calls if c.startswith(("addgroup", "getent"))]


@pytest.mark.parametrize("dpkg_root", [None, ""])
def test_postinst_without_dpkg_root_enables_and_starts_the_service(
    tmp_path: Path, dpkg_root: str | None
) -> None:
    calls = Host(tmp_path).run("postinst", "configure", dpkg_root)  # the control case: systemd is up
    assert "systemd-sysusers gitmd.conf" in calls and "systemd-tmpfiles --create gitmd.conf" in calls
    assert [c for c in calls if c.startswith("systemctl")] == [
        "systemctl daemon-reload",
        "systemctl enable gitmd.service",
        "systemctl restart gitmd.service",
    ]


def test_prerm_and_postrm_with_dpkg_root_call_no_systemctl(tmp_path: Path) -> None:
    host, root = Host(tmp_path), tmp_path / "target"
    (root / "var" / "lib" / "gitmd").mkdir(parents=True)
    (root / "var" / "lib" / "gitmd" / "gitmd.db").write_text("library")
    assert host.run("prerm", "remove", str(root)) == []
    assert host.run("postrm", "remove", str(root)) == []
    assert (root / "var" / "lib" / "gitmd" / "gitmd.db").exists()  # remove keeps the library
    assert host.run("postrm", "purge", str(root)) == []
    assert not (root / "var" / "lib" / "gitmd").exists() and (root / "var" / "lib").is_dir()
    # the control case, without DPKG_ROOT (not purge: that would be the host's /var/lib/gitmd)
    assert host.run("prerm", "remove", None) == [
        "systemctl stop gitmd.service",
        "systemctl disable gitmd.service",
    ]
    assert host.run("postrm", "remove", None) == ["systemctl daemon-reload"]


# --- build.sh ----------------------------------------------------------------------------------


def test_build_sh_installs_the_generated_files() -> None:
    text = (DEB / "build.sh").read_text()
    r = subprocess.run(["bash", "-n", str(DEB / "build.sh")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "tools/manpages.py" in text and "tools/completion.py" in text
    for target in (
        "usr/share/man/man8/gitmd.8.gz",
        "usr/share/man/man1/gitmctl.1.gz",
        "usr/share/bash-completion/completions/gitmctl",
        "usr/share/doc/gitmd/copyright",
    ):
        assert target in text, target
    assert text.count("gzip -9n") == 2


# --- copyright ---------------------------------------------------------------------------------


def deb822(text: str) -> list[dict[str, str]]:
    """Paragraphs of "Field: value" lines, separated by blank lines; continuation lines start with
    a space or a tab."""
    paragraphs: list[dict[str, str]] = []
    for block in re.split(r"\n[ \t]*\n", text.strip("\n")):
        fields: dict[str, str] = {}
        last = None
        for line in block.split("\n"):
            if line[:1] in (" ", "\t"):
                assert last is not None, f"continuation line first: {line!r}"
                fields[last] += "\n" + line.strip()
                continue
            m = re.fullmatch(r"([!-9;-~][!-9;-~]*):[ \t]*(.*)", line)
            assert m, f"not a field: {line!r}"
            assert m.group(1) not in fields, f"field twice: {m.group(1)}"
            last = m.group(1)
            fields[last] = m.group(2).strip()
        paragraphs.append(fields)
    return paragraphs


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _license_names(expr: str) -> set[str]:
    first = expr.split("\n", 1)[0]
    return {n.strip() for n in re.split(r"\s+(?:and|or)\s+", first)}


def test_the_copyright_file_is_machine_readable_and_names_every_dependency() -> None:
    paragraphs = deb822((DEB / "copyright").read_text(encoding="utf-8"))
    header, rest = paragraphs[0], paragraphs[1:]
    assert header["Format"] == "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    files = [p for p in rest if "Files" in p]
    licenses = {p["License"].split("\n", 1)[0]: p for p in rest if "Files" not in p}
    assert files and all("License" in p for p in rest)
    for p in files:
        assert p["Copyright"], p["Files"]
        for name in _license_names(p["License"]):
            assert name in licenses or "\n" in p["License"], f"no text for licence {name}"
    for name, p in licenses.items():
        assert "\n" in p["License"], f"licence {name} without its text"

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ours = files[0]
    assert ours["Files"] == "*" and ours["License"] == project["license"]

    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_norm(name)] = version.strip()
    comments = [_norm_words(p.get("Comment", "")) for p in files]
    for dep in project["dependencies"]:
        name = _norm(re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0])
        pattern = rf"(?<![\w-]){re.escape(name)} {re.escape(pins[name])}\b"
        assert any(re.search(pattern, c) for c in comments), f"{name} {pins[name]} not in the copyright file"


def _norm_words(text: str) -> str:
    """A comment with project names spelled as _norm spells them (versions keep their dots)."""
    return re.sub(r"[A-Za-z][\w.-]*[A-Za-z]", lambda m: _norm(m.group(0)), " ".join(text.split()))


def test_the_maintainer_scripts_are_installed_executable() -> None:
    text = (DEB / "build.sh").read_text()
    assert re.search(
        r'for script in postinst prerm postrm; do\s+install -m 0755 "packaging/deb/\$script"', text
    )
    assert os.access(DEB / "build.sh", os.X_OK)
