"""Import structure of autotune/, search_spaces/ and cost_models/, read from their source (nothing is imported).

    python benchmarks/architecture.py                  # print the figures
    python benchmarks/architecture.py --root /tmp/base # another checkout of the repository
    python benchmarks/architecture.py --write          # also store them as the result `architecture`

Prints the number of import statements executed inside functions (and how many of them import search_spaces),
and the import cycles: strongly connected components of the module graph, with the imports at module level only
(what runs when a module is imported), then with the imports inside functions added, then with the imports under
`if TYPE_CHECKING:` (which never run, for type checkers only) added too. An import of `a.b.c` is an edge to
`a.b.c`; `from a.b import c` is an edge to the module `a.b.c` when there is one, else to `a.b`. The parent
packages that Python initialises on the way are not edges (every module of a package would otherwise form a
cycle with an `__init__` that re-exports it).
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ("autotune", "search_spaces", "cost_models")


@dataclass
class ImportSite:
    """One import statement: the module it is in, the modules it names, where it runs."""

    module: str
    line: int
    targets: list[str]
    in_function: bool
    type_checking: bool  # under `if TYPE_CHECKING:`: never runs


@dataclass
class Graph:
    modules: set[str] = field(default_factory=set)
    sites: list[ImportSite] = field(default_factory=list)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


Found = tuple[ast.Import | ast.ImportFrom, bool, bool]  # statement, inside a function, under TYPE_CHECKING


def _imports(tree: ast.AST) -> Iterator[Found]:
    """Every import statement, with whether it sits inside a function (or lambda) and under `if TYPE_CHECKING:`."""

    def walk(node: ast.AST, in_function: bool, typing: bool) -> Iterator[Found]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function, typing
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_function, typing)
            else:
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from walk(child, inner, typing)

    yield from walk(tree, False, False)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules of the three packages an import statement names (resolved as described above)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix for alias in node.names]
    out: list[str] = []
    for name in names:
        while name and name not in known:  # `import a.b.c` of a name that is an attribute: its module
            name = name.rpartition(".")[0]
        if name and name not in out:
            out.append(name)
    return out


def read_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> Graph:
    files = {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    graph = Graph(modules=set(files))
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, in_function, typing in _imports(tree):
            targets = _targets(node, module, path.name == "__init__.py", graph.modules)
            # a statement importing only outside modules (tvm, numpy) still counts as an import in a function
            graph.sites.append(ImportSite(module, node.lineno, targets, in_function, typing))
    return graph


def strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
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
                if len(component) > 1 or node in edges.get(node, ()):
                    out.append(sorted(component))
    return sorted(out)


def cycles(graph: Graph, with_functions: bool, with_typing: bool = False) -> list[list[str]]:
    edges: dict[str, set[str]] = {}
    for site in graph.sites:
        if (with_functions or not site.in_function) and (with_typing or not site.type_checking):
            edges.setdefault(site.module, set()).update(t for t in site.targets if t != site.module)
    return strongly_connected(graph.modules, edges)


def summary(root: Path) -> str:
    graph = read_graph(root)
    inner = [s for s in graph.sites if s.in_function and not s.type_checking]
    of_spaces = [s for s in inner if any(t.split(".")[0] == "search_spaces" for t in s.targets)]
    from_autotune = [s for s in of_spaces if s.module.split(".")[0] == "autotune"]
    by_package = {pkg: sum(s.module.split(".")[0] == pkg for s in inner) for pkg in PACKAGES}
    top, all_, typing = cycles(graph, False), cycles(graph, True), cycles(graph, True, True)
    only_inner = [c for c in all_ if c not in top]
    only_typing = [c for c in typing if c not in all_]
    lines = [
        "## Architecture: imports inside functions, import cycles (`benchmarks/architecture.py`)", "",
        f"{len(graph.modules)} modules in {', '.join(f'{p}/' for p in PACKAGES)}; "
        f"{len(graph.sites)} import statements, {len(inner)} of them inside functions "
        f"({', '.join(f'{p}: {n}' for p, n in by_package.items())}).", "",
        f"- imports inside functions: {len(inner)}",
        f"- of them importing search_spaces: {len(of_spaces)} ({len(from_autotune)} in autotune/)",
        f"- import cycles among module-level imports: {len(top)}",
        f"- import cycles once the imports inside functions are counted: {len(all_)}",
        f"- import cycles once the imports for type checkers are counted too: {len(typing)}", "",
    ]
    for title, found in (("Cycles of module-level imports", top),
                         ("Cycles that exist only through imports inside functions", only_inner),
                         ("Cycles that exist only through imports under `if TYPE_CHECKING:`", only_typing)):
        lines += [f"### {title}", ""]
        lines += [f"- {' <-> '.join(c)}" for c in found] or ["none"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the repository checkout to read")
    ap.add_argument("--write", action="store_true", help="store the figures as the result `architecture`")
    args = ap.parse_args()
    body = summary(args.root.resolve())
    if args.write:
        sys.path.insert(0, os.fspath(HERE))
        from _common import report

        report("architecture", body)
    else:
        print(body)


if __name__ == "__main__":
    main()
