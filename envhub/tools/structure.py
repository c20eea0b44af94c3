"""Structure checks over the source (read with `ast`, nothing imported): import circles, public
type names defined twice, and code that decides what a call does from a method's name.

    python -m envhub.tools.structure circles envhub trainer     # modules that import each other
    python -m envhub.tools.structure names envhub trainer       # public classes sharing a name
    python -m envhub.tools.structure dispatch envhub trainer    # sites branching on a method-name string

Each prints what it finds, then a count, and exits 1 when it found anything (tests/test_structure.py
holds the packages to none). Generated code (`envhub/v1`) is left out.

* circles: an edge goes from a module to the module it names (`from pkg import name` names
  `pkg.name` when that is a module, else `pkg`), as grimp and import-linter count them. Every
  import counts, also those under `if TYPE_CHECKING:` and inside functions (two modules that each
  need the other); `--runtime` keeps only module-level imports outside TYPE_CHECKING. A circle is a
  strongly connected component of two or more modules.
* names: module-level classes whose name does not start with "_", by name, where two modules
  define the same one.
* dispatch: comparisons whose operand is a method name (`call.method == "Step"`, `method in
  PLACED`), a module-level table looked up by one (`FIELDS[call.method]`), a method fetched by a
  name (`getattr(worker, method)`), and calls passing a string literal as the `method` of a function
  that calls a method by that name (`executor.call(worker, "run")`, `self._on_learners("step", batch)`).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

GENERATED = ("envhub.v1",)


def modules(root: Path, packages: Sequence[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of `packages` under `root`."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if not name.startswith(GENERATED):
                found[name] = path
    return found


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# ---------------------------------------------------------------- circles


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, runtime: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of `tree`; with `runtime`, only those run when the module is imported."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif runtime and isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
        elif not (runtime and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)):
            pending.extend(ast.iter_child_nodes(node))


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported(found: Mapping[str, Path], runtime: bool = False) -> dict[str, set[str]]:
    """Module -> every module it names in an import (inside `found` or not, e.g. "grpc")."""
    names: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        for node in _imports(_parse(path), runtime):
            if isinstance(node, ast.Import):
                targets: Iterable[str] = (alias.name for alias in node.names)
            else:
                source = _absolute(name, path.name == "__init__.py", node)
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in found else source for a in node.names]
            names[name].update(target for target in targets if target != name)
    return names


def graph(found: Mapping[str, Path], runtime: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of `found` it imports."""
    return {
        name: {target for target in targets if target in found} for name, targets in imported(found, runtime).items()
    }


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan's algorithm), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def enter(node: str) -> tuple[str, Iterator[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        return node, iter(sorted(edges[node]))

    for start in sorted(edges):
        if start in index:
            continue
        work = [enter(start)]  # iterative: deep import chains do not reach the recursion limit
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = [stack.pop()]
                    while component[-1] != node:
                        component.append(stack.pop())
                    on_stack.difference_update(component)
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                work.append(enter(child))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found, key=lambda component: (-len(component), component))


def circle_report(found: Mapping[str, Path], runtime: bool = False) -> list[str]:
    """One line per import circle among `found`."""
    return [f"{len(c)} modules: {', '.join(c)}" for c in circles(graph(found, runtime))]


# ---------------------------------------------------------------- names


def shared_names(found: Mapping[str, Path]) -> dict[str, list[str]]:
    """Public class name -> the modules defining it, for the names more than one module defines."""
    where: dict[str, list[str]] = {}
    for name, path in found.items():
        for node in _parse(path).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(name)
    return {name: modules for name, modules in sorted(where.items()) if len(modules) > 1}


def names_report(found: Mapping[str, Path]) -> list[str]:
    """One line per public class name that two or more modules define."""
    return [f"{name}: {', '.join(where)}" for name, where in shared_names(found).items()]


# ---------------------------------------------------------------- dispatch


def _names_a_method(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "method") or (
        isinstance(node, ast.Name) and node.id == "method"
    )


def _name_callers(found: Mapping[str, Path]) -> dict[str, int]:
    """Function name -> position (after self) of its parameter `method`, for the functions that call a
    method by that name: `getattr(x, method)`, or `method` passed on to another such function."""
    taking: list[tuple[str, int, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for path in found.values():
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [arg.arg for arg in node.args.posonlyargs + node.args.args if arg.arg not in ("self", "cls")]
                if "method" in params:
                    taking.append((node.name, params.index("method"), node))
    callers: dict[str, int] = {}
    while True:
        more = {
            name: position
            for name, position, function in taking
            if name not in callers and any(_calls_by_name(call, callers) for call in ast.walk(function))
        }
        if not more:
            return callers
        callers.update(more)


def _named_method(node: ast.AST, callers: Mapping[str, int]) -> tuple[str, ast.expr] | None:
    """For a call of `getattr` or of one of `callers`: the function's name and the argument naming the method."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)):
        return None
    called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    position = 1 if called == "getattr" else callers.get(called)
    return (called, node.args[position]) if position is not None and len(node.args) > position else None


def _calls_by_name(node: ast.AST, callers: Mapping[str, int]) -> bool:
    """`node` is `getattr(x, method)` or a call passing the name `method` on to one of `callers`."""
    named = _named_method(node, callers)
    return named is not None and _names_a_method(named[1])


def _is_dispatch(node: ast.AST, callers: Mapping[str, int]) -> bool:
    """`node` decides what to do, or what to call, from a method's name (see the module docstring)."""
    if isinstance(node, ast.Compare):
        return any(_names_a_method(operand) for operand in [node.left, *node.comparators])
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Name) and node.value.id.isupper() and _names_a_method(node.slice)
    named = _named_method(node, callers)
    if named is None:
        return False
    called, argument = named
    if called == "getattr":
        return _names_a_method(argument)
    return isinstance(argument, ast.Constant) and isinstance(argument.value, str)


def dispatch_report(found: Mapping[str, Path]) -> list[str]:
    """One line per site deciding what to do, or what to call, from a method's name."""
    callers = _name_callers(found)
    lines = []
    for path in found.values():
        source = path.read_text(encoding="utf-8").splitlines()
        sites = [node for node in ast.walk(_parse(path)) if _is_dispatch(node, callers)]
        for lineno in sorted({getattr(site, "lineno", 0) for site in sites}):
            lines.append(f"{path}:{lineno}: {source[lineno - 1].strip()}")
    return lines


# ---------------------------------------------------------------- command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=("circles", "names", "dispatch"))
    parser.add_argument("packages", nargs="+", help="top-level packages, e.g. envhub trainer")
    parser.add_argument("--root", type=Path, default=Path("."), help="folder holding the packages")
    parser.add_argument("--runtime", action="store_true", help="circles: only imports run at import time")
    args = parser.parse_args(argv)
    found = modules(args.root, args.packages)
    reports: dict[str, Callable[[Mapping[str, Path]], list[str]]] = {
        "circles": lambda f: circle_report(f, args.runtime),
        "names": names_report,
        "dispatch": dispatch_report,
    }
    lines = reports[args.check](found)
    for line in lines:
        print(line)
    print(f"{len(lines)} {args.check} found in {', '.join(args.packages)} ({len(found)} modules)")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
