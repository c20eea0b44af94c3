"""`trainer.adamw`: every implementation computes the same AdamW update; `auto` fuses on the CPU only."""

from __future__ import annotations

import pytest
import torch

from trainer.adamw import make_adamw, resolve_impl


def _trained(impl: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50))
    optimizer = make_adamw(model.parameters(), lr=1e-2, weight_decay=0.01, impl=impl)  # type: ignore[arg-type]
    data = torch.randint(0, 50, (4, 8), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(model(data).flatten(0, 1), data.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


@pytest.mark.parametrize("impl", ["fused", "foreach", "auto"])
def test_every_implementation_takes_the_loops_steps(impl: str) -> None:
    for got, want in zip(_trained(impl), _trained("loop"), strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_auto_fuses_unsharded_cpu_weights_only() -> None:
    assert resolve_impl("auto", torch.device("cpu")) == "fused"
    assert resolve_impl("auto", torch.device("cpu"), sharded=True) == "default"
    assert resolve_impl("auto", torch.device("cuda")) == "default"
    assert resolve_impl("loop", torch.device("cpu")) == "loop"
    assert make_adamw([torch.nn.Parameter(torch.zeros(2))], lr=1.0).defaults["fused"] is True
