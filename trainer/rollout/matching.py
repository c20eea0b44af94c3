"""`rollout.action_match`: what a reply's action not on the admissible list becomes before it is sent.

`exact` (the papers' free text, the default): the parsed action is sent as written; one the environment does not
know is answered "Nothing happens." (ALFWorld) and costs the turn.

`constrained` and `choice`: the reply is one of the replies naming a listed action (`AdmissibleReplies`: their
tokens as SFT writes them), sampled token by token with the others masked (`constrained`) or drawn whole by the
model's probability of each (`choice`), in the backend (trainer/backends/constraint.py), so it is always
admissible; docs/design/041-constrained-actions.md.

`nearest`: when the episode lists concrete admissible actions (`concrete_list`: ALFWorld, ScienceWorld; not
WebShop's or Search-QA's templates) and the parsed action is not one of them, the most similar listed action is sent
instead, as Huang et al. 2022 ("Language Models as Zero-Shot Planners") translate a generated step to the nearest
admissible one. The similarity is the standard
library's `difflib.SequenceMatcher` ratio (twice the matched characters over both lengths): deterministic, no
model and no extra package, and on ALFWorld's short templated commands the action differing in one object or
number (`go to cabinet 4` in a room with cabinets 1-3, `take laptop 1 from shelf 2` where a pen 1 lies) keeps most
characters of its intended template. Ties go to the action listed first. docs/design/038-action-matching.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Any, Literal, get_args

from trainer.rollout.expert import action_text

ActionMatch = Literal["exact", "nearest", "constrained", "choice"]
ACTION_MATCHES: tuple[str, ...] = get_args(ActionMatch)
CONSTRAIN: dict[str, Literal["tokens", "replies"]] = {"constrained": "tokens", "choice": "replies"}
"""How each mode that limits replies to the listed actions has the backend do it (`SamplingSettings.constrain`)."""

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
    `action` is not on it (an unparsed None stays None: there is nothing to match; `constrained` and `choice`
    replies are on the list already)."""
    if mode != "nearest" or action is None or action in admissible or not concrete_list(admissible):
        return action
    return nearest_action(action, admissible)


class AdmissibleReplies:
    """The token sequences of the replies naming each admissible action (`constrained`, `choice`): `action_text`
    (`spaced`: `prompt.reply_space`) and EOS, exactly what SFT trains, kept only where the format parses it back."""

    def __init__(self, tokenizer: Any, parse: Callable[[str], str | None], spaced: bool = False) -> None:
        self.tokenizer = tokenizer
        self.parse = parse
        self.spaced = spaced
        self.reply_ids = lru_cache(maxsize=1 << 16)(self._encode)

    def _encode(self, action: str) -> tuple[int, ...] | None:
        text = action_text(action, self.spaced)
        if self.parse(text) != action:
            return None
        eos = self.tokenizer.eos_token_id
        return (*self.tokenizer.encode(text, add_special_tokens=False), *(() if eos is None else (eos,)))

    def allowed(self, admissible: Sequence[str], prefix: Sequence[int] = ()) -> list[list[int]] | None:
        """What a response after the already generated `prefix` may be, for a concrete `admissible` list (None: a
        template list, or no reply extends the prefix: the response is left free)."""
        if not concrete_list(admissible):
            return None
        cut = len(prefix)
        fitting = [
            list(ids[cut:])
            for ids in map(self.reply_ids, admissible)
            if ids is not None and len(ids) > cut and list(ids[:cut]) == list(prefix)
        ]
        return fitting or None
