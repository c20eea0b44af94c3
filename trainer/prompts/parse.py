"""Action parsing (OBJECTIVES.md section 7).

Actions come inside `<action>...</action>`; Search-QA uses `<search>...</search>` or
`<answer>...</answer>` (exactly one kind). A response without a parsable action is an invalid
turn: the environment receives nothing and the agent sees `INVALID_ACTION_OBSERVATION`.
"""

from __future__ import annotations

import re

INVALID_ACTION_OBSERVATION = (
    "Invalid action: no action was found. Present exactly one admissible action within <action></action> tags."
)

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def parse_action(response: str, env_name: str) -> str | None:
    """The action text to send to the environment, or None for an invalid turn.

    For Search-QA the tagged form is sent (`<search>q</search>` or `<answer>a</answer>`), so the
    server can tell the two apart; a response holding both kinds is invalid.
    """
    if env_name == "searchqa":
        searches, answers = _SEARCH.findall(response), _ANSWER.findall(response)
        if bool(searches) == bool(answers):
            return None
        tag, body = ("search", searches[0]) if searches else ("answer", answers[0])
        body = " ".join(body.split())
        return f"<{tag}>{body}</{tag}>" if body else None
    match = _ACTION.search(response)
    if match is None:
        return None
    action = " ".join(match.group(1).split())
    return action or None
