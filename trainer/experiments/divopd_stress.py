"""Producer-load stress run (paper 001 Table 2, qualitatively): vanilla vs DivOPD readers under rising load.

For each load level (rollout batch per producer call) and each reader, one asynchronous run of the
same config (`lockstep` schedule by default, so the arrival rate per update is set by the load and
a seeded run is reproducible). The table reports the measured arrival/drain ratio, stale rows (unread
in the queue, and pending rows aged out), never-selected share of valid rollouts, Gini of
selected-turn counts, batch composition, and where every arrived row went.

    python -m trainer.experiments.divopd_stress --config divopd-tiny.yaml --steps 24 --out docs/results
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
from trainer.batching.divopd import READERS as ALL_READERS
from trainer.config import TrainerConfig, load_config
from trainer.metrics import read_metrics

LOADS: dict[str, int] = {"low": 1, "medium": 2, "high": 4}
"""Load level -> rollout batch (tasks per producer call)."""
READERS: tuple[str, ...] = ("vanilla", "divopd-base")
"""Table 2's readers: Vanilla OPD and DivOPD-base (Algorithm 1 without the within-rollout s(u) focus)."""
FINAL = (
    d.ARRIVAL_DRAIN_RATIO,
    d.STALE_ROWS,
    d.STALE_PENDING_ROWS,
    d.NEVER_SELECTED_SHARE,
    d.GINI,
    d.TEACHER_TOKENS_PER_TRAINED_TOKEN,
)
"""Cumulative diagnostics: read at the last update."""
ACCOUNTING = (
    "divopd/arrived_rows",
    "divopd/batched_rows",
    "divopd/invalid_rows",
    "divopd/expired_rows",
    "divopd/queued_rows",
    "divopd/pending_rows",
)
"""Where the rows went, at the last update: arrived = batched + invalid + stale + stale pending + expired + left."""
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
    row.update({key.removeprefix("divopd/"): int(records[-1][key]) for key in ACCOUNTING})
    row["left_rows"] = row.pop("queued_rows") + row.pop("pending_rows")
    dropped = row[d.STALE_ROWS] + row[d.STALE_PENDING_ROWS] + row["invalid_rows"] + row["expired_rows"]
    if row["batched_rows"] + dropped + row["left_rows"] != row["arrived_rows"]:
        raise RuntimeError(f"rows unaccounted for in {config.output_dir}: {row}")
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
        "| load | reader | rollout bs | arrival/drain | stale rows (unread) | stale pending | never selected | "
        "Gini | eff. rollouts | top-1 share | turns/rollout | teacher tok/trained tok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['load']} | {r['reader']} | {r['rollout_batch']} | {r[d.ARRIVAL_DRAIN_RATIO]:.2f} | "
            f"{r[d.STALE_ROWS]:.0f} | {r[d.STALE_PENDING_ROWS]:.0f} | {r[d.NEVER_SELECTED_SHARE]:.2f} | "
            f"{r[d.GINI]:.2f} | {r[d.EFFECTIVE_ROLLOUTS]:.1f} | {r[d.TOP1_SHARE]:.2f} | "
            f"{r[d.TURNS_PER_ROLLOUT]:.2f} | {r[d.TEACHER_TOKENS_PER_TRAINED_TOKEN]:.2f} |"
        )
    lines += [
        "",
        "Where the rows went: arrived = batched + invalid + stale unread + stale pending + expired + left "
        "(queued or pending at the end).",
        "",
        "| load | reader | arrived | batched | invalid | stale unread | stale pending | expired | left |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['load']} | {r['reader']} | {r['arrived_rows']} | {r['batched_rows']} | {r['invalid_rows']} | "
            f"{r[d.STALE_ROWS]:.0f} | {r[d.STALE_PENDING_ROWS]:.0f} | {r['expired_rows']} | {r['left_rows']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", default="divopd-tiny.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--runs", default="runs/divopd-stress", help="folder of the individual runs")
    parser.add_argument("--out", default="docs/results", help="where divopd-stress.{json,md} go")
    parser.add_argument("--name", default="divopd-stress", help="result file name (without extension)")
    parser.add_argument("--loads", nargs="*", default=list(LOADS), choices=list(LOADS))
    parser.add_argument("--readers", nargs="*", default=list(READERS), choices=list(ALL_READERS))
    args = parser.parse_args(argv)
    config = load_config(args.config, ["divopd.schedule=lockstep", *args.overrides])
    rows = [
        run_one(config, Path(args.runs), load, LOADS[load], reader, args.steps)
        for load in args.loads
        for reader in args.readers
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps({"config": config.model_dump(), "rows": rows}, indent=2))
    table = markdown(rows, config)
    (out / f"{args.name}.md").write_text("# DivOPD producer-load stress run\n\n" + table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
