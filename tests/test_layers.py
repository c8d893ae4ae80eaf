"""The layer order of DESIGN.md, read from the imports: no module imports from a layer above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fedrun"

# Lowest first. A module may import from its own layer and the layers below.
LAYERS = [
    ("ground", ["errors", "types", "core"]),
    ("data", ["data", "dataset"]),
    ("models", ["backbone"]),
    ("kernels", ["sim"]),
    ("components", ["privacy", "defense", "attack", "retrieval", "track"]),
    ("methods", ["method"]),
    ("evaluation", ["eval"]),
    ("simulator", ["simulator", "sweep"]),
    ("application", ["build", "validate", "report", "experiment", "info", "cli", "__init__"]),
]
LAYER_OF = {top: rank for rank, (_, tops) in enumerate(LAYERS) for top in tops}


def top_level(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def fedrun_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fedrun":
            names = [node.module] if node.module != "fedrun" else [f"fedrun.{a.name}" for a in node.names]
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "fedrun"]
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_package_has_a_layer():
    tops = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in MODULES}
    assert tops <= set(LAYER_OF), f"give these a layer in LAYERS: {sorted(tops - set(LAYER_OF))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_from_a_layer_above(path):
    own = LAYER_OF[path.relative_to(PACKAGE).parts[0].removesuffix(".py")]
    upward = [f"line {line}: {name} ({LAYERS[LAYER_OF[top_level(name)]][0]})"
              for line, name in fedrun_imports(path) if LAYER_OF[top_level(name)] > own]
    assert not upward, f"{path.name} ({LAYERS[own][0]}) imports from above: {upward}"


def test_the_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from fedrun.simulator.loop import run_loop\n")
    assert [LAYER_OF[top_level(name)] for _, name in fedrun_imports(bad)] == [LAYER_OF["simulator"]]
