"""The house rules of the layout, read from the source: imports point down, no circles.

application (`mgstreams`) → `spark_bridge` → `stream_registry`; the core has no
mgp, no pyspark and no HTTP; the query module is one file of stdlib + mgp.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stream_registry", "spark_bridge", "mgstreams")
FORBIDDEN = {
    "stream_registry": {"spark_bridge", "mgstreams", "mgp", "pyspark", "pyarrow", "pandas", "starlette", "uvicorn",
                        "httpx", "prometheus_client", "click", "rich"},
    "spark_bridge": {"mgstreams", "mgp", "starlette", "uvicorn", "httpx", "prometheus_client"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module imported, at module level?) for every import in the file."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.append((target, id(node) in top_level))
            found += [(f"{target}.{alias.name}", id(node) in top_level) for alias in node.names]
    return found


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_libraries_do_not_import_upward(package):
    wrong = [(module_name(p), name) for p in sources(package) for name, _ in imports(p)
             if name.split(".")[0] in FORBIDDEN[package]]
    assert not wrong, f"{package} must not import these: {wrong}"


def test_no_import_circles_between_modules():
    """Module-level imports among the project's modules form no cycle (lazy imports inside functions
    are allowed: they are how the CLI attaches optional parts)."""
    modules = {module_name(p): p for package in PACKAGES for p in sources(package)}
    graph = {name: {target for target, top in imports(path) if top and target in modules and target != name}
             for name, path in modules.items()}
    # an import of a package runs its __init__, which is part of the edge set already
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError(f"import circle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_the_query_module_is_one_file_of_stdlib_and_mgp():
    imported = {name.split(".")[0] for name, _ in imports(ROOT / "query_modules" / "streams.py")}
    assert imported - {"mgp"} <= set(sys.stdlib_module_names), sorted(imported - set(sys.stdlib_module_names))


def test_the_mock_cluster_is_not_part_of_the_core():
    assert not (ROOT / "stream_registry" / "embedded_kafka.py").exists()
    assert (ROOT / "mgstreams" / "embedded_kafka.py").is_file()
