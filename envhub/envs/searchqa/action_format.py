"""Search-QA's action format (the Search-R1 protocol): `<search> query </search>` or `<answer> text </answer>`,
exactly one kind per reply; the tagged form is sent, so the server tells the two apart.

The template is ATOD's (paper 000, Appendix B.4) verbatim; the extracted paper lost its line breaks, so a
newline is put back where two sentences touch. The history is Search-R1's memory: each query, then its
results (what the next turn observed; the last query's results are the current observation, since this
template has no other place for them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from envhub.client.formats import ActionFormat

TEMPLATE = (
    "You are an expert agent tasked with answering the given question step-by-step.\n"
    "Your question: {task_description}.\n"
    "Prior to this step, you have already taken {step_count} step(s). Below is the interaction history where "
    "<search></search> wrapped your past search queries and <information></information> wrapped the "
    "corresponding search results returned by the external search engine. History:{action_history}\n"
    "Now it's your turn to respond for the current step. You should first conduct a reasoning process. This "
    "process MUST be enclosed within <think></think> tags. After completing your reasoning, choose only one of "
    "the following actions (do not perform both):\n"
    "1.If you find you lack some knowledge, you MUST call a search engine to get more external information "
    "using format: <search> your query </search>.\n"
    "2.If you have enough knowledge to answer the question confidently, provide your final answer within "
    "<answer></answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>."
)

_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def parse(reply: str) -> str | None:
    """`<search>q</search>` or `<answer>a</answer>` (body whitespace collapsed); None when the reply holds
    both kinds, neither, or an empty body."""
    searches, answers = _SEARCH.findall(reply), _ANSWER.findall(reply)
    if bool(searches) == bool(answers):
        return None
    tag, body = ("search", searches[0]) if searches else ("answer", answers[0])
    body = " ".join(body.split())
    return f"<{tag}>{body}</{tag}>" if body else None


def history(shown: Sequence[tuple[str, str]], current: str, first_index: int) -> str:
    """Each shown query followed by its results inside `<information>` (one more result than queries shown
    when none is: the current observation)."""
    del first_index
    results = [observation for observation, _ in shown[1:]] + [current]
    return "".join(f"\n{action}\n{_information(result)}" for (_, action), result in zip(shown, results, strict=False))


def _information(observation: str) -> str:
    """An observation inside `<information>` tags (the server already wraps search results)."""
    text = observation.strip()
    return text if text.startswith("<information>") else f"<information>{text}</information>"


FORMAT = ActionFormat(TEMPLATE, parse=parse, stop=("</search>", "</answer>"), history=history)
