"""The credit table of a comparison folder."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.tree.summary import credit_table


def test_credit_table_averages_each_runs_steps(tmp_path: Path) -> None:
    steps = [
        {"step": 1, "credit/nonzero_turn_share": 0.5, "credit/grpo_nonzero_turn_share": 0.0,
         "rollout/generated_tokens": 100, "rollout/success_rate": 0.0, "root/wall_s": 1.0,
         "tree/rollout/wall_s": 2.0, "learner/step_s": 4.0},
        {"step": 2, "credit/nonzero_turn_share": 0.25, "credit/grpo_nonzero_turn_share": 0.5,
         "rollout/generated_tokens": 300, "rollout/success_rate": 0.5, "root/wall_s": 3.0,
         "tree/rollout/wall_s": 0.0, "learner/step_s": 2.0},
        {"step": 2, "eval/success_rate": 0.1},
    ]  # fmt: skip
    run = tmp_path / "runs" / "tree-mc" / "seed2"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    (tmp_path / "runs" / "empty" / "seed0").mkdir(parents=True)
    (tmp_path / "runs" / "empty" / "seed0" / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    lines = credit_table(tmp_path).splitlines()
    assert lines[2:] == ["| tree-mc | 2 | 0.375 | 0.250 | 200 | 0.250 | 3.0 | 3.0 |"]
