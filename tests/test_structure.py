"""The package's structure: no module of python/dlpack_ref (the compiled core
included, read from its Cython sources) imports itself back through others,
counting imports made inside functions."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "dlpack_ref"
CORE = "dlpack_ref._dlpack_ref"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _target(name: str, modules) -> str | None:
    """The module of the package that importing `name` runs, if any."""
    while name and name not in modules and name != CORE:
        name = name.rpartition(".")[0]
    return name or None


def _python_imports(module: str, path: Path, modules) -> set[str]:
    is_package = path.name == "__init__.py"
    base = module if is_package else module.rpartition(".")[0]
    edges = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                source = f"{anchor}.{node.module}" if node.module else anchor
            else:
                source = node.module or ""
            # `from pkg import submodule` runs the submodule; other names run pkg.
            names = [f"{source}.{a.name}" if _is_module(f"{source}.{a.name}", modules) else source
                     for a in node.names]
        else:
            continue
        edges |= {t for t in (_target(n, modules) for n in names) if t and t != module}
    return edges


def _is_module(name: str, modules) -> bool:
    return name in modules or name == CORE


def _core_imports(modules) -> set[str]:
    text = "\n".join(p.read_text() for p in (ROOT / "src").glob("*.p[yx][xi]"))
    edges = set()
    for match in re.finditer(r"^\s*from (dlpack_ref[\w.]*) import ([\w, ]+)|^\s*import (dlpack_ref[\w.]*)",
                             text, re.M):
        if match.group(3):
            edges.add(_target(match.group(3), modules))
            continue
        for name in match.group(2).split(","):
            name = name.split(" as ")[0].strip()
            full = f"{match.group(1)}.{name}"
            edges.add(_target(full if _is_module(full, modules) else match.group(1), modules))
    return {e for e in edges if e}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {m: _python_imports(m, p, modules) for m, p in modules.items()}
    graph[CORE] = _core_imports(modules)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_graph_sees_the_core_and_nested_imports():
    graph = _graph()
    assert "dlpack_ref._dtypes" in graph[CORE]          # read from the Cython sources
    assert CORE in graph["dlpack_ref"]
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_no_import_cycles():
    assert _cycles(_graph()) == []


# The package's layers, lowest first: a module imports its own layer's
# modules of its own subpackage, and lower layers, never a higher layer or
# another subpackage of its own layer (the checker and the benchmark share
# the harness, not each other).
COMMANDS = ("dlpack_ref.cli", "dlpack_ref.__main__", "dlpack_ref._configtool")
SUBPACKAGES = {"testing": 1, "harness": 2, "conformance": 3, "bench": 3, "adopters": 3}
LAYERS = ["core", "testing", "harness", "tools", "command line"]


def _layer(module: str) -> tuple[int, str]:
    """(the layer's rank, the subpackage, dlpack_ref for the package's own modules) of a module."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in SUBPACKAGES:
        return SUBPACKAGES[parts[1]], ".".join(parts[:2])
    return (LAYERS.index("command line") if module in COMMANDS else 0), "dlpack_ref"


def test_no_import_runs_back_up():
    graph = _graph()
    wrong = []
    for module, imports in graph.items():
        rank, package = _layer(module)
        for target in imports:
            target_rank, target_package = _layer(target)
            if target_rank > rank or (target_rank == rank and rank > 0 and target_package != package):
                wrong.append(f"{module} ({LAYERS[rank]}) imports {target} ({LAYERS[target_rank]})")
    assert wrong == []


def test_the_layers_see_a_wrong_import():
    assert _layer("dlpack_ref.bench.measure")[0] == _layer("dlpack_ref.conformance.report")[0]
    assert _layer("dlpack_ref.harness.registry")[0] < _layer("dlpack_ref.conformance.run")[0]
    assert _layer("dlpack_ref._dtypes")[0] == 0 and _layer("dlpack_ref.cli")[0] == len(LAYERS) - 1
