"""Fork selection on hand-built score arrays (paper 002 section 3 / Appendix D)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from trainer.branching.select import (
    ForkConfig,
    flatten_turns,
    forward_disagreement,
    pick_turns,
    position_scores,
    rank_normalise,
    select_agent_forks,
    select_forks,
    select_math_forks,
    topk_entropy,
    turn_score,
)
from trainer.errors import TrainerError


def test_topk_entropy_renormalises_over_the_given_tokens() -> None:
    # Two equal tokens whose raw mass is only 0.2: renormalised they are a fair coin.
    coin = [math.log(0.1), math.log(0.1)]
    certain = [0.0, -50.0]
    four = [math.log(0.25)] * 4
    u = topk_entropy([coin, certain, four, []])
    assert u == pytest.approx([math.log(2), 0.0, math.log(4), 0.0], abs=1e-12)


def test_forward_disagreement_sums_a_forward_window_of_floored_log_ratios() -> None:
    old = [-1.0, -2.0, -0.5, -30.0]
    teacher = [-2.0, -1.0, -0.5, -3.0]
    # -delta = max(old, -10) - max(teacher, -10) = [1, -1, 0, -7]
    assert forward_disagreement(old, teacher, window=2) == pytest.approx([0.0, -1.0, -7.0, -7.0])
    assert forward_disagreement(old, teacher, window=128) == pytest.approx([-7.0, -8.0, -7.0, -7.0])
    assert forward_disagreement(old, teacher, window=1, logp_floor=-100.0)[3] == pytest.approx(-27.0)


def test_rank_normalise_maps_ranks_to_unit_interval_with_tied_mean_ranks() -> None:
    assert rank_normalise([3.0, 1.0, 2.0]) == pytest.approx([1.0, 0.0, 0.5])
    assert rank_normalise([5.0, 5.0, 1.0, 9.0]) == pytest.approx([0.5, 0.5, 0.0, 1.0])
    assert rank_normalise([7.0]) == pytest.approx([0.5])
    assert rank_normalise([]).size == 0


def test_position_scores_mix_the_two_ranks_with_alpha() -> None:
    u = np.array([0.0, 1.0, 2.0])
    d = np.array([2.0, 1.0, 0.0])
    assert position_scores(u, d, alpha=1.0) == pytest.approx([0.0, 0.5, 1.0])
    assert position_scores(u, d, alpha=0.0) == pytest.approx([1.0, 0.5, 0.0])
    assert position_scores(u, d, alpha=0.5) == pytest.approx([0.5, 0.5, 0.5])


def test_turn_score_is_the_mean_of_the_top_eta_share() -> None:
    scores = np.array([0.1, 0.9, 0.5, 0.7, 0.3, 0.2, 0.0, 0.4, 0.6, 0.8])
    assert turn_score(scores, eta=0.2) == pytest.approx((0.9 + 0.8) / 2)
    assert turn_score(np.array([0.3, 0.1]), eta=0.2) == pytest.approx(0.3)  # at least one
    assert turn_score(np.array([]), eta=0.2) == -math.inf


def test_pick_turns_keeps_the_gap_and_the_budget() -> None:
    scores = [0.9, 0.8, 0.1, 0.7, 0.6, -math.inf, 0.5]
    assert pick_turns(scores, limit=3, min_gap=1) == [0, 3, 6]  # 1 is next to 0; 4 next to 3
    assert pick_turns(scores, limit=3, min_gap=0) == [0, 1, 3]
    assert pick_turns(scores, limit=2, min_gap=2) == [0, 3]
    assert pick_turns([-math.inf, -math.inf], limit=3, min_gap=1) == []


def _agent_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # Three turns of 20 tokens; the last 4 tokens of each turn are past the 16-token opening.
    turns = np.repeat(np.arange(3), 20)
    offsets = np.tile(np.arange(20), 3)
    scores = np.zeros(60)
    scores[0:16] = 0.1  # turn 0: flat, low
    scores[16:20] = 5.0  # ...but high after its opening: must not count
    scores[20 + 4] = 0.9  # turn 1: three clear best eligible positions 4, 7, 9
    scores[20 + 7] = 0.8
    scores[20 + 9] = 0.85
    scores[40:56] = 0.3  # turn 2: middling
    entropy = np.ones(60)
    return scores, entropy, turns, offsets


def test_agent_forks_pick_turns_by_top_eta_score_and_draw_among_three_best() -> None:
    scores, entropy, turns, offsets = _agent_arrays()
    config = ForkConfig(num_forks=2, min_turn_gap=0)
    seen: set[int] = set()
    for seed in range(60):
        forks = select_agent_forks(scores, entropy, turns, offsets, config, random.Random(seed))
        assert [f.turn for f in forks] == [1, 2]
        assert forks[0].offset in (4, 7, 9)
        assert forks[1].offset in (0, 1, 2)  # ties broken by position
        seen.add(forks[0].offset)
    assert seen == {4, 7, 9}  # uniform among the three: all appear


def test_agent_eligibility_excludes_late_and_low_entropy_positions() -> None:
    scores, entropy, turns, offsets = _agent_arrays()
    entropy[20 + 4] = 0.0
    entropy[20 + 7] = 0.0
    entropy[20 + 9] = 0.0
    config = ForkConfig(num_forks=1, min_entropy=0.5)
    forks = select_agent_forks(scores, entropy, turns, offsets, config, random.Random(0))
    assert [f.turn for f in forks] == [2]  # turn 1's best positions are no longer eligible
    short = ForkConfig(num_forks=3, turn_open_tokens=2, min_turn_gap=0)
    for fork in select_agent_forks(scores, np.ones(60), turns, offsets, short, random.Random(0)):
        assert fork.offset < 2


def test_agent_forks_respect_the_turn_gap() -> None:
    scores, entropy, turns, offsets = _agent_arrays()
    forks = select_agent_forks(scores, entropy, turns, offsets, ForkConfig(num_forks=3), random.Random(0))
    assert [f.turn for f in forks] == [1]  # 0 and 2 are adjacent to 1


def test_random_placement_draws_eligible_positions_of_distinct_gapped_turns() -> None:
    scores, entropy, turns, offsets = _agent_arrays()
    config = ForkConfig(num_forks=2, min_turn_gap=0, placement="random")
    offsets_seen = set()
    for seed in range(40):
        forks = select_agent_forks(scores, entropy, turns, offsets, config, random.Random(seed))
        assert len(forks) == 2 and forks[0].turn < forks[1].turn
        assert all(f.offset < 16 and math.isnan(f.score) for f in forks)
        offsets_seen |= {f.offset for f in forks}
    assert len(offsets_seen) > 5


def test_math_rule_takes_top_b_positions_above_the_entropy_floor() -> None:
    scores = np.array([0.9, 0.1, 0.8, 0.7, 0.95, 0.2])
    entropy = np.array([1.0, 1.0, 0.2, 1.0, 0.6, 1.0])
    config = ForkConfig(num_forks=3, mode="math", min_entropy=0.5)
    assert select_math_forks(scores, entropy, config, random.Random(0)) == [0, 3, 4]


def test_select_forks_end_to_end_on_flattened_turns() -> None:
    flat_top = [0.0, -40.0]  # entropy 0
    split_top = [math.log(0.5), math.log(0.5)]  # entropy log 2
    turn0 = ([-0.1] * 4, [-0.1] * 4, [flat_top] * 4)
    # Turn 1: the student is unsure and the teacher disagrees from position 1 on.
    turn1 = ([-0.1, -0.7, -0.7, -0.7], [-0.1, -5.0, -5.0, -5.0], [flat_top, split_top, split_top, flat_top])
    main = flatten_turns([turn0, turn1])
    assert list(main.turns) == [0] * 4 + [1] * 4 and list(main.offsets) == [0, 1, 2, 3] * 2
    forks = select_forks(main, ForkConfig(num_forks=1, candidates_per_turn=1), random.Random(0))
    assert [(f.turn, f.offset) for f in forks] == [(1, 1)]
    assert select_forks(flatten_turns([]), ForkConfig(), random.Random(0)) == []
    with pytest.raises(ValueError, match="differ in length"):
        flatten_turns([([-0.1], [-0.1, -0.2], [flat_top])])


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(TrainerError, match="alpha"):
        ForkConfig(alpha=1.5)
    with pytest.raises(TrainerError, match="placement"):
        ForkConfig(placement="everywhere")  # type: ignore[arg-type]
