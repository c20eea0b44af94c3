"""The sample-episodes page, rendered by headless Chromium: what a person sees is what happened."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trainer.episodes_html import write_episodes_html
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.rollout import Trajectory, Turn

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def render(page: Path, profile: Path) -> str:
    """The DOM headless Chromium builds from the page (scripts off, no network)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian package `chromium`; .ci/run installs it)")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--dump-dom",
    ]
    done = subprocess.run([CHROMIUM, *flags, page.as_uri()], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def turn(tokenizer, prompt: str, response: str, action: str | None, observation: str, **extra) -> Turn:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode(response, add_special_tokens=False)
    return Turn(
        prompt_ids=tokenizer.encode(prompt, add_special_tokens=False),
        response_ids=ids,
        logp_old=[-1.0] * len(ids),
        response_text=response,
        action=action,
        observation=observation,
        **extra,
    )


def test_page_shows_every_turn_and_shades_the_teacher_gap(tiny_models: TinyModels, tmp_path: Path) -> None:
    tokenizer = load_tokenizer(tiny_models.student)
    good = "<think>I need the apple.</think><action>take apple 1 from cabinet 1</action>"
    first = turn(
        tokenizer,
        "Your task is to: put some apple in fridge 1. You see a cabinet 1.",
        good,
        "take apple 1 from cabinet 1",
        "You pick up the apple 1 from the cabinet 1.",
    )
    n = len(first.response_ids)
    first.logp_teacher = [-1.0 + (3.0 if i % 2 else -3.0) for i in range(n)]
    second = turn(
        tokenizer,
        "You pick up the apple 1. <b>not a tag</b>",
        "<think>hmm",
        None,
        "Invalid action: no <action> tag",
        reward=0.0,
        done=True,
    )
    won = Trajectory("pick_and_place_simple-apple-fridge-7", group=0, seed=3, turns=[first], won=True)
    won.turns[0].reward, won.turns[0].done = 1.0, True
    lost = Trajectory("pick_and_place_simple-mug-shelf-2", group=1, seed=4, turns=[second])
    page = write_episodes_html([won, lost], tokenizer, tmp_path / "ep" / "episodes.html", "held-out episodes")

    dom = render(page, tmp_path / "profile")
    assert "pick_and_place_simple-apple-fridge-7" in dom and "pick_and_place_simple-mug-shelf-2" in dom
    assert 'class="action">take apple 1 from cabinet 1</code>' in dom
    assert "You pick up the apple 1 from the cabinet 1." in dom
    assert "invalid (no action parsed)" in dom
    assert "&lt;b&gt;not a tag&lt;/b&gt;" in dom  # prompt text is escaped, not markup
    assert dom.count('class="reward">1</span>') == 1 and dom.count('class="reward">0</span>') == 1
    gaps = re.findall(r'title="gap ([+-]\d+\.\d+) nats"', dom)
    assert len(gaps) == n  # one shaded span per response token of the scored turn only
    assert {g for g in gaps} == {"+3.00", "-3.00"}
    assert "rgba(40,160,40,0.75)" in dom and "rgba(220,40,40,0.75)" in dom
