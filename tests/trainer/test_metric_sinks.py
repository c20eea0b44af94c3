"""The trainer's metric sinks write real runs that read back: a wandb offline run, an MLflow run in a local
store, TensorBoard events (no network: wandb offline, MLflow on a SQLite file)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.config import LoggingConfig, TrainerConfig
from trainer.metric_sinks import local_store
from trainer.metrics import MetricsLogger

STEPS = [{"actor/pg_loss": 0.5, "success_rate": 0.0}, {"actor/pg_loss": 0.25, "success_rate": math.nan}]


def _run(tmp_path: Path, **logging: Any) -> Path:
    out = tmp_path / "run"
    config = TrainerConfig(output_dir=str(out), steps=2, logging=LoggingConfig(**logging))
    logger = MetricsLogger.for_run(config, out)
    for step, metrics in enumerate(STEPS, start=1):
        logger.log(step, metrics)
    logger.close()
    return out


def _wandb_records(path: Path) -> Iterator[Any]:
    """The records of a .wandb file: LevelDB-log framing (32 KiB blocks, 7-byte chunk headers) after a
    7-byte ':W&B' header, each record a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    position, pending = 7, b""
    while position + 7 <= len(data):
        left = block - position % block
        _, length, kind = struct.unpack("<IHB", data[position : position + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (kind == 0 and length == 0):  # block trailer or padding
            position += left
            continue
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_run_holds_the_steps_and_the_config(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    out = _run(tmp_path, backends=["wandb"], wandb_mode="offline", run_name="sinks", project="envhub-test")
    (run_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    records = list(_wandb_records(run_file))
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "envhub-test" and run.display_name == "sinks"
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["objective"]["name"] == "atod" and config["steps"] == 2
    history = [
        {(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert [(h["_step"], h["actor/pg_loss"]) for h in history] == [(1, 0.5), (2, 0.25)]
    assert history[0]["success_rate"] == 0.0 and "success_rate" not in history[1]  # NaN left out


def test_mlflow_run_in_a_local_store_reads_back(tmp_path: Path) -> None:
    mlflow = pytest.importorskip("mlflow")
    out = _run(tmp_path, backends=["mlflow"], run_name="sinks")
    client = mlflow.MlflowClient(tracking_uri=local_store(out))
    experiment = client.get_experiment_by_name("envhub")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "sinks" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "actor/pg_loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "success_rate")] == [1]
    config = json.loads(Path(client.download_artifacts(run.info.run_id, "config.json", str(tmp_path))).read_text())
    assert config["objective"]["name"] == "atod" and config["logging"]["backends"] == ["mlflow"]
    assert (out / "mlflow.db").is_file() and (out / "mlflow-artifacts").is_dir()


def test_tensorboard_by_default_and_jsonl_always(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = _run(tmp_path)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("actor/pg_loss")] == [(1, 0.5), (2, 0.25)]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2] and lines[1]["success_rate"] is None
    assert not _run(tmp_path / "none", backends=[]).joinpath("tensorboard").exists()


def test_a_backend_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        LoggingConfig(backends=["wandb", "wandb"])
