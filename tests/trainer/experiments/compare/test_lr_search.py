"""The comparison's learning-rate search: the same values, steps and seeds for every arm, the best held-out success
carried into the long runs; long runs continue from their newest checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.config import ConfigError
from trainer.eval import EvalResult
from trainer.experiments.compare import load_spec
from trainer.experiments.compare.lr_search import best_lr, search_result, search_table, selection_score
from trainer.experiments.compare.report import write_report
from trainer.experiments.compare.run import ArmRun, Baselines, Measured, arm_config, continued


def curve(arm: str, *success: float) -> ArmRun:
    steps = [8 * i for i in range(len(success))]
    return ArmRun(arm, 0, steps, list(success), [15.0] * len(success), [0.0] * len(success), 1.0, 1.0)


def test_the_best_mean_held_out_success_wins_and_ties_go_to_the_smaller_rate() -> None:
    assert selection_score([curve("opd", 0.9, 0.1, 0.3)]) == pytest.approx(0.2)  # the start is not scored
    assert selection_score([curve("opd", 0.0, 0.2), curve("opd", 0.0, 0.4)]) == pytest.approx(0.3)
    assert best_lr({1e-3: 0.2, 2e-3: 0.3, 4e-3: 0.1}) == 2e-3
    assert best_lr({4e-3: 0.25, 1e-3: 0.25, 2e-3: 0.1}) == 1e-3
    with pytest.raises(ValueError, match="no learning rate"):
        best_lr({})
    result = search_result("atod", {1e-3: [curve("atod", 0, 0.1, 0.1)], 2e-3: [curve("atod", 0, 0.2, 0.4)]})
    assert result.chosen == 2e-3 and result.finals == {1e-3: 0.1, 2e-3: 0.4} and result.seeds == 1
    table = search_table([result])
    assert "| atod | 0.100 (final 0.10) | **0.300 (final 0.40)** | 0.002 |" in table
    with pytest.raises(ValueError, match="same number of search runs"):
        search_result("atod", {1e-3: [curve("atod", 0, 0.1)], 2e-3: []})


def test_every_arm_searches_the_same_values_on_the_long_runs_schedule() -> None:
    spec = load_spec("atod-long")
    assert spec.lr_search_budget == 3 > 1 and spec.resumable and spec.steps >= 128 and spec.seeds == 3
    assert [a.name for a in spec.arms] == ["grpo", "opd", "atod", "atod-tdur-none"]
    for arm in spec.arms:
        reported = arm_config(spec, arm, 0, Path("o"), Path("m"), "h:1").env.eval_split
        configs = [arm_config(spec, arm, 0, Path("o"), Path("m"), "h:1", lr, search=True) for lr in spec.lr_values]
        assert [c.optim.lr for c in configs] == list(spec.lr_values)
        for config in configs:
            assert (config.steps, config.eval.every) == (spec.search_steps, spec.search_eval_every)
            assert config.env.eval_split == "valid_unseen" != reported
            assert config.eval.num_tasks == spec.search_tasks and "lr-search" in config.output_dir
            if config.objective.name == "atod":  # annealed over fixed steps, not over the short run
                assert config.objective.params["coef_anneal_steps"] == 128 > spec.search_steps
    long = arm_config(spec, spec.arms[1], 2, Path("o"), Path("m"), "h:1", 4e-3)
    assert long.optim.lr == 4e-3 and long.checkpoint_every == spec.eval_every and long.resume
    assert long.output_dir == str(Path("o") / "runs" / "opd" / "seed2")
    quick = spec.sized(True)
    assert (quick.search_steps, quick.search_tasks, quick.lr_values) == (2, 4, spec.lr_values)


def test_a_search_needs_two_values_and_whole_evaluation_intervals(tmp_path: Path) -> None:
    for body, message in (
        ("lr_values: [1.0e-3]\nsearch_steps: 8\nsearch_eval_every: 4\n", "at least 2 different"),
        ("lr_values: [1.0e-3, 2.0e-3]\nsearch_steps: 6\nsearch_eval_every: 4\n", "positive multiple"),
    ):
        path = tmp_path / "bad.yaml"
        path.write_text("extends: atod-long\n" + body)
        with pytest.raises(ConfigError, match=message):
            load_spec(path)


def test_the_report_names_each_arms_chosen_rate(tmp_path: Path) -> None:
    spec = load_spec("atod-long").sized(False, {"steps": 16, "eval_every": 8}, arms=["opd", "atod"])
    start = EvalResult("s", "valid_seen", 32, 0.0, 15.0, 0.0, 1.0)
    teacher = EvalResult("t", "valid_seen", 32, 0.5, 11.0, 0.0, 1.0)
    sft = {"key": {"steps": 1, "examples": 1}, "result": {"exact_match_after": 0.5}}
    baselines = Baselines(start, teacher, {"teacher-sft": sft, "student-warm": sft, "reused": True})
    finals = {"opd": (0.1, 0.2, 0.0), "atod": (0.0, 0.0, 0.3)}
    search = [
        search_result(arm, {lr: [curve(arm, 0, f)] for lr, f in zip(spec.lr_values, values, strict=True)})
        for arm, values in finals.items()
    ]
    runs = [ArmRun(a, 0, [0, 8, 16], [0.0, 0.2, 0.3], [15.0] * 3, [0.0, 1.0, 2.0], 1.0, 1.0) for a in ("opd", "atod")]
    machine = {"wall_s": 1.0, "cpus": 2, "load_start": (1.0, 1.0, 1.0), "load_end": (1.0, 1.0, 1.0)}
    text = write_report(spec, Measured(baselines, runs, machine, search, baselines), tmp_path, "default").read_text()
    assert "same search (budget 3 values per arm: 0.001, 0.002, 0.004; see below): opd 0.002, atod 0.004" in text
    assert "## Learning-rate search (every arm the same: 3 values, 32 steps, 1 seed)" in text
    assert "| opd | 0.100 (final 0.10) | **0.200 (final 0.20)** | 0.000 (final 0.00) | 0.002 |" in text
    assert "from step 16:" in text  # ATOD vs OPD after OPD's curve flattened


def test_a_stopped_run_continues_from_its_newest_checkpoint(tmp_path: Path) -> None:
    spec = load_spec("atod-long")
    config = arm_config(spec, spec.arms[1], 0, tmp_path, Path("m"), "h:1", 1e-3)
    out = Path(config.output_dir)
    assert not continued(config)  # nothing there yet
    (out / "checkpoints" / "step_000016").mkdir(parents=True)
    (out / "checkpoints" / "step_000016" / "trainer_state.pt").write_bytes(b"x")
    (out / "config.json").write_text(config.model_dump_json())
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 20)))
    moved = arm_config(spec, spec.arms[1], 0, tmp_path, Path("m"), "h:2", 1e-3)  # a new server port is no change
    assert continued(moved)
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == list(range(1, 17))
    other = arm_config(spec, spec.arms[1], 0, tmp_path, Path("m"), "h:1", 2e-3)  # other settings: start again
    assert not continued(other)
    longer = arm_config(spec.sized(False, {"steps": 256}), spec.arms[1], 0, tmp_path, Path("m"), "h:1", 1e-3)
    assert continued(longer)  # a longer run continues the shorter one's checkpoint
    shorter = arm_config(
        spec.sized(False, {"steps": 8, "eval_every": 8}), spec.arms[1], 0, tmp_path, Path("m"), "h:1", 1e-3
    )
    assert not continued(shorter)  # its checkpoint is past the end
