"""`python -m trainer.tree.summary <comparison folder>`: the credit table of a comparison's runs (a markdown table).

Per arm and seed, means over learner steps: the share of supervised turns with a non-zero advantage under the
run's credit and under GRPO's on the same batches, student tokens per step, training success, rollout and
learner seconds per step.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from trainer.metrics import read_metrics

COLUMNS = (
    "| arm | seed | non-zero-advantage turns (its credit) | (GRPO's, same batches) | student tokens / step "
    "| training success | rollout s / step | learner s / step |\n|---|---|---|---|---|---|---|---|"
)


def rollout_seconds(record: dict[str, float]) -> float:
    """The step's rollout wall time: a plain step's, or a tree step's roots plus continuations."""
    if "rollout/wall_s" in record:
        return float(record["rollout/wall_s"])
    return float(record.get("root/wall_s", 0.0)) + float(record.get("tree/rollout/wall_s", 0.0))


def credit_table(folder: Path) -> str:
    """The table of every `runs/<arm>/seed<n>/metrics.jsonl` under `folder` that logged the credit shares."""
    lines = [COLUMNS]
    for path in sorted(folder.glob("runs/*/seed*/metrics.jsonl")):
        records = [r for r in read_metrics(path) if "credit/nonzero_turn_share" in r]
        if not records:
            continue

        def mean(key: str, rows: list[dict[str, float]] = records) -> float:
            return statistics.fmean(float(r.get(key) or 0.0) for r in rows)

        rollout = statistics.fmean(rollout_seconds(r) for r in records)
        lines.append(
            f"| {path.parent.parent.name} | {path.parent.name.removeprefix('seed')} "
            f"| {mean('credit/nonzero_turn_share'):.3f} | {mean('credit/grpo_nonzero_turn_share'):.3f} "
            f"| {mean('rollout/generated_tokens'):,.0f} | {mean('rollout/success_rate'):.3f} "
            f"| {rollout:.1f} | {mean('learner/step_s'):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(credit_table(Path(sys.argv[1])))
