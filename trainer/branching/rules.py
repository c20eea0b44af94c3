"""PBR detection rules: scan a generated response and emit constraints (offset, C, b).

A rule sees one response's token ids and returns `Constraint`s: at `offset` (the prefix is the
prompt plus `response[:offset]`) the next token should (`target` True) or should not (False) be
in `tokens`. Detection is not differentiated. Rules are built per tokenizer by name
(`make_rules`), so each environment's config lists the ones that apply; new rules register with
`register_rule`.

Built-in rules (paper 002 section 3.4):
* `stray_close_think`: a response must not begin with a closing-think tag (b = 0); one constraint
  per leading tag.
* `eos_after_answer`: after a closed final answer the next token must be end-of-sequence (b = 1);
  fires when something else follows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainer.errors import TrainerError


@dataclass(frozen=True)
class Constraint:
    """One detected protocol event of a response."""

    offset: int
    """The constrained slot: the prefix is prompt + response[:offset]."""
    tokens: tuple[int, ...]
    """The token set C."""
    target: bool
    """b: True if the next token should be in C, False if it should not."""
    rule: str
    """Name of the rule that fired."""

    def violated_by(self, response: Sequence[int]) -> bool:
        """Whether the sampled token at `offset` broke the constraint."""
        if self.offset >= len(response):
            return self.target
        return (response[self.offset] in self.tokens) != self.target


class Rule(Protocol):
    """A detection rule over one response's token ids."""

    @property
    def name(self) -> str: ...

    def scan(self, response: Sequence[int]) -> list[Constraint]: ...


def single_token(tokenizer: Any, text: str, rule: str) -> int:
    """The id of `text` if the tokenizer encodes it as exactly one token; else a clear error."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise TrainerError(
            f"PBR rule {rule!r} needs {text!r} to be one token, but this tokenizer splits it into {ids}; "
            "add it as a token or drop the rule from pbr.rules",
            reason="PBR_RULE_TOKENIZER",
        )
    return int(ids[0])


@dataclass(frozen=True)
class StrayClosingTag:
    """b = 0 at each leading closing tag of a response (the next token must not be the tag)."""

    tag_id: int
    name: str = "stray_close_think"

    def scan(self, response: Sequence[int]) -> list[Constraint]:
        out = []
        for offset, token in enumerate(response):
            if token != self.tag_id:
                break
            out.append(Constraint(offset, (self.tag_id,), False, self.name))
        return out


@dataclass(frozen=True)
class EosAfterAnswer:
    """b = 1 right after the answer's closing token when anything but end-of-sequence follows it."""

    close_id: int
    eos_ids: tuple[int, ...]
    name: str = "eos_after_answer"

    def scan(self, response: Sequence[int]) -> list[Constraint]:
        for offset, token in enumerate(response[:-1]):
            if token == self.close_id and response[offset + 1] not in self.eos_ids:
                return [Constraint(offset + 1, self.eos_ids, True, self.name)]
        return []


def _stray_close_think(tokenizer: Any) -> Rule:
    return StrayClosingTag(single_token(tokenizer, "</think>", "stray_close_think"))


def _eos_after_answer(tokenizer: Any) -> Rule:
    if tokenizer.eos_token_id is None:
        raise TrainerError(
            "PBR rule 'eos_after_answer' needs a tokenizer with an EOS token", reason="PBR_RULE_TOKENIZER"
        )
    return EosAfterAnswer(single_token(tokenizer, "</answer>", "eos_after_answer"), (int(tokenizer.eos_token_id),))


_RULES: dict[str, Callable[[Any], Rule]] = {
    "stray_close_think": _stray_close_think,
    "eos_after_answer": _eos_after_answer,
}


def register_rule(name: str, factory: Callable[[Any], Rule]) -> None:
    """Add a rule factory `factory(tokenizer) -> Rule` under `name`."""
    if name in _RULES:
        raise TrainerError(f"PBR rule {name!r} is already registered", reason="PBR_RULE_EXISTS")
    _RULES[name] = factory


def rule_names() -> tuple[str, ...]:
    """Registered rule names, sorted."""
    return tuple(sorted(_RULES))


def make_rules(names: Sequence[str], tokenizer: Any) -> list[Rule]:
    """The named rules built for `tokenizer`; an unknown name lists the known ones."""
    unknown = [n for n in names if n not in _RULES]
    if unknown:
        raise TrainerError(
            f"unknown PBR rule(s) {', '.join(unknown)}; known: {', '.join(rule_names())}", reason="UNKNOWN_PBR_RULE"
        )
    return [_RULES[n](tokenizer) for n in names]


def scan(rules: Sequence[Rule], response: Sequence[int]) -> list[Constraint]:
    """Every constraint the rules emit for one response, by offset."""
    return sorted((c for rule in rules for c in rule.scan(response)), key=lambda c: (c.offset, c.rule))


def annotate_constraints(trajectories: Sequence[Any], rules: Sequence[Rule]) -> None:
    """Attach the constraints `rules` detect to every supervised turn of `trajectories` (nothing without rules)."""
    if not rules:
        return
    for trajectory in trajectories:
        for turn in trajectory.turns:
            if turn.supervised:
                turn.constraints = scan(rules, turn.response_ids)
