"""The GPU tests' own time limits sit on tests: a `pytest.mark.timeout` on a helper does nothing, and
the suite's 120 s then stops the test (the TF32 launch-trial test in its fifth run on an H100,
2026-12-05: its limit had been left on a helper written between the mark and the test)."""

from __future__ import annotations

import ast
from pathlib import Path

GPU = Path(__file__).resolve().parents[1] / "gpu"


def _is_timeout(d: ast.expr) -> bool:
    f = d.func if isinstance(d, ast.Call) else d
    return isinstance(f, ast.Attribute) and f.attr == "timeout" and "mark" in ast.unparse(f)


def test_every_timeout_mark_is_on_a_test() -> None:
    wrong = []
    for path in sorted(GPU.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            is_def = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            is_helper = is_def and not node.name.startswith("test_")
            if is_helper and any(_is_timeout(d) for d in node.decorator_list):
                wrong.append(f"{path.name}:{node.lineno} {node.name}")
    assert not wrong, wrong
