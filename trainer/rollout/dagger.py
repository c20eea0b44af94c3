"""DAgger (Ross, Gordon and Bagnell 2011): the states a policy visits, each labelled with the expert's action.

SFT on expert episodes only shows the model the expert's own states; once the model strays it meets states it
never saw and its errors compound. DAgger plays the model itself, asks the expert what it would do in every
state the model reached, and adds those (prompt, expert action) pairs to the SFT set.

The labels come from a replay: the policy's trajectory is played again in a fresh session of the same task and
seed, taking the policy's actions, and before each the server's expert (GetExpertActions) names its action from
that state. ALFWorld's observed expert updates its memory from whatever action was taken, so it answers from off
its own path too (envhub/envs/alfworld/observed_expert.py). The prompt of each pair is the one the policy was given
(`Turn.prompt_ids`), so the model learns from exactly the prompts it meets.

A policy caught in a loop (a `go to` the receptacle it is at, a `take` of an object that is not there, repeated after
"Nothing happens.") gives one label per turn of the same state; `labels_per_state` keeps at most that many labels of
each distinct state of an episode (the observation the policy acted on and the expert's action), so loops do not
dominate the aggregate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from envhub.client import SessionPort
from trainer.rollout.expert import action_text
from trainer.rollout.types import Trajectory


@dataclass
class Labelled:
    """The expert's labels along one policy trajectory."""

    prompts: list[list[int]] = field(default_factory=list)
    """The prompt ids the policy saw at each labelled turn."""
    actions: list[str] = field(default_factory=list)
    """The expert's action at each of those turns."""
    agreed: int = 0
    """Turns where the policy's action was the expert's."""
    diverged: bool = False
    """The replay's observations stopped matching the trajectory's (labelling stopped there)."""
    repeats: int = 0
    """Policy turns left unlabelled: their state already had `labels_per_state` labels."""


def expert_labels(
    port: SessionPort, trajectory: Trajectory, *, max_turns: int, labels_per_state: int = 0, timeout: float = 30.0
) -> Labelled:
    """Replay `trajectory` in a new session of its task and seed, labelling each turn's prompt with the expert's
    next action; stops where the expert has none (the game is won) or the replay diverges from the trajectory.
    `labels_per_state` > 0 labels each distinct (observation, expert action) at most that many times."""
    labelled = Labelled()
    seen: Counter[tuple[str, str]] = Counter()
    view = port.start(trajectory.task_id, seed=trajectory.seed, max_steps=max_turns)
    try:
        for turn in trajectory.turns:
            plan = port.expert(view.session_id)
            if not plan:
                break
            if not turn.teacher:
                state = (view.text, plan[0])
                seen[state] += 1
                labelled.agreed += turn.action == plan[0]
                if labels_per_state and seen[state] > labels_per_state:
                    labelled.repeats += 1
                else:
                    labelled.prompts.append(list(turn.prompt_ids))
                    labelled.actions.append(plan[0])
            if turn.action is None:
                continue  # an invalid turn: the rollout did not step the environment either
            view = port.step(view.session_id, turn.action, timeout=timeout)
            if view.text != turn.observation:
                labelled.diverged = True
                break
            if view.won or view.terminated or view.truncated:
                break
    finally:
        port.end(view.session_id)
    return labelled


def label_all(
    port: SessionPort,
    trajectories: Sequence[Trajectory],
    *,
    max_turns: int,
    labels_per_state: int = 0,
    threads: int = 8,
) -> list[Labelled]:
    """`expert_labels` of every trajectory (in order), replayed concurrently."""

    def label(one: Trajectory) -> Labelled:
        return expert_labels(port, one, max_turns=max_turns, labels_per_state=labels_per_state)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(label, trajectories))


def labelled_examples(
    labelled: Sequence[Labelled], tokenizer: object, spaced: bool = False
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, expert response ids + EOS) pairs for `trainer.sft.sft_train` (`spaced`: `action_text`'s)."""
    encode = tokenizer.encode  # type: ignore[attr-defined]
    eos = tokenizer.eos_token_id  # type: ignore[attr-defined]
    return [
        (prompt, [*encode(action_text(action, spaced), add_special_tokens=False), eos])
        for one in labelled
        for prompt, action in zip(one.prompts, one.actions, strict=True)
    ]
