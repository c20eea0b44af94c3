"""Producer-load stress run (paper 001 Table 2, qualitatively): vanilla vs DivOPD readers under rising load.

For each load level (rollout batch per producer call) and each reader, one asynchronous run of the
same config (`lockstep` schedule by default, so the arrival rate per update is set by the load and
a seeded run is reproducible). The table reports the measured arrival/drain ratio, stale rows,
never-selected share of valid rollouts, Gini of selected-turn counts, and batch composition.

    python -m trainer.divopd_stress --config divopd-tiny.yaml --steps 24 --out docs/results
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.async_driver import train_async
from trainer.batching import divopd_stats as d
from trainer.config import TrainerConfig, load_config
from trainer.metrics import read_metrics

LOADS: dict[str, int] = {"low": 1, "medium": 2, "high": 4}
"""Load level -> rollout batch (tasks per producer call)."""
READERS: tuple[str, ...] = ("vanilla", "divopd-base")
FINAL = (d.ARRIVAL_DRAIN_RATIO, d.STALE_ROWS, d.NEVER_SELECTED_SHARE, d.GINI, d.TEACHER_TOKENS_PER_TRAINED_TOKEN)
"""Cumulative diagnostics: read at the last update."""
MEAN = (d.EFFECTIVE_ROLLOUTS, d.TOP1_SHARE, d.TURNS_PER_ROLLOUT)
"""Per-batch diagnostics: averaged over the updates."""


def run_one(base: TrainerConfig, out: Path, load: str, rollout_batch: int, reader: str, steps: int) -> dict[str, Any]:
    """One run; returns its table row."""
    config = base.model_copy(deep=True)
    config.steps, config.resume, config.checkpoint_every = steps, False, 0
    config.output_dir = str(out / f"{load}-{reader}")
    config.rollout.tasks_per_step = rollout_batch
    config.divopd.reader = reader  # type: ignore[assignment]
    train_async(config, progress=False)
    records = read_metrics(Path(config.output_dir) / "metrics.jsonl")
    row: dict[str, Any] = {"load": load, "reader": reader, "rollout_batch": rollout_batch, "updates": len(records)}
    row.update({key: records[-1][key] for key in FINAL})
    row.update({key: statistics.fmean(r[key] for r in records) for key in MEAN})
    row["success_rate"] = statistics.fmean(r.get("rollout/success_rate", 0.0) or 0.0 for r in records)
    row["arrived_rows"] = records[-1]["divopd/arrived_rows"]
    return row


def markdown(rows: Sequence[dict[str, Any]], config: TrainerConfig) -> str:
    """The result table with the settings it was measured under."""
    dv = config.divopd
    head = (
        f"B = {dv.batch_rows} turn rows, c = {dv.pool_multiplier}, k = {dv.initial_cap}, delta = {dv.max_staleness}, "
        f"W = {dv.max_pending_age}, producers = {dv.producers}, schedule = {dv.schedule}, "
        f"G = {config.rollout.group_size}, max turns = {config.env.max_turns}, {rows[0]['updates']} updates per run."
    )
    lines = [
        head,
        "",
        "| load | reader | rollout bs | arrival/drain | stale rows | never selected | Gini | eff. rollouts | "
        "top-1 share | turns/rollout | teacher tok/trained tok | rows arrived |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['load']} | {r['reader']} | {r['rollout_batch']} | {r[d.ARRIVAL_DRAIN_RATIO]:.2f} | "
            f"{r[d.STALE_ROWS]:.0f} | {r[d.NEVER_SELECTED_SHARE]:.2f} | {r[d.GINI]:.2f} | "
            f"{r[d.EFFECTIVE_ROLLOUTS]:.1f} | {r[d.TOP1_SHARE]:.2f} | {r[d.TURNS_PER_ROLLOUT]:.2f} | "
            f"{r[d.TEACHER_TOKENS_PER_TRAINED_TOKEN]:.2f} | {r['arrived_rows']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", default="divopd-tiny.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--runs", default="runs/divopd-stress", help="folder of the individual runs")
    parser.add_argument("--out", default="docs/results", help="where divopd-stress.{json,md} go")
    parser.add_argument("--loads", nargs="*", default=list(LOADS), choices=list(LOADS))
    args = parser.parse_args(argv)
    config = load_config(args.config, ["divopd.schedule=lockstep", *args.overrides])
    rows = [
        run_one(config, Path(args.runs), load, LOADS[load], reader, args.steps)
        for load in args.loads
        for reader in READERS
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "divopd-stress.json").write_text(json.dumps({"config": config.model_dump(), "rows": rows}, indent=2))
    table = markdown(rows, config)
    (out / "divopd-stress.md").write_text("# DivOPD producer-load stress run\n\n" + table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
