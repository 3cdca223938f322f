"""The package's shape: data flows one way between components, with no import cycle."""

import ast
import os

from conftest import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "ms_pruner")


def _modules() -> dict:
    """Dotted name -> path of every module of the package (a package by its ``__init__``)."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


def _imported(module: str, is_package: bool, node, modules: dict) -> list:
    """The package modules an import statement names (a ``from X import name`` names X.name where
    that is a module, else X)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names]


def import_graph() -> dict:
    """Module -> the modules importing it runs, imports inside functions included: importing a.b.c
    runs a, a.b and a.b.c, less the packages that enclose the importer (already running)."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        with open(path) as source:
            tree = ast.parse(source.read())
        enclosing = {module.rsplit(".", depth)[0] for depth in range(1, module.count(".") + 1)}
        runs = set()
        for node in ast.walk(tree):
            for name in _imported(module, path.endswith("__init__.py"), node, modules):
                parts = name.split(".")
                runs |= {".".join(parts[:n]) for n in range(1, len(parts) + 1)} & set(modules)
        graph[module] = runs - enclosing - {module}
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_scan_finds_a_cycle_through_function_level_imports():
    graph = {"p": set(), "p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    module = "ms_pruner.search.droplet"
    tree = ast.parse("def f():\n    from ..analysis import x\n    from . import pruner\n")
    named = [n for node in ast.walk(tree) for n in _imported(module, False, node, _modules())]
    assert named == ["ms_pruner.analysis", "ms_pruner.search.pruner"]


def test_no_import_cycle_among_the_package_modules():
    graph = import_graph()
    assert len(graph) > 80 and "ms_pruner.database" in graph["ms_pruner.evaluation.database_report"]
    assert cycles(graph) == []


def test_no_two_components_import_each_other():
    """Folded to the package's top-level folders and modules, the graph has no cycle either."""
    top = lambda module: ".".join(module.split(".")[:2])  # noqa: E731
    folded = {}
    for module, targets in import_graph().items():
        folded.setdefault(top(module), set()).update(top(t) for t in targets if top(t) != top(module))
    assert cycles(folded) == []


def test_components_below_evaluation_never_import_it_nor_the_driver():
    """database <- analysis <- cost_model, space <- search <- tuning <- evaluation: the lower a
    component, the fewer it reads."""
    graph = import_graph()
    rules = {"database": ("analysis", "cost_model", "search", "tuning", "evaluation"),
             "analysis": ("cost_model", "search", "tuning", "evaluation"),
             "cost_model": ("search", "tuning", "evaluation"),
             "space": ("search", "tuning", "evaluation"),
             "search": ("tuning", "evaluation"),
             "tuning": ("evaluation",)}
    broken = [(module, target) for module, targets in graph.items() for target in targets
              for below, above in rules.items()
              if module.startswith(f"ms_pruner.{below}") and any(target.startswith(f"ms_pruner.{a}") for a in above)]
    assert broken == []
