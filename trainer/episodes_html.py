"""A static HTML page of sample episodes: task, and per turn the prompt tail, response, parsed action,
observation and reward; with teacher log-probs, each response token shaded by the teacher-student gap."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.rollout import Trajectory, Turn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase as Decoder

HTML_EPISODES = 4
"""Episodes shown on an evaluation's page."""

PROMPT_TAIL_CHARS = 400
"""Characters of each prompt shown (its end: the newest observation and the instructions)."""
GAP_SCALE = 4.0
"""|log p_teacher - log p_student| (nats) at which a token's shade is fullest."""

STYLE = """body{font-family:sans-serif;margin:1.5em;max-width:70em}
.episode{border:1px solid #ccc;border-radius:6px;padding:.6em 1em;margin:1em 0}
.won{border-left:6px solid #2a2}.lost{border-left:6px solid #c33}
.turn{border-top:1px dashed #ddd;padding:.4em 0}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.4em;margin:.2em 0;font-size:90%}
.tok{font-family:monospace;white-space:pre-wrap}.k{color:#666;font-size:85%}"""


def _token_spans(turn: Turn, tokenizer: Decoder) -> str:
    """Response tokens, each shaded by its teacher-student log-prob gap (red: teacher less likely)."""
    assert turn.logp_teacher is not None
    spans = []
    for token, student, teacher in zip(turn.response_ids, turn.logp_old, turn.logp_teacher, strict=False):
        gap = teacher - student
        alpha = min(abs(gap) / GAP_SCALE, 1.0)
        colour = f"rgba(220,40,40,{alpha:.2f})" if gap < 0 else f"rgba(40,160,40,{alpha:.2f})"
        text = html.escape(str(tokenizer.decode([token], skip_special_tokens=False)))
        spans.append(f'<span class="tok" style="background:{colour}" title="gap {gap:+.2f} nats">{text}</span>')
    return "".join(spans)


def _turn_html(index: int, turn: Turn, tokenizer: Decoder) -> str:
    prompt = str(tokenizer.decode(turn.prompt_ids, skip_special_tokens=False))[-PROMPT_TAIL_CHARS:]
    who = "teacher" if turn.teacher else "student"
    gap = ""
    if turn.logp_teacher is not None:
        gap = (
            f'<div class="k">teacher-student gap per token</div><div class="gap">{_token_spans(turn, tokenizer)}</div>'
        )
    action = html.escape(turn.action) if turn.action is not None else "<em>invalid (no action parsed)</em>"
    if turn.matched_from is not None:
        written = html.escape(turn.matched_from)
        action += f' <span class="k">(the nearest admissible action to the reply\'s <code>{written}</code>)</span>'
    return f"""<div class="turn"><b>turn {index}</b> <span class="k">({who}, finish {turn.finish_reason})</span>
<div class="k">prompt tail</div><pre class="prompt">{html.escape(prompt)}</pre>
<div class="k">response</div><pre class="response">{html.escape(turn.response_text)}</pre>{gap}
<div>action: <code class="action">{action}</code></div>
<div class="k">observation</div><pre class="observation">{html.escape(turn.observation)}</pre>
<div>reward: <span class="reward">{turn.reward:g}</span>{" (done)" if turn.done else ""}</div></div>"""


def episodes_html(trajectories: Sequence[Trajectory], tokenizer: Decoder, title: str) -> str:
    """The page's HTML."""
    episodes = []
    for number, trajectory in enumerate(trajectories):
        outcome = "won" if trajectory.won else "lost"
        note = f", dropped: {html.escape(trajectory.dropped)}" if trajectory.dropped else ""
        turns = "\n".join(_turn_html(i + 1, turn, tokenizer) for i, turn in enumerate(trajectory.turns))
        episodes.append(
            f'<div class="episode {outcome}"><h2>episode {number + 1}: task <code class="task">'
            f"{html.escape(trajectory.task_id)}</code></h2><p>seed {trajectory.seed}, {outcome}, "
            f"{trajectory.num_turns} turns{note}</p>\n{turns}</div>"
        )
    body = "\n".join(episodes) or "<p>no episodes</p>"
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>
<p class="k">Shading (when a teacher scored the turns): green where the teacher gives a token a higher
log-probability than the student, red where lower; hover for the gap in nats.</p>
{body}</body></html>
"""


def write_episodes_html(trajectories: Sequence[Trajectory], tokenizer: Decoder, path: str | Path, title: str) -> Path:
    """Write the page (parent folders made); returns its path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(episodes_html(trajectories, tokenizer, title))
    return out


def write_sample_episodes(
    trajectories: Sequence[Trajectory],
    tokenizer: Decoder,
    path: str | Path,
    title: str,
    score: Callable[[list[Trajectory]], tuple[list[Trajectory], int]] | None = None,
) -> Path:
    """The first `HTML_EPISODES` complete episodes as an HTML page, scored by `score` (a teacher) if given."""
    sample = [t for t in trajectories if not t.dropped][:HTML_EPISODES]
    if score is not None and sample:
        sample, _ = score(sample)
    return write_episodes_html(sample, tokenizer, path, title)
