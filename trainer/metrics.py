"""Run metrics: a JSONL log, the configured sinks (TensorBoard, wandb, MLflow), and a PNG plot of success rate
and diagnostics."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.config import TrainerConfig
from trainer.metric_sinks import Sink, open_sinks
from trainer.objectives import diagnostics as names
from trainer.objectives.pbr import PBR_LOSS

JSONL = "metrics.jsonl"
PLOT = "training.png"
RUN_TIME = "time/run_s"
"""Wall seconds of the run's training loop at each record, over every attempt: a resumed run's logger starts from
the time of the last record the run had (`run_time`)."""
CORE_PLOTTED: tuple[str, ...] = (
    names.SUCCESS_RATE,
    names.MEAN_TURNS,
    names.KL_COEF,
    names.RL_COEF,
    names.OPD_RL_RATIO,
    names.ACTOR_ENTROPY,
    names.TDUR_ACTIVE_RATIO,
    names.TDUR_MEAN_WEIGHT,
    names.TEACHER_STUDENT_GAP,
    names.EVAL_SUCCESS_RATE,
    names.EVAL_MEAN_TURNS,
    "actor/pg_loss",
    names.REVERSE_KL,
)
"""The panels every synchronous run logs whatever its objective (GRPO, OPD and ATOD fill them all; tested end to
end in the driver test)."""
PLOTTED: tuple[str, ...] = (*CORE_PLOTTED, PBR_LOSS, names.LISTED_KL)
"""The panels of `training.png`: the core ones, the PBR term and the KL over listed replies (`kl_over: replies`); a
run adds its rollout strategy's (`Strategy.plotted`) and the asynchronous driver DivOPD's. A panel is drawn only for
keys that have values."""


class MetricsLogger:
    """Appends one record per step to `metrics.jsonl` and hands it to each sink (`trainer.metric_sinks`:
    TensorBoard by default, wandb, MLflow); `plot()` draws the PNG."""

    def __init__(self, output_dir: str | Path, sinks: Sequence[Sink] = (), run_s_before: float = 0.0) -> None:
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / JSONL
        self._sinks = list(sinks)
        self._started = time.perf_counter() - run_s_before

    @classmethod
    def for_run(cls, config: TrainerConfig, output_dir: str | Path, resumed: bool = False) -> MetricsLogger:
        """The logger of a training run: the sinks of `config.logging`, given the whole config; a `resumed` run's
        `RUN_TIME` goes on from its earlier attempts'."""
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        before = run_time(read_metrics(out / JSONL)) if resumed else 0.0
        return cls(out, open_sinks(config.logging, out, config.model_dump(mode="json")), before)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Write one record, with the run's `RUN_TIME` (NaN becomes null in JSON and is left out of the sinks)."""
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else float(v)) for k, v in metrics.items()}
        clean[RUN_TIME] = time.perf_counter() - self._started
        with self.path.open("a") as fh:
            fh.write(json.dumps({"step": step, **clean}, sort_keys=True) + "\n")
        present = {key: value for key, value in clean.items() if value is not None}
        for sink in self._sinks:
            sink.log(step, present)

    def close(self) -> None:
        for sink in self._sinks:
            sink.close()

    def plot(self, keys: Sequence[str] = PLOTTED) -> Path:
        """Draw every logged key of `keys` against the step into `training.png`."""
        return plot_metrics(read_metrics(self.path), self.dir / PLOT, keys)


def run_time(records: Sequence[Mapping[str, Any]]) -> float:
    """The run's wall seconds at its last record (0 where no record has `RUN_TIME`: logged before it was)."""
    return next((float(r[RUN_TIME]) for r in reversed(records) if r.get(RUN_TIME) is not None), 0.0)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file (empty when missing)."""
    file = Path(path)
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def plot_metrics(records: Sequence[Mapping[str, Any]], out: str | Path, keys: Sequence[str] = PLOTTED) -> Path:
    """One small panel per key that has at least one value; written with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [k for k in keys if any(r.get(k) is not None for r in records)]
    cols = 3
    rows = max(1, math.ceil(len(present) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    for ax, key in zip(axes.flat, present, strict=False):
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
