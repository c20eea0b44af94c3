"""`checkpoint_keep`: a run's output folder holds its newest complete checkpoints only."""

from __future__ import annotations

from pathlib import Path

from trainer.learner import STATE_FILE
from trainer.workers.learner import checkpoint_folder, latest_checkpoint, prune_checkpoints


def _checkpoint(out: Path, step: int, complete: bool = True) -> Path:
    folder = checkpoint_folder(out, step)
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    if complete:
        (folder / STATE_FILE).write_bytes(b"state")
    return folder


def test_keeps_the_newest_complete_checkpoints_and_drops_older_partial_ones(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        _checkpoint(tmp_path, step)
    _checkpoint(tmp_path, 25, complete=False)  # a save cut short before step 30's
    deleted = prune_checkpoints(tmp_path, keep=2)
    assert [p.name for p in deleted] == ["step_000010"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000020", "step_000025", "step_000030"]
    deleted = prune_checkpoints(tmp_path, keep=1)
    assert [p.name for p in deleted] == ["step_000020", "step_000025"]
    assert latest_checkpoint(tmp_path) == str(checkpoint_folder(tmp_path, 30))


def test_keep_zero_or_fewer_checkpoints_than_kept_deletes_nothing(tmp_path: Path) -> None:
    assert prune_checkpoints(tmp_path, keep=1) == []  # no checkpoints folder yet
    for step in (1, 2):
        _checkpoint(tmp_path, step)
    assert prune_checkpoints(tmp_path, keep=0) == [] and prune_checkpoints(tmp_path, keep=2) == []
    assert len(list((tmp_path / "checkpoints").iterdir())) == 2
