"""Token rows left-padded into one batch (generation, scoring and listed replies share the layout)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Left-pad token rows -> (input_ids, attention_mask, position_ids), each (B, L)."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)
