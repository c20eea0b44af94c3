"""Batch composers: trajectories -> `TokenBatch` rows (one row = one turn in history mode)."""

from trainer.batching.sync_groups import SyncGroups
from trainer.batching.teacher import attach_teacher_logprobs

__all__ = ["SyncGroups", "attach_teacher_logprobs"]
