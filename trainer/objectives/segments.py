"""Vectorised reductions over segments (groups, trajectories, turns) identified by integer ids.

A *segment* is the set of elements that share an id. Ids may be arbitrary integers (not contiguous);
`segment_index` maps them to `0..K-1` once, and the other helpers reduce a flat `(M,)` tensor into
`(K,)` per-segment values without Python loops (the style of verl's core_algos, minus its loops).
"""

from __future__ import annotations

import torch


def segment_index(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Map ids `(M,)` to contiguous segment indices.

    Returns `(unique_ids (K,), inverse (M,))` with `unique_ids[inverse] == ids`; `unique_ids` is sorted.
    """
    unique_ids, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    return unique_ids, inverse


def segment_sum(values: torch.Tensor, inverse: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Sum of `values (M,)` per segment: `(K,)`."""
    out = torch.zeros(num_segments, dtype=values.dtype, device=values.device)
    return out.index_add(0, inverse, values)


def segment_count(inverse: torch.Tensor, num_segments: int, dtype: torch.dtype) -> torch.Tensor:
    """Number of elements per segment: `(K,)` in `dtype`."""
    return torch.bincount(inverse, minlength=num_segments).to(dtype)


def segment_mean(values: torch.Tensor, inverse: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Mean of `values (M,)` per segment: `(K,)`; an empty segment has mean 0."""
    total = segment_sum(values, inverse, num_segments)
    count = segment_count(inverse, num_segments, values.dtype)
    return total / count.clamp(min=1.0)


def segment_amin(values: torch.Tensor, inverse: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Minimum of `values (M,)` per segment: `(K,)` (empty segments: +inf)."""
    out = torch.full((num_segments,), float("inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, inverse, values, reduce="amin", include_self=True)


def segment_amax(values: torch.Tensor, inverse: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Maximum of `values (M,)` per segment: `(K,)` (empty segments: -inf)."""
    out = torch.full((num_segments,), float("-inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, inverse, values, reduce="amax", include_self=True)


def segment_minmax_normalise(
    values: torch.Tensor, inverse: torch.Tensor, num_segments: int, *, eps: float, degenerate: float
) -> torch.Tensor:
    """Min-max normalise `values (M,)` within each segment: `(v - min) / (max - min)`, `(M,)`.

    Where a segment's range `max - min` is below `eps` (one element, or all equal), every element of it
    gets `degenerate` instead.
    """
    lo = segment_amin(values, inverse, num_segments)[inverse]
    hi = segment_amax(values, inverse, num_segments)[inverse]
    span = hi - lo
    degenerate_mask = span < eps
    normalised = (values - lo) / torch.where(degenerate_mask, torch.ones_like(span), span)
    return torch.where(degenerate_mask, torch.full_like(values, degenerate), normalised)
