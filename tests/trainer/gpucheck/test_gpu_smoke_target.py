"""`make gpu-smoke` selects only the files holding GPU tests, and those import only what the target installs.

The target installs `.[gpu,alfworld]` plus pytest into a fresh venv and runs `pytest -m gpu` over the files
its `GPU_TESTS` rule finds; a GPU test file (or a conftest above it) importing anything outside that install
(hypothesis, say) would stop the collection there. vLLM itself is not installed here: the closure is
computed from the installed packages' metadata, without vLLM's own dependencies.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).parents[3]
FIRST_PARTY = {"trainer", "envhub", "tests", "__future__"}


def _makefile() -> str:
    return (ROOT / "Makefile").read_text()


def gpu_test_files() -> list[Path]:
    """What the Makefile's `GPU_TESTS` rule selects: test files mentioning `pytest.mark.gpu`."""
    assert "GPU_TESTS = $(shell grep -rl --include='test_*.py' 'pytest.mark.gpu' tests | sort)" in _makefile()
    return sorted(p for p in (ROOT / "tests").rglob("test_*.py") if "pytest.mark.gpu" in p.read_text())


def installed_requirements() -> tuple[set[str], list[str]]:
    """The extras and the extra packages of gpu-smoke's `pip install` line."""
    line = next(x for x in _makefile().splitlines() if ".venv-gpu/bin/pip install" in x)
    match = re.search(r"-e '\.\[([a-z,]+)\]'((?: [\w-]+)*)$", line)
    assert match, line
    return set(match[1].split(",")), match[2].split()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(extras: set[str], packages: list[str]) -> set[str]:
    """Normalised names of every installed distribution `envhub[extras]` and `packages` pull in."""
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [("envhub", frozenset(extras)), *((p, frozenset()) for p in packages)]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in done:
            continue
        done.add((name, wanted))
        seen.add(_normal(name))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:  # vllm: not installable here
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted or {""}):
                todo.append((req.name, frozenset(req.extras)))
    return seen


def module_imports(path: Path) -> set[str]:
    """Top-level modules a file imports when it is loaded (its module-level statements)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def loaded_with(test_file: Path) -> list[Path]:
    """The test file and the conftest.py files pytest loads for it (its folder and every one above, in tests/)."""
    folders = [f for f in [test_file.parent, *test_file.parent.parents] if f.is_relative_to(ROOT / "tests")]
    return [test_file, *(f / "conftest.py" for f in folders if (f / "conftest.py").is_file())]


def not_installed(paths: list[Path], allowed: set[str]) -> dict[str, set[str]]:
    """Per file, the imported modules that neither the standard library nor an allowed distribution provides."""
    providers = metadata.packages_distributions()
    missing: dict[str, set[str]] = {}
    for path in paths:
        for module in module_imports(path) - FIRST_PARTY - set(sys.stdlib_module_names):
            if not {_normal(d) for d in providers.get(module, [])} & allowed:
                missing.setdefault(str(path.relative_to(ROOT)), set()).add(module)
    return missing


def test_gpu_smoke_selects_the_gpu_test_files_and_they_import_only_what_it_installs() -> None:
    files = gpu_test_files()
    assert ROOT / "tests/trainer/backends/test_backends_vllm.py" in files
    allowed = closure(*installed_requirements())
    assert {"torch", "transformers", "ray", "alfworld", "textworld", "pytest", "pytest-timeout"} <= allowed
    assert not_installed([p for f in files for p in loaded_with(f)], allowed) == {}
    # the check sees a file that would stop the collection: hypothesis is not in the target's install
    violator = ROOT / "tests/trainer/batching/test_divopd_sampler.py"
    assert "hypothesis" not in allowed and not_installed([violator], allowed) == {
        str(violator.relative_to(ROOT)): {"hypothesis"}
    }
