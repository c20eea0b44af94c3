"""Action formats ship with their environments and are found by name: built-in rows, entry points of installed
packages, "module:ATTR" references; a bad template or an unknown name is refused with the way out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envhub.client.formats import ActionFormat, action_format, format_names, tagged_action
from envhub.core.registry import KINDS

GAME_FORMAT = ActionFormat(
    "Goal: {task_description}\nSeen: {current_observation}\n<move>...</move>?", tagged_action("move")
)


def test_every_built_in_environment_has_a_format_that_imports_nothing_heavy() -> None:
    assert set(KINDS) <= set(format_names())
    for name in KINDS:
        fmt = action_format(name)
        assert "{task_description}" in fmt.template and fmt.stop
    probe = "import sys; from envhub.client.formats import action_format, format_names\n"
    probe += "[action_format(n) for n in format_names()]\n"
    probe += "print(sorted(m for m in ('torch', 'textworld', 'alfworld', 'scienceworld', 'bm25s') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "[]\n"
    assert action_format("searchqa").stop == ("</search>", "</answer>")
    assert action_format("alfworld").parse("<think>x</think><action> go  to desk 1 </action>") == "go to desk 1"


def test_a_format_is_found_by_reference_and_by_an_installed_packages_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert action_format(f"{__name__}:GAME_FORMAT") is GAME_FORMAT
    # what `pip install` of a package declaring the entry point leaves on the path
    module = tmp_path / "game_format.py"
    module.write_text(
        "from envhub.client.formats import ActionFormat, tagged_action\n"
        "FORMAT = ActionFormat('Goal: {task_description}', tagged_action('move'), stop=('</move>',))\n"
    )
    info = tmp_path / "game_env-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: game-env\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[envhub.action_formats]\ngame = game_format:FORMAT\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "game" in format_names()
    game = action_format("game")
    assert game.stop == ("</move>",) and game.parse("<move>north</move>") == "north"


def test_unknown_names_and_bad_templates_are_refused_with_the_remedy() -> None:
    with pytest.raises(
        LookupError, match=r"no action format for environment 'minecraft'; known: alfworld.*entry points"
    ):
        action_format("minecraft")
    with pytest.raises(LookupError, match="is not an envhub ActionFormat"):
        action_format(f"{__name__}:KINDS")
    with pytest.raises(ValueError, match=r"unknown placeholder\(s\) goal; placeholders: task_description"):
        ActionFormat("Do {goal}")
    with pytest.raises(ValueError, match="at least one stop string"):
        ActionFormat("Do {task_description}", stop=())


def test_render_fills_the_template_for_a_turn_without_history() -> None:
    text = action_format("alfworld").render(
        "put a mug in the fridge.", " You see a mug. ", ["go to fridge 1", "look"], 2
    )
    assert "Your task is to: put a mug in the fridge.\nPrior to this step, you have already taken 2 step(s)" in text
    assert "You are now at step 3 and your current observation is: You see a mug.\n" in text
    assert "[['go to fridge 1', 'look']]" in text and "{" not in text
    searchqa = action_format("searchqa").render("Who wrote Hamlet?", "", [], 0)
    assert "Who wrote Hamlet?" in searchqa and "{" not in searchqa
