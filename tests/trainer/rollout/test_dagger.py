"""DAgger's labels (trainer/rollout/dagger.py) on a real ALFWorld server: each turn a policy played is labelled with
the expert's action from the state that policy reached, against the prompt the policy saw."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainer.config import TrainerConfig
from trainer.models.loading import load_tokenizer
from trainer.rollout import SamplingSettings
from trainer.rollout.dagger import expert_labels, label_all, labelled_examples
from trainer.rollout.types import Trajectory, Turn
from trainer.workers import RolloutWorker

TURNS = 4


def config_for(build: Callable[..., TrainerConfig], server: str) -> TrainerConfig:
    return build(server, env={"max_turns": TURNS, "options": {"expert_order": "listed"}})


def expert_trajectory(worker: RolloutWorker, task_id: str, loop: str = "") -> Trajectory:
    """A trajectory whose actions are the expert's own, or `loop` every turn (prompts: the turn's index)."""
    trajectory = Trajectory(task_id, group=0, seed=0)
    view = worker.port.start(task_id, seed=0, max_steps=TURNS)
    while len(trajectory.turns) < TURNS and (plan := worker.port.expert(view.session_id)):
        action = loop or plan[0]
        view = worker.port.step(view.session_id, action)
        trajectory.turns.append(Turn([len(trajectory.turns)], [], [], action, action, view.text))
        if view.won:
            break
    worker.port.end(view.session_id)
    return trajectory


@pytest.mark.slow
def test_the_policys_turns_are_labelled_with_the_experts_action_from_its_state(
    alfworld_server: str, alfworld_config: Callable[..., TrainerConfig]
) -> None:
    worker = RolloutWorker(config_for(alfworld_config, alfworld_server), alfworld_server)
    try:
        ids = worker.task_ids("train", ["pick_and_place_simple"])[:2]
        played, _ = worker.run([(i, 0) for i in ids], SamplingSettings(max_new_tokens=8, temperature=1.0, seed=0), 1)
        labelled = label_all(worker.port, played, max_turns=TURNS)
        for trajectory, one in zip(played, labelled, strict=True):
            assert not one.diverged
            assert one.prompts == [turn.prompt_ids for turn in trajectory.turns]  # a random policy does not win
            assert all(a in turn.admissible for turn, a in zip(trajectory.turns, one.actions, strict=True))
            view = worker.port.start(trajectory.task_id, seed=0, max_steps=TURNS)  # the last turn's state, afresh
            for turn in trajectory.turns[:-1]:
                if turn.action is not None:
                    view = worker.port.step(view.session_id, turn.action)
            assert one.actions[-1] == worker.port.expert(view.session_id)[0]
            worker.port.end(view.session_id)
        expert = expert_trajectory(worker, ids[0])
        own = expert_labels(worker.port, expert, max_turns=TURNS)
        assert own.actions == [turn.action for turn in expert.turns] and own.agreed == len(expert.turns) > 1
        expert.turns[0].observation = "not what the game said"
        cut = expert_labels(worker.port, expert, max_turns=TURNS)
        assert cut.diverged and cut.actions == own.actions[:1]
    finally:
        worker.close()
    tokenizer = load_tokenizer(alfworld_config(alfworld_server).models.student)
    examples = labelled_examples([own], tokenizer)
    assert [prompt for prompt, _ in examples] == own.prompts
    assert tokenizer.decode(examples[0][1][:-1]) == f"<action>{own.actions[0]}</action>"
    assert all(response[-1] == tokenizer.eos_token_id for _, response in examples)


@pytest.mark.slow
def test_a_loop_is_labelled_once_per_state_under_labels_per_state(
    alfworld_server: str, alfworld_config: Callable[..., TrainerConfig]
) -> None:
    worker = RolloutWorker(config_for(alfworld_config, alfworld_server), alfworld_server)
    try:
        task = worker.task_ids("train", ["pick_and_place_simple"])[0]
        looping = expert_trajectory(worker, task, loop="look")  # the intro, then the same room TURNS - 1 times
        every = expert_labels(worker.port, looping, max_turns=TURNS)
        capped = expert_labels(worker.port, looping, max_turns=TURNS, labels_per_state=1)
    finally:
        worker.close()
    assert len(looping.turns) == TURNS and len({turn.observation for turn in looping.turns}) == 1
    assert len(set(every.actions)) == 1 and every.prompts == [[0], [1], [2], [3]] and every.repeats == 0
    assert capped.prompts == [[0], [1]] and capped.actions == every.actions[:2] and capped.repeats == TURNS - 2
    assert capped.agreed == every.agreed
