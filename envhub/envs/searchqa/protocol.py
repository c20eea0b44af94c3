"""The Search-R1 turn protocol: parsing `<search>`/`<answer>` actions, formatting results, scoring answers.

Scoring follows the SQuAD evaluation script the Search-R1 papers use: lower case, drop
punctuation and the articles a/an/the, collapse whitespace; exact match against any
accepted answer, token F1 as the best over the accepted answers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

INVALID_OBSERVATION = (
    "My previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again."
)
"""Search-R1's observation for a turn without a usable action."""

EMPTY_QUERY_OBSERVATION = (
    "My previous search query is empty. I should put a non-empty query between <search> and </search>."
)

_TAG = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


@dataclass(frozen=True)
class Action:
    """One parsed turn: a search query or a final answer (body already whitespace-collapsed)."""

    kind: Literal["search", "answer"]
    text: str


def parse_action(response: str) -> Action | None:
    """The first `<search>` or `<answer>` block of `response` (as Search-R1 reads it), or None."""
    match = _TAG.search(response)
    if match is None:
        return None
    kind: Literal["search", "answer"] = "search" if match.group(1) == "search" else "answer"
    return Action(kind, " ".join(match.group(2).split()))


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> bool:
    """True when the normalised prediction equals a normalised accepted answer."""
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(answer) for answer in answers)


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    """Best token-level F1 of the prediction against the accepted answers."""
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def split_title(contents: str) -> tuple[str, str]:
    """Search-R1 corpus `contents` is '"Title"\\ntext': return (title, text)."""
    first, _, rest = contents.partition("\n")
    return first.strip().strip('"'), rest.strip()


def format_information(passages: Sequence[str]) -> str:
    """Retrieved passages as the observation, in Search-R1's layout, wrapped in `<information>`."""
    if not passages:
        return "<information>No results found.</information>"
    lines = []
    for number, contents in enumerate(passages, start=1):
        title, text = split_title(contents)
        lines.append(f"Doc {number}(Title: {title}) {text}")
    return "<information>" + "\n".join(lines) + "</information>"
