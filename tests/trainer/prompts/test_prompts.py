"""Prompt rendering (ATOD Appendix B.4) and action parsing (OBJECTIVES.md section 7)."""

from __future__ import annotations

import pytest

from envhub.client.formats import INVALID_ACTION_OBSERVATION, action_format, format_names
from trainer.prompts import PastStep, PromptRenderer, PromptState

PAST = [PastStep(f"obs {i}", f"act {i}") for i in range(1, 6)]
STATE = PromptState("put a mug in the fridge.", "You see a fridge 1.", ["go to fridge 1", "look"], PAST)


def test_alfworld_atod_template_is_the_papers() -> None:
    text = PromptRenderer("alfworld").render(STATE)
    assert text.startswith("You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: ")
    assert "put a mug in the fridge.\nPrior to this step, you have already taken 5 step(s)." in text
    assert "Below are the most recent 2 observations and the corresponding actions you took:" in text
    assert "You are now at step 6 and your current observation is: You see a fridge 1." in text
    assert "[['go to fridge 1', 'look']]" in text
    assert text.endswith("present it within <action></action> tags.")


def test_history_shows_only_the_last_history_length_steps_with_their_numbers() -> None:
    text = PromptRenderer("alfworld", history_length=3).render(STATE)
    assert "[Observation 3: 'obs 3', Action 3: 'act 3']" in text
    assert "[Observation 5: 'obs 5', Action 5: 'act 5']" in text
    assert "obs 2" not in text
    assert "most recent 3 observations" in text


def test_first_turn_has_no_history() -> None:
    state = PromptState("task", "start", ["look"], [])
    text = PromptRenderer("alfworld").render(state)
    assert "already taken 0 step(s)" in text and "most recent 0 observations" in text and "[Observation" not in text


def test_full_context_sends_the_template_once_then_follow_ups() -> None:
    renderer = PromptRenderer("alfworld", context="full")
    first = renderer.render(PromptState("task", "start", ["look"], []))
    later = renderer.render(STATE)
    assert first.startswith("You are an expert agent")
    assert later.startswith("Observation at step 6: You see a fridge 1.") and "obs 5" not in later


@pytest.mark.parametrize("env", format_names())
def test_every_environment_renders(env: str) -> None:
    text = PromptRenderer(env).render(STATE)
    assert "put a mug in the fridge" in text
    assert ("<search>" in text) == (env == "searchqa")


def test_searchqa_history_pairs_each_query_with_its_results() -> None:
    past = [
        PastStep("q?", "<search>capital of France</search>"),
        PastStep("Paris is the capital.", "<search>Paris</search>"),
    ]
    text = PromptRenderer("searchqa", history_length=4).render(PromptState("q?", "Paris has 2M people.", [], past))
    assert (
        "History:\n<search>capital of France</search>\n<information>Paris is the capital.</information>\n"
        "<search>Paris</search>\n<information>Paris has 2M people.</information>\n" in text
    )
    assert "<information>q?</information>" not in text  # the question is not a search result
    one_action = PromptRenderer("searchqa", style="compact", history_length=1)
    compact = one_action.render(PromptState("q?", "Paris has 2M people.", [], past))
    assert compact.count("Paris has 2M people.") == 1 and "Previous action: <search>Paris</search>." in compact


def test_compact_style_is_short_and_lists_actions() -> None:
    text = PromptRenderer("alfworld", style="compact", history_length=1).render(STATE)
    assert text.startswith("Task: put a mug in the fridge\n")
    assert "Previous action: act 5." in text and "act 4" not in text
    assert "go to fridge 1 | look" in text
    assert len(text) < 250


def test_compact_style_asks_for_the_environments_own_tags() -> None:
    assert PromptRenderer("alfworld", style="compact").render(STATE).endswith("Reply with <action>one action</action>.")
    searchqa = PromptRenderer("searchqa", style="compact").render(PromptState("q?", "obs", [], []))
    assert searchqa.endswith("Reply with <search>one search</search> or <answer>one answer</answer>.")


def test_compact_style_lists_the_last_history_length_actions_without_their_observations() -> None:
    text = PromptRenderer("alfworld", style="compact", history_length=3).render(STATE)
    assert "Step 6. Previous actions: act 3 | act 4 | act 5.\n" in text
    assert "act 2" not in text and "obs" not in text
    first = PromptState(STATE.task_description, STATE.observation, STATE.admissible, [])
    assert "Step 1.\nObservation:" in PromptRenderer("alfworld", style="compact", history_length=3).render(first)


def test_lowercase_observation_makes_a_shown_id_the_listed_actions_text() -> None:
    page = PromptState("i need a hoodie", "Next > [SEP] B0M6UZ8RR9 [SEP] Lylu Hoodie", ["click[b0m6uz8rr9]"], [])
    plain = PromptRenderer("webshop", style="compact").render(page)
    assert "B0M6UZ8RR9" in plain and plain.count("b0m6uz8rr9") == 1
    lowered = PromptRenderer("webshop", style="compact", lowercase_observation=True).render(page)
    assert "Observation: next > [sep] b0m6uz8rr9 [sep] lylu hoodie\n" in lowered and lowered.count("b0m6uz8rr9") == 2
    past = PromptState("put a mug away", "Nothing", [], [PastStep("You See A Fridge 1", "look")])
    assert "you see a fridge 1" in PromptRenderer("alfworld", history_length=1, lowercase_observation=True).render(past)


def test_unknown_environment_is_refused() -> None:
    with pytest.raises(ValueError, match="no ATOD template"):
        PromptRenderer("minecraft")


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>hm</think><action>go to  fridge 1</action>", "go to fridge 1"),
        ("<action>look</action><action>inventory</action>", "look"),
        ("<think>no action here</think>", None),
        ("<action>   </action>", None),
        ("<action>unclosed", None),
    ],
)
def test_parse_action(response: str, expected: str | None) -> None:
    assert action_format("alfworld").parse(response) == expected


def test_parse_searchqa_needs_exactly_one_kind() -> None:
    response = "<think>x</think><search> who  wrote it </search>"
    parse_action = action_format("searchqa").parse
    assert parse_action(response) == "<search>who wrote it</search>"
    assert parse_action("<answer>Beijing</answer>") == "<answer>Beijing</answer>"
    assert parse_action("<search>a</search><answer>b</answer>") is None
    assert parse_action("<action>look</action>") is None
    assert "<action></action>" in INVALID_ACTION_OBSERVATION
