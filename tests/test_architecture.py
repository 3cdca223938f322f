"""The package's shape: data flows one way between components, with no import cycle."""

import ast
import os
import re
import subprocess
import sys

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
    """database <- analysis <- cost_model, space <- search <- tuning <- evaluation, and the emulator
    (builder, workloads) under tuning: the lower a component, the fewer it reads."""
    graph = import_graph()
    rules = {"database": ("analysis", "cost_model", "search", "tuning", "evaluation"),
             "analysis": ("cost_model", "search", "tuning", "evaluation"),
             "cost_model": ("search", "tuning", "evaluation"),
             "space": ("search", "tuning", "evaluation"),
             "search": ("tuning", "evaluation"),
             "emulator": ("analysis", "cost_model", "space", "search", "tuning", "evaluation"),
             "tuning": ("evaluation",)}
    broken = [(module, target) for module, targets in graph.items() for target in targets
              for below, above in rules.items()
              if module.startswith(f"ms_pruner.{below}") and any(target.startswith(f"ms_pruner.{a}") for a in above)]
    assert broken == []


def _functions():
    """(module path, function node) of every function and method in the package."""
    for path in _modules().values():
        with open(path) as source:
            tree = ast.parse(source.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield os.path.relpath(path, REPO_ROOT), node


def test_functions_stay_short_and_constructors_take_few_arguments():
    """No function over 60 lines; no hand-written constructor over 12 arguments, nor a ``**kwargs``
    standing in for them (settings travel in frozen configs: search/config.py)."""
    long = [(path, f.name, f.end_lineno - f.lineno + 1) for path, f in _functions()
            if f.end_lineno - f.lineno + 1 > 60]
    wide = [(path, f.name) for path, f in _functions() if f.name == "__init__"
            and (len(f.args.args) + len(f.args.kwonlyargs) - 1 > 12 or f.args.kwarg is not None)]
    assert long == [] and wide == []


def test_modules_stay_under_400_lines_and_script_functions_under_60():
    """A module that outgrows one reading is split by what its parts are about (the shared-memory
    allocation left features.py so); the benchmark scripts' functions stay as short as the package's."""
    long_modules = {}
    for path in _modules().values():
        with open(path) as source:
            lines = len(source.read().splitlines())
        if lines > 400:
            long_modules[os.path.relpath(path, REPO_ROOT)] = lines
    scripts = os.path.join(REPO_ROOT, "scripts")
    long_functions = []
    for name in sorted(os.listdir(scripts)):
        if name.endswith(".py"):
            with open(os.path.join(scripts, name)) as source:
                tree = ast.parse(source.read())
            long_functions += [(name, f.name) for f in ast.walk(tree)
                               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 60]
    assert long_modules == {} and long_functions == []


def test_the_pruner_round_reads_in_one_file_of_at_most_250_lines():
    with open(os.path.join(PACKAGE, "search", "pruner.py")) as source:
        assert len(source.read().splitlines()) <= 250


def test_the_repository_stays_lean():
    """At most 12 scripts, 80 files of results, 15 KB a document and 10 KB of README."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:  # not a git checkout (an sdist): nothing to count
        return
    assert len([p for p in tracked if p.startswith("scripts/")]) <= 12
    assert len([p for p in tracked if p.startswith("docs/results/")]) <= 80
    sizes = {p: os.path.getsize(os.path.join(REPO_ROOT, p)) for p in tracked
             if p.startswith("docs/") and p.endswith(".md") and "/" not in p[len("docs/"):]}
    sizes["docs/results/README.md"] = os.path.getsize(os.path.join(REPO_ROOT, "docs", "results", "README.md"))
    assert {p: size for p, size in sizes.items() if size > 15 * 1024} == {}
    assert os.path.getsize(os.path.join(REPO_ROOT, "README.md")) <= 10 * 1024


def _gpu_session_steps() -> set:
    """The step names scripts/gpu_session.sh's ``case`` runs (its labels, ``a|b)`` split)."""
    with open(os.path.join(REPO_ROOT, "scripts", "gpu_session.sh"), encoding="utf-8") as handle:
        labels = re.findall(r"^ {8}([a-z0-9|-]+)\)", handle.read(), re.MULTILINE)
    return {step for label in labels for step in label.split("|")}


def test_every_gpu_step_the_docs_and_the_header_name_is_one_the_script_runs():
    """A step renamed in scripts/gpu_session.sh and not in its header or in the queue of
    docs/results/README.md would cost a GPU call ('unknown step'), found only on the device."""
    steps = _gpu_session_steps()
    assert {"smoke", "mma-pruner", "mma-check", "models-pruner", "fleet", "moa"} <= steps, steps
    with open(os.path.join(REPO_ROOT, "scripts", "gpu_session.sh"), encoding="utf-8") as handle:
        header = set(re.findall(r"^#\s+(?:\S+=\S+ )*bash scripts/gpu_session\.sh ([a-z0-9-]+)", handle.read(), re.MULTILINE))
    assert header - {"queue"} == steps, (header ^ steps)
    with open(os.path.join(REPO_ROOT, "docs", "results", "README.md"), encoding="utf-8") as handle:
        queue = handle.read().split("## GPU: still to do", 1)[1].split("\n## ", 1)[0]
    named = {word for row in re.findall(r"^\| \d+ \| ([^|]+) \|", queue, re.MULTILINE)
             for quoted in re.findall(r"`([^`]+)`", row) for word in quoted.split()
             if re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", word)}
    assert len(named) >= 10 and named - steps == set(), named - steps


def test_every_import_of_the_package_names_a_module_that_exists():
    """A module moved (search/fetch_width.py into search/first_round/) leaves no import of its old
    name behind, at module level or inside a function, where only running that function would fail."""
    modules = _modules()
    stale = []
    for module, path in modules.items():
        with open(path) as source:
            tree = ast.parse(source.read())
        for node in ast.walk(tree):
            for name in _imported(module, path.endswith("__init__.py"), node, modules):
                if name.startswith("ms_pruner") and name not in modules:
                    stale.append((module, name))
    assert stale == []


def test_imports_sit_at_module_level_unless_they_say_why_not():
    """An import inside a function is the exception (torch, matplotlib, scipy.stats, xgboost before the
    round clock, the tensor intrinsics' ~23 s, the package's own cheap import): its line says
    ``lazy:`` and why, so a newcomer sees every module a file needs at its top."""
    unexplained = []
    for path, function in _functions():
        with open(os.path.join(REPO_ROOT, path)) as source:
            lines = source.read().splitlines()
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "lazy:" not in lines[node.lineno - 1]:
                unexplained.append((path, node.lineno, lines[node.lineno - 1].strip()))
    assert unexplained == []


def test_importing_the_package_loads_neither_tvm_nor_torch():
    script = "import sys, ms_pruner; print(sorted(m for m in ('tvm', 'torch') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
