"""TokenBatch validation: every broken invariant is refused with a message naming the field."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

from trainer.errors import BatchError
from trainer.objectives import TokenBatch


def _replace_fails(batch: TokenBatch, field: str, **changes: Any) -> BatchError:
    with pytest.raises(BatchError) as info:
        dataclasses.replace(batch, **changes)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.reason == "INVALID_TOKEN_BATCH"
    assert err.field == field
    assert f"TokenBatch.{field}" in err.message
    return err


def test_valid_batch_properties(canonical_batch: TokenBatch) -> None:
    assert canonical_batch.num_rows == 6
    assert canonical_batch.num_trajectories == 4


def test_to_device_copies_every_tensor(canonical_batch: TokenBatch) -> None:
    moved = canonical_batch.to("cpu")
    assert moved is not canonical_batch
    for f in dataclasses.fields(TokenBatch):
        if f.name in ("constraints", "states", "listed", "teacher_top"):
            assert getattr(moved, f.name) is getattr(canonical_batch, f.name) is None
            continue
        assert torch.equal(getattr(moved, f.name), getattr(canonical_batch, f.name))


def test_teacher_logprobs_are_optional(canonical_batch: TokenBatch) -> None:
    assert dataclasses.replace(canonical_batch, logp_teacher=None).logp_teacher is None


@pytest.mark.parametrize(
    ("field", "make_value", "reported"),
    [
        # input_ids defines N and S, so a shorter one shows up as a mismatch of the next (N, S) tensor.
        ("input_ids", lambda b: b.input_ids[:, :-1], "attention_mask"),
        ("input_ids", lambda b: b.input_ids[0], "input_ids"),
        ("input_ids", lambda b: b.input_ids.float(), "input_ids"),
        ("attention_mask", lambda b: b.attention_mask.long(), "attention_mask"),
        ("loss_mask", lambda b: b.loss_mask[:-1], "loss_mask"),
        ("logp_old", lambda b: b.logp_old.long(), "logp_old"),
        ("logp_teacher", lambda b: b.logp_teacher[:, :3], "logp_teacher"),
        ("turn_ids", lambda b: b.turn_ids.float(), "turn_ids"),
        ("traj_ids", lambda b: b.traj_ids[:-1], "traj_ids"),
        ("rewards", lambda b: b.rewards[None], "rewards"),
        ("rewards", lambda b: b.rewards.long(), "rewards"),
        ("group_ids", lambda b: b.group_ids[:-1], "group_ids"),
        ("group_ids", lambda b: b.group_ids.tolist(), "group_ids"),
    ],
)
def test_wrong_shape_or_dtype_is_refused(
    canonical_batch: TokenBatch, field: str, make_value: Callable[[TokenBatch], object], reported: str
) -> None:
    _replace_fails(canonical_batch, reported, **{field: make_value(canonical_batch)})


def test_loss_mask_outside_attention_is_refused(canonical_batch: TokenBatch) -> None:
    attention = canonical_batch.attention_mask.clone()
    attention[0, 2] = False
    _replace_fails(canonical_batch, "loss_mask", attention_mask=attention)


def test_supervised_token_without_turn_is_refused(canonical_batch: TokenBatch) -> None:
    turns = canonical_batch.turn_ids.clone()
    turns[0, 3] = -1
    _replace_fails(canonical_batch, "turn_ids", turn_ids=turns)


def test_turn_spanning_two_trajectories_is_refused(canonical_batch: TokenBatch) -> None:
    turns = canonical_batch.turn_ids.clone()
    turns[2, 1:3] = 0  # row 2 is trajectory 1, turn 0 lives in trajectory 0
    err = _replace_fails(canonical_batch, "turn_ids", turn_ids=turns)
    assert "turn 0" in err.message


def test_traj_ids_out_of_range_is_refused(canonical_batch: TokenBatch) -> None:
    _replace_fails(canonical_batch, "traj_ids", traj_ids=torch.tensor([0, 0, 1, 2, 2, 4]))


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), 0.5])
def test_bad_logprob_on_supervised_token_is_refused(canonical_batch: TokenBatch, bad: float) -> None:
    for field in ("logp_old", "logp_teacher"):
        values = getattr(canonical_batch, field).clone()
        values[1, 4] = bad
        _replace_fails(canonical_batch, field, **{field: values})


def test_anything_goes_at_unsupervised_positions(canonical_batch: TokenBatch) -> None:
    logp_old = canonical_batch.logp_old.clone()
    logp_old[~canonical_batch.loss_mask] = float("nan")
    logp_teacher = canonical_batch.logp_teacher.clone()  # type: ignore[union-attr]
    logp_teacher[~canonical_batch.loss_mask] = 7.0
    dataclasses.replace(canonical_batch, logp_old=logp_old, logp_teacher=logp_teacher)
