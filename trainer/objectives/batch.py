"""TokenBatch: the tensors every objective reads (the contract of docs/design/002-trainer.md).

A *row* is one student turn (prompt with history + response) or, in `full` context mode, a whole
trajectory whose response positions span several turns. All `(N, S)` tensors are aligned to
`input_ids` positions: `logp_old[i, j]` is the rollout log-prob of token `input_ids[i, j]`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from trainer.errors import BatchError
from trainer.objectives.listed import ListedTurns
from trainer.objectives.pbr import ConstraintBatch
from trainer.objectives.segments import segment_amax, segment_amin, segment_index
from trainer.objectives.states import TurnStates
from trainer.objectives.teacher_top import TeacherTop

# Log-probs recorded at sampling time may exceed 0 by rounding (bf16, fused kernels); anything beyond is a bug.
_LOGP_TOLERANCE = 1e-3


def _error(field: str, problem: str) -> BatchError:
    return BatchError(f"TokenBatch.{field}: {problem}", field=field)


@dataclass
class TokenBatch:
    """One training batch of N rows of S positions, from T trajectories.

    Constructing a TokenBatch validates it (see `validate`); use `dataclasses.replace` to derive one.
    """

    input_ids: torch.Tensor
    """(N, S) long: prompt + response token ids, right-padded."""
    attention_mask: torch.Tensor
    """(N, S) bool: real tokens (prompt and response)."""
    loss_mask: torch.Tensor
    """(N, S) bool: supervised student tokens only (a subset of `attention_mask`)."""
    logp_old: torch.Tensor
    """(N, S) float: rollout log-prob of the token at that position; 0 where not supervised."""
    logp_teacher: torch.Tensor | None
    """(N, S) float or None: the frozen teacher's log-prob of the same token (OPD/ATOD need it)."""
    turn_ids: torch.Tensor
    """(N, S) long: batch-unique id of the turn each token belongs to, -1 elsewhere."""
    traj_ids: torch.Tensor
    """(N,) long: trajectory index of each row, in 0..T-1."""
    rewards: torch.Tensor
    """(T,) float: outcome reward of each trajectory."""
    group_ids: torch.Tensor
    """(T,) long: task group of each trajectory (GRPO normalises within a group)."""
    constraints: ConstraintBatch | None = None
    """PBR constraints located in the rows (None: no protocol rule fired)."""
    states: TurnStates | None = None
    """Where each supervised turn sits among its group's states (the turn credits read it; None: outcome only)."""
    listed: ListedTurns | None = None
    """The supervised turns drawn among listed replies, teacher-scored (reply-level OPD, `kl_over: replies`)."""
    teacher_top: TeacherTop | None = None
    """The teacher's most likely tokens predicting each supervised position (`token_kl: forward`)."""

    def __post_init__(self) -> None:
        self.validate()

    @property
    def num_rows(self) -> int:
        """N, the number of rows."""
        return int(self.input_ids.shape[0])

    @property
    def num_trajectories(self) -> int:
        """T, the number of trajectories."""
        return int(self.rewards.shape[0])

    def to(self, device: torch.device | str) -> TokenBatch:
        """A copy with every tensor on `device`."""
        moved: dict[str, Any] = {
            f.name: (
                v.to(device)
                if isinstance(v := getattr(self, f.name), torch.Tensor | ConstraintBatch | TurnStates | TeacherTop)
                else v
            )
            for f in dataclasses.fields(self)
        }
        return TokenBatch(**moved)

    def rows(self, part: slice) -> TokenBatch:
        """The rows `part` as a batch of their own (a learner mini-batch): trajectories, rewards, groups and states
        kept whole, constraints renumbered, the listed turns those rows supervise."""
        listed = None
        if self.listed is not None:
            listed = self.listed.having(set(self.turn_ids[part][self.loss_mask[part]].tolist()))
        row_fields = ("input_ids", "attention_mask", "loss_mask", "logp_old", "logp_teacher", "turn_ids", "traj_ids")
        sliced: dict[str, Any] = {name: None if (v := getattr(self, name)) is None else v[part] for name in row_fields}
        constraints = self.constraints.in_rows(part) if self.constraints is not None else None
        top = self.teacher_top.rows(part) if self.teacher_top is not None else None
        return dataclasses.replace(self, **sliced, constraints=constraints, listed=listed, teacher_top=top)

    def validate(self) -> None:
        """Check shapes, dtypes, devices and the cross-field invariants; raise `BatchError` if wrong.

        Invariants: `loss_mask` implies `attention_mask`; every supervised token has a turn id >= 0 and
        finite log-probs <= 0; each turn lies in one trajectory; `traj_ids` index `rewards`.
        """
        self._check_shapes_and_dtypes()
        device = self.input_ids.device
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor) and value.device != device:
                raise _error(f.name, f"on {value.device}, but input_ids is on {device}; move the batch with .to()")
        if bool((self.loss_mask & ~self.attention_mask).any()):
            raise _error("loss_mask", "marks positions that attention_mask excludes (padding cannot be supervised)")
        if bool((self.turn_ids[self.loss_mask] < 0).any()):
            raise _error(
                "turn_ids", "a supervised token (loss_mask) has turn id < 0; give every response token its turn"
            )
        self._check_logp("logp_old", self.logp_old)
        if self.logp_teacher is not None:
            self._check_logp("logp_teacher", self.logp_teacher)
        num_traj = self.num_trajectories
        if int(self.traj_ids.min()) < 0 or int(self.traj_ids.max()) >= num_traj:
            raise _error("traj_ids", f"values must lie in 0..{num_traj - 1} (one per trajectory in rewards)")
        self._check_turns_in_one_trajectory()
        self._check_constraints()
        if self.states is not None and self.states.leaf.numel() != num_traj:
            raise _error("states", f"{self.states.leaf.numel()} leaves for {num_traj} trajectories")
        if self.listed is not None and not set(self.listed.turn_ids) <= set(self.turn_ids[self.loss_mask].tolist()):
            raise _error("listed", "names a turn id that no supervised token carries")
        self._check_teacher_top()

    def _check_teacher_top(self) -> None:
        top = self.teacher_top
        if top is None:
            return
        rows, seq = self.input_ids.shape
        shapes = (tuple(top.scored.shape), tuple(top.ids.shape[:2]), tuple(top.ids.shape), tuple(top.logp.shape))
        if shapes[0] != (rows, seq) or shapes[1] != (rows, seq) or shapes[2] != shapes[3]:
            raise _error("teacher_top", f"expected (N, S, k) ids and logp and (N, S) scored, N, S = {rows}, {seq}")
        if bool((top.scored & ~self.loss_mask).any()):
            raise _error("teacher_top", "scored where no token is supervised (loss_mask)")
        scored = top.logp[top.scored]
        if not bool(torch.isfinite(scored).all()) or (scored.numel() and float(scored.max()) > _LOGP_TOLERANCE):
            raise _error("teacher_top", "a scored position's log-probs are not finite log-probs <= 0")

    def _check_constraints(self) -> None:
        c = self.constraints
        if c is None or c.count == 0:
            return
        rows, seq = self.input_ids.shape
        if int(c.rows.min()) < 0 or int(c.rows.max()) >= rows:
            raise _error("constraints", f"rows must lie in 0..{rows - 1}")
        if int(c.positions.min()) < 1 or int(c.positions.max()) >= seq:
            raise _error("constraints", f"positions must lie in 1..{seq - 1} (a constraint needs a prefix)")
        if not bool(self.attention_mask[c.rows, c.positions].all()):
            raise _error("constraints", "a constraint sits on padding")

    def _check_shapes_and_dtypes(self) -> None:
        for name in ("input_ids", "rewards"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor):
                raise _error(name, f"expected a torch.Tensor, got {type(value).__name__}")
        if self.input_ids.dim() != 2 or self.input_ids.shape[0] == 0:
            raise _error("input_ids", f"expected shape (N, S) with N >= 1, got {tuple(self.input_ids.shape)}")
        if self.rewards.dim() != 1 or self.rewards.shape[0] == 0:
            raise _error("rewards", f"expected shape (T,) with T >= 1, got {tuple(self.rewards.shape)}")
        rows, seq = self.input_ids.shape
        num_traj = self.rewards.shape[0]
        expected: dict[str, tuple[tuple[int, ...], str]] = {
            "input_ids": ((rows, seq), "long"),
            "attention_mask": ((rows, seq), "bool"),
            "loss_mask": ((rows, seq), "bool"),
            "logp_old": ((rows, seq), "float"),
            "logp_teacher": ((rows, seq), "float"),
            "turn_ids": ((rows, seq), "long"),
            "traj_ids": ((rows,), "long"),
            "rewards": ((num_traj,), "float"),
            "group_ids": ((num_traj,), "long"),
        }
        for name, (shape, kind) in expected.items():
            value = getattr(self, name)
            if value is None and name == "logp_teacher":
                continue
            if not isinstance(value, torch.Tensor):
                raise _error(name, f"expected a torch.Tensor, got {type(value).__name__}")
            if tuple(value.shape) != shape:
                raise _error(
                    name, f"expected shape {shape} (N, S from input_ids, T from rewards), got {tuple(value.shape)}"
                )
            if not _has_kind(value, kind):
                raise _error(name, f"expected a {kind} tensor, got {value.dtype}")

    def _check_logp(self, name: str, logp: torch.Tensor) -> None:
        supervised = logp[self.loss_mask]
        if not bool(torch.isfinite(supervised).all()):
            raise _error(name, "non-finite log-prob on a supervised token")
        if supervised.numel() and float(supervised.max()) > _LOGP_TOLERANCE:
            raise _error(name, f"log-prob {float(supervised.max()):.4g} > 0 on a supervised token (not a log-prob?)")

    def _check_turns_in_one_trajectory(self) -> None:
        turn = self.turn_ids[self.loss_mask]
        if turn.numel() == 0:
            return
        traj = self.traj_ids[:, None].expand_as(self.turn_ids)[self.loss_mask].double()
        unique_turns, inverse = segment_index(turn)
        lo = segment_amin(traj, inverse, int(unique_turns.numel()))
        hi = segment_amax(traj, inverse, int(unique_turns.numel()))
        if bool((lo != hi).any()):
            bad = int(unique_turns[lo != hi][0])
            raise _error("turn_ids", f"turn {bad} spans rows of different trajectories; turn ids must be batch-unique")


def _has_kind(value: torch.Tensor, kind: str) -> bool:
    if kind == "float":
        return value.is_floating_point()
    if kind == "bool":
        return value.dtype == torch.bool
    return value.dtype == torch.long
