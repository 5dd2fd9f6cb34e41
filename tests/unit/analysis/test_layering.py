"""Analysis stays pure: it reads the values in gitmd.records and imports nothing that reads rings or
GPUs, runs jobs or stores anything. Calls go one way: capture, telemetry and the loop may import
analysis, never the reverse."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gitmd

PACKAGE = Path(gitmd.__file__).resolve().parent
ANALYSIS = PACKAGE / "analysis"
FORBIDDEN = (
    "gitmd.capture",
    "gitmd.telemetry",
    "gitmd.service",
    "gitmd.loop",
    "gitmd.jobs",
    "gitmd.store",
    "gitmd.experiments",
)


def module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """Every module the source of ``module`` imports, anywhere in it (functions and TYPE_CHECKING
    blocks included), relative imports resolved; ``from a import b`` yields both a and a.b (b may
    be a module)."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names]
    return out


def imports_of(path: Path) -> list[tuple[int, str]]:
    return imported(path.read_text(encoding="utf-8"), module_of(path), path.name == "__init__.py")


def forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_analysis_imports_nothing_impure() -> None:
    files = sorted(ANALYSIS.rglob("*.py"))
    assert len(files) > 5
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in files
        for line, name in imports_of(path)
        if forbidden(name)
    ]
    assert not bad, "gitmd.analysis must not import these:\n" + "\n".join(bad)


def test_records_is_a_leaf() -> None:
    """The shared types import nothing from gitmd, so depending on them drags nothing in."""
    names = [name for _, name in imports_of(PACKAGE / "records.py")]
    assert not [n for n in names if n == "gitmd" or n.startswith("gitmd.")]


def test_the_checker_sees_every_form() -> None:
    src = (
        "import gitmd.capture.ring\n"
        "from gitmd import telemetry\n"
        "from ..loop import state\n"
        "def f():\n"
        "    from gitmd.store.db import Store\n"
    )
    hits = [(line, name) for line, name in imported(src, "gitmd.analysis.probe") if forbidden(name)]
    assert {line for line, _ in hits} == {1, 2, 3, 5}
    assert {"gitmd.capture.ring", "gitmd.telemetry", "gitmd.loop.state", "gitmd.store.db"} <= {
        name for _, name in hits
    }
    relative = imported("from . import breakdown\n", "gitmd.analysis.probe")
    assert relative == [(1, "gitmd.analysis"), (1, "gitmd.analysis.breakdown")]


def test_importing_analysis_loads_nothing_impure() -> None:
    """Not even indirectly: a fresh interpreter that imports every analysis module has loaded none
    of the forbidden packages."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import gitmd.analysis as a\n"
        "for m in pkgutil.iter_modules(a.__path__):\n"
        "    importlib.import_module('gitmd.analysis.' + m.name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('gitmd'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    loaded = out.stdout.split()
    assert "gitmd.analysis.report" in loaded
    assert not [m for m in loaded if forbidden(m)]
