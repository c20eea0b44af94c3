"""Action formats: how an agent writes its actions for one environment, and the prompt that asks for them.

An environment ships its format next to itself (the built-ins in `envhub/envs/<name>/action_format.py`,
a small module importing nothing but this one), so an agent such as the trainer renders prompts, sets
stop strings and parses replies for a new environment without being edited. A format is found by the
environment's name: the built-in registry row (`envhub.core.registry.KINDS`), an installed package's
entry point, or a "module:ATTR" reference given directly:

    [project.entry-points."envhub.action_formats"]
    mykind = "mypackage.action_format:FORMAT"

The template's placeholders are the prompt fields of one turn (`PLACEHOLDERS`); a template naming any
other placeholder is refused when the format is made.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

PLACEHOLDERS = (
    "task_description",
    "step_count",
    "history_length",
    "action_history",
    "current_step",
    "current_observation",
    "admissible_actions",
)
"""What a template may show: the task, the number of earlier steps, how many of them it shows and their text,
this step's number and observation, and the admissible actions (already joined for the template)."""

INVALID_ACTION_OBSERVATION = (
    "Invalid action: no action was found. Present exactly one admissible action within <action></action> tags."
)
"""What the agent sees after a reply without a parsable action (OBJECTIVES.md section 7)."""

History = Callable[[Sequence[tuple[str, str]], str, int], str]
"""(shown (observation, action) steps, oldest first; the current observation; the first shown step's number)
-> the text of the template's {action_history}."""


def tagged_action(tag: str = "action") -> Callable[[str], str | None]:
    """A parser taking the first `<tag>...</tag>` of a reply, whitespace collapsed; None when there is none or
    it is empty."""
    pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)

    def parse(reply: str) -> str | None:
        match = pattern.search(reply)
        action = " ".join(match.group(1).split()) if match else ""
        return action or None

    return parse


def numbered_history(shown: Sequence[tuple[str, str]], current: str, first_index: int) -> str:
    """ATOD's history lines: `[Observation i: '...', Action i: '...']`, one per shown step."""
    del current
    return "".join(
        f"\n[Observation {first_index + offset}: '{observation.strip()}', Action {first_index + offset}: '{action}']"
        for offset, (observation, action) in enumerate(shown)
    )


@dataclass(frozen=True)
class ActionFormat:
    """One environment's action format."""

    template: str
    """The whole prompt of one turn, with `PLACEHOLDERS` in braces (the papers' templates for the built-ins)."""
    parse: Callable[[str], str | None] = field(default_factory=tagged_action)
    """A reply -> the action text to send, or None for an invalid turn (nothing is sent)."""
    stop: tuple[str, ...] = ("</action>",)
    """Generation stops at any of these: the reply's action is complete."""
    history: History = numbered_history
    """How the template's {action_history} shows the recent steps."""
    invalid_observation: str = INVALID_ACTION_OBSERVATION
    """What the agent is shown after an invalid turn."""

    def __post_init__(self) -> None:
        unknown = sorted(set(re.findall(r"(?<!{){([a-z_]+)}", self.template)) - set(PLACEHOLDERS))
        if unknown:
            raise ValueError(
                f"action format template uses unknown placeholder(s) {', '.join(unknown)}; "
                f"placeholders: {', '.join(PLACEHOLDERS)}"
            )
        if not self.stop:
            raise ValueError("an action format needs at least one stop string (where a reply's action ends)")

    def render(self, task_description: str, observation: str, admissible: Sequence[str] = (), step: int = 0) -> str:
        """The template for the turn after `step` earlier steps, showing none of them (a chat keeps them as earlier
        messages); the admissible actions quoted and comma-joined, as the papers' templates show them."""
        return self.template.format(
            task_description=task_description.strip().rstrip("."),
            step_count=step,
            history_length=0,
            action_history=self.history([], observation, step + 1),
            current_step=step + 1,
            current_observation=observation.strip(),
            admissible_actions=", ".join(f"'{action}'" for action in admissible),
        )


def format_names() -> list[str]:
    """Every environment name with a format: the built-ins, then installed packages' entry points."""
    from envhub.core.registry import formats

    return sorted(formats())


def action_format(name: str) -> ActionFormat:
    """The action format of environment `name` (or the `ActionFormat` named "module:ATTR").

    Raises LookupError naming the known environments and how to add one.
    """
    from envhub.core.registry import FORMAT_ENTRY_POINT_GROUP, formats

    reference = formats().get(name) or (name if ":" in name else None)
    if reference is None:
        raise LookupError(
            f"no action format for environment {name!r}; known: {', '.join(format_names())} (an environment "
            f"package ships one under the {FORMAT_ENTRY_POINT_GROUP!r} entry points, see "
            "docs/environments/adding-an-environment.md)"
        )
    module_name, _, attribute = reference.partition(":")
    found = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(found, ActionFormat):
        raise LookupError(f"{reference} (the action format of {name!r}) is not an envhub ActionFormat")
    return found
