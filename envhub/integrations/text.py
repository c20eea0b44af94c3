"""What every text adapter shows the model and reads back: `render_turn` and `parse_action`.

Light on purpose (standard library only): the verifiers and OpenEnv adapters use it without
the torch stack that the TRL adapter needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from envhub.client import EnvView

Render = Callable[[EnvView], str]
"""Text the model reads for an observation (the first one is the prompt, later ones are feedback)."""


def render_turn(turn: EnvView) -> str:
    """The default rendering: goal, observation, admissible actions, and the answer format."""
    lines = [f"Task: {turn.task_description}", f"Observation: {turn.text}"]
    if turn.admissible:
        lines.append("Admissible actions: " + ", ".join(turn.admissible))
    lines.append("Answer with <action>...</action>.")
    return "\n".join(lines) + "\n"


def parse_action(text: str) -> str:
    """The action inside the last <action>...</action>, else the first line of `text`."""
    tagged = re.findall(r"<action>(.*?)</action>", text, flags=re.DOTALL)
    chosen = tagged[-1] if tagged else (text.strip().splitlines() or [""])[0]
    return chosen.strip() or "look"
