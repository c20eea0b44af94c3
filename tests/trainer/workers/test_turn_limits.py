"""`rollout.max_turns`: training episodes stop there; held-out play (the worker's, `trainer eval`'s) does not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainer.config import TrainerConfig
from trainer.eval import evaluate
from trainer.rollout import SamplingSettings
from trainer.workers.rollout import RolloutWorker


def test_training_episodes_stop_at_their_limit_and_held_out_ones_play_the_environments(
    alfworld_server: str, alfworld_config: Callable[..., TrainerConfig]
) -> None:
    config = alfworld_config(alfworld_server, env={"max_turns": 4}, rollout={"max_turns": 2})
    sampling = SamplingSettings(max_new_tokens=8, temperature=1.0, seed=0)
    worker = RolloutWorker(config, alfworld_server)
    try:
        task = worker.task_ids("train", ["pick_and_place_simple"])[0]
        trained, _ = worker.run([(task, 0)], sampling, 2)
        held_out, _ = worker.run_held_out([(task, 0)], sampling, 2)
    finally:
        worker.close()
    assert [len(t.turns) for t in trained] == [2, 2]
    assert [len(t.turns) for t in held_out] == [4, 4]  # a random tiny policy wins no game in 4 turns
    assert evaluate(config, targets=[alfworld_server], task_ids=[task]).mean_turns == 4


def test_a_training_limit_above_the_environments_is_refused(alfworld_config: Callable[..., TrainerConfig]) -> None:
    with pytest.raises(ValueError, match=r"rollout.max_turns \(5\) limits training episodes within env.max_turns"):
        alfworld_config("localhost:1", env={"max_turns": 4}, rollout={"max_turns": 5})
