"""Where a run's per-step metrics go besides `metrics.jsonl`: TensorBoard, Weights & Biases, MLflow.

`open_sinks(settings, output_dir, config)` opens one sink per name in `logging.backends`; each
takes `(step, metrics)` records with NaN already dropped, and is closed at the end of the run.
wandb and MLflow are imported only when chosen (neither is a trainer dependency): wandb runs in
`logging.wandb_mode` (offline writes `output_dir/wandb/offline-run-*`, synced later with `wandb
sync`); MLflow logs to `logging.mlflow_tracking_uri`, by default a local SQLite store in the
output folder. Both receive the whole run config (wandb's run config, MLflow's `config.json`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from trainer.config import LoggingConfig
from trainer.errors import TrainerError


class Sink(Protocol):
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """Scalars in `output_dir/tensorboard` (torch's SummaryWriter)."""

    def __init__(self, output_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(output_dir / "tensorboard"))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """One wandb run (`wandb.init`), its config the run's config; steps are the learner's steps."""

    def __init__(self, settings: LoggingConfig, output_dir: Path, name: str, config: Mapping[str, Any]) -> None:
        self._wandb = wandb = _require("wandb", "pip install 'envhub[wandb]'")
        mode = settings.wandb_mode or None
        self._run = wandb.init(project=settings.project, name=name, dir=str(output_dir), mode=mode, config=dict(config))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()
        self._wandb.teardown()  # waits for wandb's service to write out the run (offline: its .wandb file)


class MlflowSink:
    """One MLflow run in experiment `logging.project`, the run config logged as `config.json`."""

    def __init__(self, settings: LoggingConfig, output_dir: Path, name: str, config: Mapping[str, Any]) -> None:
        mlflow = _require("mlflow", "pip install 'envhub[mlflow]'")
        uri = settings.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or local_store(output_dir)
        self._client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = self._client.get_experiment_by_name(settings.project)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self._client.create_experiment(
                settings.project, artifact_location=(output_dir / "mlflow-artifacts").resolve().as_uri()
            )
        )
        self._run_id = self._client.create_run(experiment_id, run_name=name).info.run_id
        self._client.log_dict(self._run_id, dict(config), "config.json")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        stamp = _now_ms()
        batch = [Metric(key, value, stamp, step) for key, value in metrics.items()]
        self._client.log_batch(self._run_id, metrics=batch)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


def local_store(output_dir: Path) -> str:
    """The default MLflow tracking URI: a SQLite database in the output folder (MLflow's own file
    store is in maintenance mode and refused by MLflow 3 unless MLFLOW_ALLOW_FILE_STORE is set)."""
    return f"sqlite:///{(output_dir / 'mlflow.db').resolve()}"


def open_sinks(settings: LoggingConfig, output_dir: Path, config: Mapping[str, Any]) -> list[Sink]:
    """One open sink per backend of `settings`, in order; `config` is the run's whole config."""
    name = settings.run_name or output_dir.resolve().name
    sinks: list[Sink] = []
    for backend in settings.backends:
        if backend == "tensorboard":
            sinks.append(TensorBoardSink(output_dir))
        elif backend == "wandb":
            sinks.append(WandbSink(settings, output_dir, name, config))
        else:
            sinks.append(MlflowSink(settings, output_dir, name, config))
    return sinks


def _require(module: str, install: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TrainerError(
            f"logging.backends names {module}, which is not installed: {install}", reason="MISSING_LOGGING_BACKEND"
        ) from exc


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
