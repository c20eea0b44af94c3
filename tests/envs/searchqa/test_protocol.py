"""Action parsing, SQuAD normalisation, exact match and F1, and the information layout."""

from __future__ import annotations

import pytest

from envhub.envs.searchqa.protocol import (
    Action,
    exact_match,
    f1_score,
    format_information,
    normalize_answer,
    parse_action,
)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   APPLE, a day!  ", "apple day"),
        ("U.S.A.", "usa"),
        ("1,655,753", "1655753"),
        ("Theatre of the absurd", "theatre of absurd"),
        ("", ""),
    ],
)
def test_normalize_answer(text: str, normal: str) -> None:
    assert normalize_answer(text) == normal


def test_exact_match_accepts_any_answer_after_normalisation() -> None:
    answers = ("Zloty", "PLN")
    assert exact_match("the zloty.", answers)
    assert exact_match(" pln ", answers)
    assert not exact_match("Polish zloty", answers)
    assert exact_match("+48", ("+48", "48")) and exact_match("48", ("+48",))


def test_f1_is_the_best_token_overlap() -> None:
    assert f1_score("Polish zloty", ("Zloty", "PLN")) == pytest.approx(2 / 3)
    assert f1_score("zloty", ("Zloty",)) == 1.0
    assert f1_score("euro", ("Zloty",)) == 0.0
    assert f1_score("", ("Zloty",)) == 0.0


def test_parse_action_takes_the_first_tag_and_collapses_whitespace() -> None:
    assert parse_action("<think>hm</think> <search>  capital\n of   France </search>") == Action(
        "search", "capital of France"
    )
    assert parse_action("<answer>Paris</answer><search>x</search>") == Action("answer", "Paris")
    assert parse_action("<search></search>") == Action("search", "")
    assert parse_action("Paris") is None
    assert parse_action("<search>unclosed") is None
    assert parse_action("<search>a</answer>") is None


def test_format_information_is_search_r1s_layout() -> None:
    text = format_information(['"Poland"\nPoland is a country.', '"Warsaw"\nWarsaw is a city.'])
    assert text == (
        "<information>Doc 1(Title: Poland) Poland is a country.\nDoc 2(Title: Warsaw) Warsaw is a city.</information>"
    )
    assert format_information([]) == "<information>No results found.</information>"
