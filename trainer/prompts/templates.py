"""The trainer's own prompt styles beside each environment's template (`envhub.client.formats`; the ATOD
Appendix B.4 texts live with their environments): a compact variant for tiny models, and the follow-up
messages of `full` context mode. Placeholders keep the paper's names."""

from __future__ import annotations

COMPACT = (
    "Task: {task_description}\n"
    "Step {current_step}.{action_history}\n"
    "Observation: {current_observation}\n"
    "Actions: {admissible_actions}\n"
    "Reply with {reply_hint}."
)
"""Short variant for tiny models (context of a few hundred tokens): the same fields, no instructions prose;
`{reply_hint}` is `reply_hint`'s for the environment's action format."""


def reply_hint(stop: tuple[str, ...]) -> str:
    """The compact prompt's reply line from an action format's stop strings: `<action>one action</action>` for
    `</action>`; Search-QA's two tags joined by "or"."""
    tags = [end.removeprefix("</").removesuffix(">") for end in stop]
    return " or ".join(f"<{tag}>one {tag}</{tag}>" for tag in tags)


FULL_FOLLOW_UP = (
    "Observation at step {current_step}: {current_observation}\n"
    "Your admissible actions are: [{admissible_actions}].\n"
    "Choose an admissible action and present it within <action></action> tags."
)
"""The user message of turns after the first in `full` context mode (the history is the chat itself)."""

COMPACT_FOLLOW_UP = "Observation: {current_observation}\nActions: {admissible_actions}"
