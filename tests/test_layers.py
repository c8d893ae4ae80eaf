"""The layer order of docs/design.md, read from the imports: no module imports from a layer above it, every
folder of the package has a layer, and no modules import each other in a cycle (imports inside functions
count: a deferred import is still a dependency)."""

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
    ("kernels", ["kernels"]),
    ("components", ["privacy", "defense", "attack", "audit", "retrieval", "store", "track"]),
    ("methods", ["method"]),
    ("evaluation", ["eval"]),
    ("simulator", ["sim"]),
    ("formatting", ["report"]),
    ("application", ["app", "api", "__init__", "__main__"]),  # api: the Python API (fedrun.run, fedrun.compose)
    ("references", ["testing"]),  # the per-client loops and measures that tests and benchmarks use; imports none
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


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(modules: list[Path]) -> dict[str, set[str]]:
    """module → the package's modules it imports (``from fedrun.x import y`` counts ``fedrun.x.y`` when that is a
    module, else ``fedrun.x``)."""
    known = {module_name(p) for p in modules}
    graph: dict[str, set[str]] = {}
    for path in modules:
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fedrun":
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in known else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.split(".")[0] == "fedrun"}
        own = module_name(path)
        graph[own] = {t for t in targets if t in known and t != own}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_package_has_a_layer():
    tops = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in MODULES}
    assert tops <= set(LAYER_OF), f"give these a layer in LAYERS: {sorted(tops - set(LAYER_OF))}"
    assert set(LAYER_OF) <= tops, f"layers name folders that are gone: {sorted(set(LAYER_OF) - tops)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_from_a_layer_above(path):
    own = LAYER_OF[path.relative_to(PACKAGE).parts[0].removesuffix(".py")]
    upward = [f"line {line}: {name} ({LAYERS[LAYER_OF[top_level(name)]][0]})"
              for line, name in fedrun_imports(path) if LAYER_OF[top_level(name)] > own]
    assert not upward, f"{path.name} ({LAYERS[own][0]}) imports from above: {upward}"


def test_no_import_cycles():
    assert not cycles(import_graph(MODULES))


def test_the_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from fedrun.sim.loop import run_loop\n")
    assert [LAYER_OF[top_level(name)] for _, name in fedrun_imports(bad)] == [LAYER_OF["sim"]]


def test_the_check_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


def option_classes() -> dict[str, type]:
    """Every ``method=`` option's class, read from conf/method/."""
    import importlib

    import yaml

    from fedrun.core.paths import config_dir

    classes = {}
    for path in sorted((Path(config_dir()) / "method").glob("*.yaml")):
        module, _, name = yaml.safe_load(path.read_text())["_target_"].rpartition(".")
        classes[path.stem] = getattr(importlib.import_module(module), name)
    return classes


def test_no_method_option_subclasses_another():
    """Options compose shared machinery (``fedrun/method/_*.py``) or subclass a method or family base, never
    another option: a change to one paper's module cannot reach another paper's numbers unnamed."""
    classes = option_classes()
    options = set(classes.values())
    ancestors = {name: [base.__name__ for base in cls.__mro__[1:] if base in options] for name, cls in classes.items()}
    assert {name: found for name, found in ancestors.items() if found} == {}
    assert len(classes) >= 21
