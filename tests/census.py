"""How much the suite checks: test functions and assert statements per layer, counted from the source (AST).

    uv run python -m tests.census [ROOT]

A test function is a `test_*` function at module level or in a `Test*` class of a `test_*.py` file; an assertion
is an `assert` statement anywhere under tests/ (helpers included: a helper's assert guards every test calling
it). `pytest.raises` blocks are counted apart. The issue that made the suite faster promised that neither
count goes down; `tests/README.md` keeps the figures.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

LAYERS = ("unit", "integration", "e2e")


def _is_raises(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "raises"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "pytest"
    )


def count(root: Path) -> dict[str, Counter[str]]:
    """layer -> Counter(tests=..., asserts=..., raises=...); files outside the layers count as 'shared'."""
    result: dict[str, Counter[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if "benchmarks" in path.parts:
            continue  # scripts, not tests
        relative = path.relative_to(root)
        layer = relative.parts[0] if relative.parts[0] in LAYERS else "shared"
        tally = result.setdefault(layer, Counter())
        tree = ast.parse(path.read_text(), filename=str(path))
        if path.name.startswith("test_"):
            classes = [n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name.startswith("Test")]
            bodies = [tree.body, *classes]
            tally["tests"] += sum(
                1
                for body in bodies
                for n in body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
            )
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                tally["asserts"] += 1
            elif _is_raises(node):
                tally["raises"] += 1
    return result


def main(argv: list[str]) -> None:
    root = Path(argv[0]) if argv else Path(__file__).parent
    counts = count(root)
    total: Counter[str] = Counter()
    print(f"{'layer':<12} {'tests':>6} {'asserts':>8} {'raises':>7}")
    for layer in (*LAYERS, "shared"):
        tally = counts.get(layer, Counter())
        total += tally
        print(f"{layer:<12} {tally['tests']:>6} {tally['asserts']:>8} {tally['raises']:>7}")
    print(f"{'total':<12} {total['tests']:>6} {total['asserts']:>8} {total['raises']:>7}")


if __name__ == "__main__":
    main(sys.argv[1:])
