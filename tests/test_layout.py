"""The layout keeps its promises: no symlinks in the tree, and the registries are the only lists.

A kind's name appears as a string only in its own package (swarmscope/kinds/<name>/), its
scenario files, tests, benchmarks and docs: every other module asks the registry.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess

from swarmscope.kinds import KINDS

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "swarmscope"


def _strings(path: pathlib.Path) -> list[tuple[int, str]]:
    """String constants of a module, docstrings left out (they are prose, with examples)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_no_symlinks_in_the_tree() -> None:
    out = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True)
    links = [line.split("\t")[1] for line in out.stdout.splitlines() if line.startswith("120000")]
    assert links == []


def test_no_kind_named_outside_its_package() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "_pb2" in path.name or (rel.parts[:1] == ("kinds",) and len(rel.parts) > 2):
            continue  # generated code; a kind's own package
        for line, value in _strings(path):
            if value in KINDS and rel.parts[:1] != ("kinds",):
                found.append(f"swarmscope/{rel}:{line}: {value!r}")
            elif value in KINDS and rel != pathlib.Path("kinds/__init__.py"):
                found.append(f"swarmscope/{rel}:{line}: {value!r}")
    assert found == []
