"""The direction of dependencies, checked on the source (ast, every import including those inside
functions):

- `router_adapter` never imports `sidecar` (the sidecar injects what the library needs);
- no two packages import each other, directly or around a loop: the top-level packages, and the
  subpackages of one package among themselves (`sidecar.native`, `sidecar.reference`,
  `sidecar.servicers`, `sidecar.v1`). A subpackage and its parent's own modules may use each other
  (the interfaces sit in the parent, the composition too), but only without a loop of modules;
- no module imports itself around a loop;
- the interfaces (the backend protocols, the library's exceptions) import nothing of the project.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("sidecar", "router_adapter")
#: Modules that are types and protocols only: they import nothing of the project.
LEAVES = ("sidecar.backend", "router_adapter.errors")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for top in PACKAGES for p in sorted((REPO / top).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (`from pkg import mod` counts as importing `pkg.mod`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports the module; `from pkg import name` imports pkg itself.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def package_of(module: str) -> str:
    """The innermost package holding a module (a package's `__init__` belongs to the package)."""
    modules = project_modules()
    path = modules[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_known_edges() -> None:
    graph = import_graph()
    assert "sidecar.backend" in graph["sidecar.native"]
    assert "router_adapter.spec" in graph["sidecar.native.hashing"]
    assert "sidecar.native" in graph["sidecar.factory"]  # a lazy import inside a function counts


def test_router_adapter_never_imports_sidecar() -> None:
    bad = sorted(f"{m} -> {t}" for m, targets in import_graph().items() if m.startswith("router_adapter")
                 for t in targets if t.split(".")[0] == "sidecar")
    assert not bad, "router_adapter must not depend on sidecar (inject implementations instead):\n" + "\n".join(bad)


def related(a: str, b: str) -> bool:
    """Whether one package contains the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def package_graph(level: int | None) -> dict[str, set[str]]:
    """Packages (cut to `level` dotted parts, or innermost) and which others they import; edges
    between a package and one containing it are left to the module check."""
    graph: dict[str, set[str]] = {}

    def cut(module: str) -> str:
        package = package_of(module)
        return ".".join(package.split(".")[:level]) if level else package

    for module, targets in import_graph().items():
        src = cut(module)
        graph.setdefault(src, set()).update(t for t in map(cut, targets) if not related(t, src))
    return graph


def test_no_cycle_between_packages() -> None:
    top = package_graph(1)
    assert set(top) == set(PACKAGES) and top["sidecar"] == {"router_adapter"}, top
    for graph in (top, package_graph(None)):
        cycle = find_cycle(graph)
        assert cycle is None, "packages import each other: " + " -> ".join(cycle)


def test_no_cycle_between_modules() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "modules import each other: " + " -> ".join(cycle)


def test_interfaces_are_leaves() -> None:
    graph = import_graph()
    for leaf in LEAVES:
        assert not graph[leaf], f"{leaf} is an interface and imports {sorted(graph[leaf])}"
