"""The AdamW that the learner and SFT step with: which of torch's implementations (docs/design/033).

torch's default for CPU tensors is the single-tensor loop (its `foreach` kernels are for accelerators): about ten
elementwise passes per tensor, each allocating a temporary of that tensor's size (SmolLM2's embedding: 113 MB).
`fused` steps each tensor in one kernel pass with no temporaries; `foreach` steps the tensors as lists, with
temporaries of all of them at once. All compute AdamW.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch

AdamwImpl = Literal["auto", "fused", "foreach", "loop"]
FLAGS: dict[str, dict[str, bool]] = {
    "fused": {"fused": True},
    "foreach": {"foreach": True},
    "loop": {"foreach": False},
    "default": {},
}
"""torch.optim.AdamW's keyword arguments per implementation (`default`: torch's choice)."""


def resolve_impl(impl: AdamwImpl, device: torch.device, sharded: bool = False) -> str:
    """`auto`: `fused` for unsharded weights on the CPU, else torch's default (the GPU and FSDP paths unchanged)."""
    if impl != "auto":
        return impl
    return "fused" if device.type == "cpu" and not sharded else "default"


def make_adamw(
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    weight_decay: float = 0.0,
    impl: AdamwImpl = "auto",
    device: torch.device | str = "cpu",
    sharded: bool = False,
) -> torch.optim.AdamW:
    """AdamW over `params` in implementation `impl` (`resolve_impl`)."""
    flags = FLAGS[resolve_impl(impl, torch.device(device), sharded)]
    return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, **flags)
