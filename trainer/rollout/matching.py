"""`rollout.action_match`: what a reply's action not on the admissible list becomes before it is sent.

`exact` (the papers' free text, the default): the parsed action is sent as written; one the environment does not
know is answered "Nothing happens." (ALFWorld) and costs the turn. `nearest`: when the episode lists concrete
admissible actions (`concrete_list`: ALFWorld, ScienceWorld; not WebShop's or Search-QA's templates) and the parsed
action is not one of them, the most similar listed action is sent instead, as Huang et al. 2022 ("Language Models as
Zero-Shot Planners") translate a generated step to the nearest admissible one. The similarity is the standard
library's `difflib.SequenceMatcher` ratio (twice the matched characters over both lengths): deterministic, no
model and no extra package, and on ALFWorld's short templated commands the action differing in one object or
number (`go to cabinet 4` in a room with cabinets 1-3, `take laptop 1 from shelf 2` where a pen 1 lies) keeps most
characters of its intended template. Ties go to the action listed first. docs/design/038-action-matching.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Literal

ActionMatch = Literal["exact", "nearest"]
ACTION_MATCHES: tuple[str, ...] = ("exact", "nearest")

_PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")
"""A `<placeholder>` in an action template (not the `< prev` of a WebShop link)."""


def concrete_list(admissible: Sequence[str]) -> bool:
    """Whether `admissible` lists actions (non-empty, no template), so membership means admissible."""
    return bool(admissible) and not any(_PLACEHOLDER.search(a) for a in admissible)


def nearest_action(action: str, admissible: Sequence[str]) -> str:
    """The action of the non-empty `admissible` most similar to `action` (`SequenceMatcher` ratio; first on ties)."""
    matcher = SequenceMatcher(autojunk=False)
    matcher.set_seq2(action)
    best, best_ratio = admissible[0], -1.0
    for candidate in admissible:
        matcher.set_seq1(candidate)
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best, best_ratio = candidate, ratio
    return best


def match_action(action: str | None, admissible: Sequence[str], mode: ActionMatch) -> str | None:
    """The action to send: `action` itself, or under `nearest` the closest of a concrete `admissible` list when
    `action` is not on it (an unparsed None stays None: there is nothing to match)."""
    if mode == "exact" or action is None or action in admissible or not concrete_list(admissible):
        return action
    return nearest_action(action, admissible)
