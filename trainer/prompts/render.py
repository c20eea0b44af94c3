"""Render an episode's state into the user message of the next turn.

The environment's action format (`envhub.client.formats`, shipped with the environment) gives the
`atod` style's template and history text; `compact` is the trainer's short variant for tiny models.
`history` mode re-renders the whole prompt every turn with the last `history_length`
(observation, action) pairs; `full` mode sends the first prompt once and then only a short
follow-up per turn (the earlier turns stay in the chat context).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envhub.client.formats import ActionFormat, action_format
from trainer.prompts.templates import COMPACT, COMPACT_FOLLOW_UP, FULL_FOLLOW_UP, reply_hint


@dataclass(frozen=True)
class PastStep:
    """One finished turn as the prompt shows it."""

    observation: str
    """Observation the agent acted on."""
    action: str
    """Action it took (for an invalid turn: the raw response, shortened)."""


@dataclass(frozen=True)
class PromptState:
    """Everything the prompt of one turn may show."""

    task_description: str
    observation: str
    admissible: Sequence[str]
    past: Sequence[PastStep]
    """Every earlier turn of the episode, oldest first."""


class PromptRenderer:
    """Turns a `PromptState` into prompt text for one environment (its action format), style and context mode."""

    def __init__(
        self,
        env_name: str,
        *,
        style: str = "atod",
        context: str = "history",
        history_length: int = 2,
        show_admissible: bool = True,
        lowercase_observation: bool = False,
    ) -> None:
        try:
            self.format: ActionFormat = action_format(env_name)
        except LookupError as exc:
            raise ValueError(f"no ATOD template for {env_name!r}: {exc}") from exc
        self.env_name = env_name
        self.style = style
        self.context = context
        self.history_length = history_length
        self.show_admissible = show_admissible
        self.lowercase_observation = lowercase_observation

    def render(self, state: PromptState, history: int | None = None) -> str:
        """The user message of the turn at `state` (the follow-up message in `full` mode after turn 0).

        `history` shows at most that many recent steps (fewer than `history_length` when the prompt
        must shrink); step numbers still count every earlier turn.
        """
        step = len(state.past)
        observation = state.observation.lower() if self.lowercase_observation else state.observation
        admissible = self._admissible(state.admissible)
        if self.context == "full" and step > 0:
            follow_up = COMPACT_FOLLOW_UP if self.style == "compact" else FULL_FOLLOW_UP
            return follow_up.format(
                current_step=step + 1, current_observation=observation, admissible_actions=admissible
            )
        length = self.history_length if history is None else min(history, self.history_length)
        shown = list(state.past)[-length:] if self.context == "history" and length else []
        template = COMPACT if self.style == "compact" else self.format.template
        return template.format(
            task_description=state.task_description.strip().rstrip("."),
            step_count=step,
            history_length=len(shown),
            action_history=self._history(shown, observation, first_index=step - len(shown) + 1),
            current_step=step + 1,
            current_observation=observation.strip(),
            admissible_actions=admissible,
            reply_hint=reply_hint(self.format.stop),
        )

    def _admissible(self, actions: Sequence[str]) -> str:
        if not self.show_admissible:
            return "(not listed)"
        if self.style == "compact":
            return " | ".join(actions)
        return ", ".join(f"'{action}'" for action in actions)

    def _history(self, shown: Sequence[PastStep], current: str, first_index: int) -> str:
        if self.style == "compact":  # the actions alone: a tiny model's context holds many of them
            if not shown:
                return ""
            label = "Previous action" if len(shown) == 1 else "Previous actions"
            return f" {label}: {' | '.join(step.action for step in shown)}."
        past = [
            (step.observation.lower() if self.lowercase_observation else step.observation, step.action)
            for step in shown
        ]
        return self.format.history(past, current, first_index)
