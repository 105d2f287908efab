"""The tree's imports run one way: no module imports another camus module's private (`_name`)
names, and no import circle anywhere (lazy imports inside functions count: they are the usual
way a circle is hidden). Read from the source with ast, so the test needs nothing installed."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"camus": "camus", "compiler": "camus.compiler", "dataplane": "camus.dataplane",
            "controller": "camus.controller", "edge": "camus.edge", "bench": "camus.bench"}

def modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = [p for p in f.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = f
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def import_graph() -> tuple[nx.DiGraph, set[tuple[str, str, str]]]:
    """Module -> module edges, and (importer, module, private name) for every private name taken
    from another module (by `from m import _x`, or `m._x` on an imported module)."""
    mods = modules()
    graph: nx.DiGraph = nx.DiGraph()
    private: set[tuple[str, str, str]] = set()
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_only(tree)
        bound: dict[str, str] = {}                       # local name -> camus module it names
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in mods:
                        graph.add_edge(mod, sub)
                        bound[alias.asname or alias.name] = sub
                    elif target in mods:
                        graph.add_edge(mod, target)
                        if alias.name.startswith("_") and not alias.name.startswith("__") and target != mod:
                            private.add((mod, target, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        graph.add_edge(mod, alias.name)
                        if alias.asname:
                            bound[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                private.add((mod, bound[node.value.id], node.attr))
    return graph, private


def test_no_import_circle() -> None:
    graph, _ = import_graph()
    circles = sorted(sorted(c) for c in nx.simple_cycles(graph))
    assert not circles, f"import circles: {circles}"


def test_no_private_name_taken_from_another_module() -> None:
    _, private = import_graph()
    assert not private, f"private names taken across modules: {sorted(private)}"


def test_the_walker_sees_circles_and_private_names(tmp_path, monkeypatch) -> None:
    """The checks above can fail: a planted circle and a planted private import are found."""
    for folder in PACKAGES:
        (tmp_path / folder).mkdir()
    (tmp_path / "compiler" / "a.py").write_text("from . import b\n\ndef f():\n    from .b import _hidden\n")
    (tmp_path / "compiler" / "b.py").write_text("def g():\n    from camus.compiler import a\n    return a._x\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    graph, private = import_graph()
    assert {frozenset(c) for c in nx.simple_cycles(graph)} == {frozenset({"camus.compiler.a", "camus.compiler.b"})}
    assert private == {("camus.compiler.a", "camus.compiler.b", "_hidden"), ("camus.compiler.b", "camus.compiler.a", "_x")}


def test_no_back_end_imports_the_compiler_driver_or_the_fitting_policy() -> None:
    """A back end reads only its Compiled (compiler/compiled.py): recompiling is the fitting
    driver's (compiler/fitting.py), above every back end (issue 41)."""
    graph, _ = import_graph()
    backends = [m for m in graph if m.startswith("camus.compiler.backends")]
    reached = {(m, t) for m in backends for t in graph.successors(m)
               if t in ("camus.compiler.compile", "camus.compiler.fitting", "camus.compiler.incremental")}
    assert not reached, f"back ends importing the driver: {sorted(reached)}"
