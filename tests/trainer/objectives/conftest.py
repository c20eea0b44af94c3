"""Builders of small TokenBatches for the objective tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from trainer.objectives import TokenBatch


def _tensor(values: Sequence[object] | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return values.to(dtype) if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)


def build_batch(
    loss_mask: Sequence[Sequence[int]],
    *,
    logp_old: Sequence[Sequence[float]] | None = None,
    logp_teacher: Sequence[Sequence[float]] | None = None,
    turn_ids: Sequence[Sequence[int]] | None = None,
    traj_ids: Sequence[int] | None = None,
    rewards: Sequence[float] | None = None,
    group_ids: Sequence[int] | None = None,
) -> TokenBatch:
    """A TokenBatch with every position attended; by default one turn and one trajectory per row."""
    mask = _tensor(loss_mask, torch.bool)
    rows, seq = mask.shape
    row_index = torch.arange(rows)[:, None].expand(rows, seq)
    traj = _tensor(traj_ids, torch.long) if traj_ids is not None else torch.arange(rows)
    num_traj = int(traj.max()) + 1
    return TokenBatch(
        input_ids=torch.arange(rows * seq).reshape(rows, seq) % 50,
        attention_mask=torch.ones(rows, seq, dtype=torch.bool),
        loss_mask=mask,
        logp_old=_tensor(logp_old, torch.float32) if logp_old is not None else torch.where(mask, -1.0, 0.0),
        logp_teacher=_tensor(logp_teacher, torch.float32) if logp_teacher is not None else None,
        turn_ids=_tensor(turn_ids, torch.long) if turn_ids is not None else torch.where(mask, row_index, -1),
        traj_ids=traj,
        rewards=_tensor(rewards, torch.float32) if rewards is not None else torch.zeros(num_traj),
        group_ids=_tensor(group_ids, torch.long) if group_ids is not None else torch.zeros(num_traj, dtype=torch.long),
    )


@pytest.fixture
def make_batch() -> Callable[..., TokenBatch]:
    """The `build_batch` builder."""
    return build_batch


@pytest.fixture
def canonical_batch() -> TokenBatch:
    """A mixed batch: 2 task groups x 2 trajectories, turn rows (multi- and single-turn), prompts and padding.

    Rows 0-1: trajectory 0 (2 turns); row 2: trajectory 1; rows 3-4: trajectory 2; row 5: trajectory 3,
    a `full`-context row holding two turns separated by an observation.
    """
    gen = torch.Generator().manual_seed(0)
    loss_mask = torch.tensor(
        [
            [0, 0, 1, 1, 1, 0, 0],
            [0, 0, 0, 1, 1, 1, 1],
            [0, 1, 1, 0, 0, 0, 0],
            [0, 0, 1, 1, 1, 1, 0],
            [0, 0, 0, 1, 0, 0, 0],
            [0, 1, 1, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    turn_ids = torch.tensor(
        [
            [-1, -1, 0, 0, 0, -1, -1],
            [-1, -1, -1, 1, 1, 1, 1],
            [-1, 2, 2, -1, -1, -1, -1],
            [-1, -1, 3, 3, 3, 3, -1],
            [-1, -1, -1, 4, -1, -1, -1],
            [-1, 5, 5, -1, -1, 6, 6],
        ]
    )
    logp_old = torch.where(loss_mask, -torch.rand(loss_mask.shape, generator=gen) * 3, 0.0)
    logp_teacher = torch.where(loss_mask, -torch.rand(loss_mask.shape, generator=gen) * 3, 0.0)
    return build_batch(
        loss_mask.tolist(),
        logp_old=logp_old.tolist(),
        logp_teacher=logp_teacher.tolist(),
        turn_ids=turn_ids.tolist(),
        traj_ids=[0, 0, 1, 2, 2, 3],
        rewards=[1.0, 0.0, 0.0, 0.0],
        group_ids=[0, 0, 1, 1],
    )
