"""`python -m trainer.gpucheck`'s orchestration, with stand-in stages (seconds, no torch): the exit status with
scratch JSON beside the records, two runs in a row, a stage ended at its limit (its figures kept, what it
started ended too, the next stage still given its own time), a stage that cannot have its minimum, a wheel
that does not install (only the stages that import it skipped), a hung torch probe (a summary all the same),
and the outputs under `$OUT`."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

import trainer.gpucheck.__main__ as gpucheck
from trainer.gpucheck.__main__ import StageSpec
from trainer.gpucheck.summary import OUTPUTS
from trainer.gpucheck.wheels import NEEDS, image_versions

FAKE_STAGE = """
import json, os, subprocess, sys, time
from pathlib import Path
from trainer.gpucheck.summary import make_record, write_json

args = sys.argv[1:]
out = Path(args[args.index("--out") + 1])
name = out.name
how = json.loads(os.environ.get("FAKE_STAGES", "{}")).get(name, "pass")
checks = [{"name": "ran", "ok": True, "detail": how}]
if how == "scratch":  # what the ipc stage leaves beside its record: JSON without a status
    (out / "ipc-expected.json").write_text(json.dumps({"w": "0" * 64}))
    (out / "ipc-result.json").write_text(json.dumps({"chunks": 2}))
if how == "stale":  # fails when a previous run's file is still there
    left = sorted(p.name for p in out.iterdir())
    checks.append({"name": "fresh folder", "ok": not left, "detail": str(left)})
    (out / "left.txt").write_text("from this run")
if how == "hang":  # records a figure, starts a child, then never ends
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    (out.parent / "grandchild.pid").write_text(str(child.pid))
    write_json(out / "record.json", make_record(name, "cpu", "pass", checks=checks, metrics={"figure": 1.5}))
    time.sleep(300)
