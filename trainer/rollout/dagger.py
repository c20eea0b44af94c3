"""DAgger (Ross, Gordon and Bagnell 2011): the states a policy visits, each labelled with the expert's action.

SFT on expert episodes only shows the model the expert's own states; once the model strays it meets states it
never saw and its errors compound. DAgger plays the model itself, asks the expert what it would do in every
state the model reached, and adds those (prompt, expert action) pairs to the SFT set.

The labels come from a replay: the policy's trajectory is played again in a fresh session of the same task and
seed, taking the policy's actions, and before each the server's expert (GetExpertActions) names its action from
that state. ALFWorld's observed expert updates its memory from whatever action was taken, so it answers from off
its own path too (envhub/envs/alfworld/observed_expert.py). The prompt of each pair is the one the policy was given
(`Turn.prompt_ids`), so the model learns from exactly the prompts it meets.
"""

from __future__ import annotations

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


def expert_labels(port: SessionPort, trajectory: Trajectory, *, max_turns: int, timeout: float = 30.0) -> Labelled:
    """Replay `trajectory` in a new session of its task and seed, labelling each turn's prompt with the expert's
    next action; stops where the expert has none (the game is won) or the replay diverges from the trajectory."""
    labelled = Labelled()
    view = port.start(trajectory.task_id, seed=trajectory.seed, max_steps=max_turns)
    try:
        for turn in trajectory.turns:
            plan = port.expert(view.session_id)
            if not plan:
                break
            if not turn.teacher:
                labelled.prompts.append(list(turn.prompt_ids))
                labelled.actions.append(plan[0])
                labelled.agreed += turn.action == plan[0]
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
    port: SessionPort, trajectories: Sequence[Trajectory], *, max_turns: int, threads: int = 8
) -> list[Labelled]:
    """`expert_labels` of every trajectory (in order), replayed concurrently."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda one: expert_labels(port, one, max_turns=max_turns), trajectories))


def labelled_examples(labelled: Sequence[Labelled], tokenizer: object) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, expert response ids + EOS) pairs for `trainer.sft.sft_train`."""
    encode = tokenizer.encode  # type: ignore[attr-defined]
    eos = tokenizer.eos_token_id  # type: ignore[attr-defined]
    return [
        (prompt, [*encode(action_text(action), add_special_tokens=False), eos])
        for one in labelled
        for prompt, action in zip(one.prompts, one.actions, strict=True)
    ]
