"""DivOPD's gradient audit (Tables 10 and 13) on constructed per-turn gradients."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.gradient_audit import COSINE, DROPPED_GRAD_NORM_SHARE, POOL_ROWS, PROJECTION, AuditTotals


def totals(gradients: list[list[float]], selected: list[bool], counted: list[bool]) -> dict[str, float]:
    acc = AuditTotals()
    for g, s, c in zip(gradients, selected, counted, strict=True):
        acc.add(torch.tensor(g), selected=s, counted=c)
    return acc.metrics()


def test_projection_and_cosine_of_the_selected_mean_against_the_pool_mean() -> None:
    # pool g = (1,0), (0,1), (1,1): G = (2/3, 2/3); the batch takes (1,1): G_hat = (1,1)
    got = totals([[1, 0], [0, 1], [1, 1]], [False, False, True], [True, True, True])
    assert got[PROJECTION] == pytest.approx((4 / 3) / (8 / 9))  # 1.5: the batch moves further along G
    assert got[COSINE] == pytest.approx(1.0)
    assert got[DROPPED_GRAD_NORM_SHARE] == pytest.approx(2 / (2 + math.sqrt(2)))
    assert got[POOL_ROWS] == 3


def test_a_batch_against_the_pool_direction_and_table_10s_scope() -> None:
    # the batch takes (-1, 0) out of (-1,0), (3,0), (0,5): G = (2/3, 5/3), G_hat = (-1, 0)
    got = totals([[-1, 0], [3, 0], [0, 5]], [True, False, False], [True, True, False])
    assert got[PROJECTION] == pytest.approx((-2 / 3) / (4 / 9 + 25 / 9))
    assert got[COSINE] == pytest.approx((-2 / 3) / math.sqrt(29 / 9))
    assert got[DROPPED_GRAD_NORM_SHARE] == pytest.approx(3 / 4)  # (0,5)'s rollout gave the batch nothing


def test_nothing_selected_gives_no_audit() -> None:
    assert totals([[1, 0]], [False], [True]) == {}