write_json(out / "record.json", make_record(name, "cpu", "pass", checks=checks))
"""
FAKE_PROBE = 'import json; print(json.dumps({"torch": "0+fake", "cuda_available": False, "cuda": None, "cpus": 1}))'


Fake = Callable[..., int]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    """Stand-in stages named as given, each with (budget, minimum) seconds; returns a runner of main()."""
    (tmp_path / "gpucheck_fake_stage.py").write_text(FAKE_STAGE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.setattr(gpucheck, "PROBE", FAKE_PROBE)
    monkeypatch.setattr(gpucheck, "CPU_SLACK", 1.0)
    monkeypatch.setattr(gpucheck, "ENV_BUDGET_S", 3.0)

    def run(stages: dict[str, tuple[float, float]], behaviour: dict[str, str] | None = None, *extra: str) -> int:
        specs = tuple(StageSpec(n, "gpucheck_fake_stage", b, m) for n, (b, m) in stages.items())
        monkeypatch.setattr(gpucheck, "STAGES", specs)
        monkeypatch.setenv("FAKE_STAGES", json.dumps(behaviour or {}))
        folders = ["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--wheels", str(tmp_path / "w")]
        return gpucheck.main(["--device", "cpu", *folders, *extra])

    return run


def _records(tmp_path: Path) -> dict[str, dict]:
    return json.loads((tmp_path / "out" / "records.json").read_text())


def test_a_passing_run_exits_0_with_scratch_json_beside_the_records(fake: Fake, tmp_path: Path) -> None:
    assert fake({"ipc": (30, 1), "hf": (30, 1)}, {"ipc": "scratch"}) == 0
    assert (tmp_path / "work" / "ipc" / "ipc-expected.json").is_file()
    assert {n: r["status"] for n, r in _records(tmp_path).items()} == {"env": "pass", "ipc": "pass", "hf": "pass"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(OUTPUTS)
    assert (tmp_path / "out" / "summary.txt").read_text().splitlines()[-1] == "RESULT: PASS (3 stages: 3 pass)"


def test_a_second_run_in_the_same_folders_passes_too(fake: Fake, tmp_path: Path) -> None:
    assert fake({"train": (30, 1)}, {"train": "stale"}) == 0
    assert (tmp_path / "work" / "train" / "left.txt").is_file()
    assert fake({"train": (30, 1)}, {"train": "stale"}) == 0
    assert _records(tmp_path)["train"]["checks"][1] == {"name": "fresh folder", "ok": True, "detail": "[]"}


def test_a_stage_at_its_limit_keeps_its_figures_and_the_next_stage_its_time(fake: Fake, tmp_path: Path) -> None:
    assert fake({"hang": (4, 1), "starved": (2, 5), "after": (20, 1)}, {"hang": "hang"}) == 1
    records = _records(tmp_path)
    hang = records["hang"]
    assert hang["status"] == "fail" and hang["metrics"] == {"figure": 1.5}
    assert any(c["name"] == "finished in time" and not c["ok"] for c in hang["checks"])
    assert records["starved"]["status"] == "skip" and "minimum of 5 s" in records["starved"]["skipped"]
    assert records["after"]["status"] == "pass"
    pid = int((tmp_path / "work" / "grandchild.pid").read_text())
    assert _gone(pid), "the stage's child outlived it"
    logs = (tmp_path / "out" / "logs.txt").read_text()
    assert "===== hang =====" in logs and "killed after its limit" in logs


def _gone(pid: int) -> bool:
    """Whether `pid` has ended (absent, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _wheel(folder: Path, dist: str, version: str) -> Path:
    """A minimal valid pure-Python wheel of `dist`."""
    name = dist.replace("-", "_")
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}_stub/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def test_a_wheel_that_fails_to_install_skips_only_the_stages_that_import_it(
    fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = {**image_versions(), "termcolor": None, "alfworld": None}  # both carried, both only for train
    monkeypatch.setattr(gpucheck, "image_versions", lambda: versions)
    monkeypatch.setattr(gpucheck, "ENV_BUDGET_S", 120.0)
    wheels = tmp_path / "w"
    wheels.mkdir()
    need = {n.dist: n for n in NEEDS}
    _wheel(wheels, "termcolor", need["termcolor"].version or "")
    (wheels / f"alfworld-{need['alfworld'].version}-py3-none-any.whl").write_bytes(b"not a zip")
    assert fake({"learner": (30, 1), "hf": (30, 1), "train": (30, 1)}) == 1
    records = _records(tmp_path)
    env = records["env"]
    failed = {c["name"] for c in env["checks"] if not c["ok"]}
    assert env["status"] == "fail" and failed == {"alfworld installed", "carried wheels installed"}
    assert records["train"]["status"] == "skip" and "alfworld" in records["train"]["skipped"]
    assert records["learner"]["status"] == records["hf"]["status"] == "pass"
    assert (tmp_path / "work" / "site" / "termcolor_stub").is_dir()  # the good wheel of the same group went in


def test_a_hung_torch_probe_still_gives_a_summary(fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpucheck, "PROBE", "import time; time.sleep(60)")
    monkeypatch.setattr(gpucheck, "PROBE_TIMEOUT_S", 1.0)
    assert fake({"learner": (30, 1), "fsdp": (30, 1)}) == 1
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "    FAIL  torch probe: timed out after 1 s" in summary
    assert summary.splitlines()[-1] == "RESULT: FAIL (3 stages: 1 fail, 2 skip)"
    assert all(r["skipped"].startswith("torch's probe") for n, r in _records(tmp_path).items() if n != "env")


def test_the_outputs_go_to_OUT_when_it_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUT", str(tmp_path / "device-out"))
    assert gpucheck.default_out() == tmp_path / "device-out"
    monkeypatch.delenv("OUT")
    assert gpucheck.default_out() == Path("runs/gpu-check")


def test_the_budgets_add_up_and_the_informative_stages_come_first() -> None:
    assert gpucheck.CUDA_BUDGET_S == gpucheck.ENV_BUDGET_S + sum(s.budget_s for s in gpucheck.STAGES) == 480
    assert [s.name for s in gpucheck.STAGES[:3]] == ["throughput", "learner", "fsdp"]
    assert all(0 < s.min_s <= s.budget_s for s in gpucheck.STAGES)
    run = gpucheck.Run("cuda", Path("o"), Path("w"), gpucheck.STAGES, 1.0, 0.0, {})
    assert run.deadline("env") == gpucheck.ENV_BUDGET_S and run.deadline("train") == run.budget_s == 480
    assert run.deadline("learner") == gpucheck.ENV_BUDGET_S + 190 + 40
    carried = {stage for need in NEEDS for stage in need.stages or ()}
    assert carried <= {s.name for s in gpucheck.STAGES}
