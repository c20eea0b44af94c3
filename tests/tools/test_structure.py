"""`envhub.tools.structure`: its checks find what they look for in a small tree, and hold envhub to none."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envhub.tools import structure

ROOT = Path(__file__).resolve().parents[2]


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return structure.modules(root, ["pkg"])


def test_circles_count_type_checking_and_function_imports_unless_runtime(tmp_path: Path) -> None:
    found = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n",
            "pkg/c.py": "def f():\n    from . import a\n",
            "pkg/d.py": "import pkg.a\n",
        },
    )
    assert structure.circles(structure.graph(found)) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert structure.circles(structure.graph(found, runtime=True)) == []


def test_names_lists_public_classes_defined_twice(tmp_path: Path) -> None:
    found = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "class Step: ...\nclass _Private: ...\nclass Only: ...\n",
            "pkg/b.py": "class Step: ...\nclass _Private: ...\n",
        },
    )
    assert structure.shared_names(found) == {"Step": ["pkg.a", "pkg.b"]}


def test_dispatch_finds_name_comparisons_tables_and_calls_by_name(tmp_path: Path) -> None:
    found = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": """\
                FIELDS = {"Step": "step"}

                class Executor:
                    def submit(self, worker, method, *args):
                        return getattr(worker, method)(*args)

                    def call(self, worker, method, *args):
                        return self.submit(worker, method, *args)

                def label(method: str) -> str:  # takes a name, calls nothing by it
                    return method

                def send(call, executor, worker):
                    if call.method == "Step":
                        return FIELDS[call.method]
                    label("Step")
                    executor.call(worker, "run", 1)
                    return call.effect
                """,
        },
    )
    sites = [line.split(": ", 1)[1] for line in structure.dispatch_report(found)]
    assert sites == [
        "return getattr(worker, method)(*args)",
        'if call.method == "Step":',
        "return FIELDS[call.method]",
        'executor.call(worker, "run", 1)',
    ]


@pytest.mark.parametrize("check", ["circles", "names", "dispatch"])
def test_the_command_exits_1_when_it_finds_something(tmp_path: Path, check: str) -> None:
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.a\n"})
    assert structure.main([check, "--root", str(tmp_path), "pkg"]) == 0
    _tree(
        tmp_path,
        {
            "pkg/a.py": "import pkg.b\nclass A: ...\nif x.method == 'Step': pass\n",
            "pkg/b.py": "import pkg.a\nclass A: ...\n",
        },
    )
    assert structure.main([check, "--root", str(tmp_path), "pkg"]) == 1


def test_envhub_and_the_trainer_have_no_import_circle_and_no_method_name_dispatch() -> None:
    found = structure.modules(ROOT, ["envhub", "trainer"])
    assert structure.circle_report(found) == []
    assert structure.dispatch_report(found) == []


def test_the_trainer_reaches_envhub_through_its_client_only() -> None:
    """No grpc and no envhub module but `envhub.client` in trainer/, except in the one local-server helper."""
    helper = "trainer.rollout.local_server"
    outside = {
        (module, name)
        for module, names in structure.imported(structure.modules(ROOT, ["trainer"])).items()
        for name in names
        if name.split(".")[0] == "grpc"
        or (name.split(".")[0] == "envhub" and not name.startswith("envhub.client") and module != helper)
    }
    assert outside == set()


def test_no_two_public_classes_of_envhub_and_the_trainer_share_a_name() -> None:
    assert structure.names_report(structure.modules(ROOT, ["envhub", "trainer"])) == []
