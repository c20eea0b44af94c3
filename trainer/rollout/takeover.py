"""Teacher takeover of no-progress rollouts (DivOPD `+R`, OBJECTIVES.md section 5).

A turn makes *no progress* when its action is unparsable or not admissible, or repeats an action
or an observation of the last `patience` turns (so oscillating between two places is caught too).
Admissibility is checked only against a list of concrete actions (ALFWorld, ScienceWorld): a list
holding an action template with a `<placeholder>` (WebShop's `search[<your query>]`, Search-QA's
`<search> query </search>`) stands for free-text actions, so there only the repeat rules apply.
After `patience` such turns in a row the teacher acts for at most `takeover_turns` turns, then
hands back to the student. With `rewind` the session is
first restored to the snapshot of the state after the last turn that made progress (the snapshot
taken at the start of the first turn of the stall), so the teacher starts from a sane state.
Teacher turns carry `Turn.teacher = True`: never scored, gated out of every batch, never in the loss.
Recovery is a training-time aid only: evaluation never builds it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.rollout.matching import concrete_list

NO_PROGRESS_RULES = frozenset({"unparsable", "inadmissible", "repeat_action", "repeat_observation"})


@dataclass(frozen=True)
class RecoverySettings:
    """When and how long the teacher takes over."""

    patience: int = 3
    takeover_turns: int = 2
    rewind: bool = True
    no_progress: frozenset[str] = NO_PROGRESS_RULES
    """Which of `NO_PROGRESS_RULES` mark a turn as making no progress."""

    def __post_init__(self) -> None:
        if self.patience < 1 or self.takeover_turns < 1:
            raise ValueError("patience and takeover_turns must be >= 1")
        if not self.no_progress <= NO_PROGRESS_RULES:
            raise ValueError(f"unknown no-progress rules {sorted(self.no_progress - NO_PROGRESS_RULES)}")


def made_progress(
    action: str | None,
    observation: str,
    admissible: Sequence[str],
    recent_actions: Collection[str | None],
    recent_observations: Collection[str],
    rules: Collection[str] = NO_PROGRESS_RULES,
) -> bool:
    """Whether one turn made progress under `rules` (see the module docstring)."""
    if action is None:
        return "unparsable" not in rules
    if "inadmissible" in rules and action not in admissible and concrete_list(admissible):
        return False
    if "repeat_action" in rules and action in recent_actions:
        return False
    return not ("repeat_observation" in rules and observation in recent_observations)


@dataclass
class ProgressTracker:
    """Per-episode state of the no-progress detector and of an ongoing takeover."""

    settings: RecoverySettings
    stall: int = 0
    """Consecutive student turns without progress."""
    stall_start: int | None = None
    """Index (in the trajectory) of the first turn of the current stall."""
    teacher_left: int = 0
    """Teacher turns still to play in the current takeover."""
    takeovers: int = 0
    teacher_turns: int = 0
    recent_actions: deque[str | None] = field(default_factory=deque)
    recent_observations: deque[str] = field(default_factory=deque)

    def record(
        self, index: int, action: str | None, observation: str, admissible: Sequence[str], *, teacher: bool
    ) -> None:
        """Account for turn `index` after the environment answered it."""
        recent = (self.recent_actions, self.recent_observations)
        progressed = made_progress(action, observation, admissible, *recent, self.settings.no_progress)
        self.recent_actions.append(action)
        self.recent_observations.append(observation)
        while len(self.recent_actions) > self.settings.patience:
            self.recent_actions.popleft()
            self.recent_observations.popleft()
        if teacher:
            self.teacher_left -= 1
            self.teacher_turns += 1
            self.stall, self.stall_start = 0, None
            return
        if progressed:
            self.stall, self.stall_start = 0, None
            return
        if self.stall == 0:
            self.stall_start = index
        self.stall += 1

    def start_takeover(self) -> int | None:
        """If the student stalled for `patience` turns, begin a takeover; returns the turn index to rewind to."""
        if self.teacher_left > 0 or self.stall < self.settings.patience:
            return None
        self.teacher_left = self.settings.takeover_turns
        self.takeovers += 1
        start, self.stall, self.stall_start = self.stall_start, 0, None
        return start

    @property
    def teacher_acting(self) -> bool:
        """The next turn is the teacher's."""
        return self.teacher_left > 0


@dataclass
class Recovery:
    """What a rollout needs for takeover: its settings and the teacher's generation backend."""

    settings: RecoverySettings
    teacher: Any
    """A `GenerationBackend` over the frozen teacher (same tokenizer as the student)."""
