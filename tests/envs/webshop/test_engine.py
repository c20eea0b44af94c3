"""The WebShop pages, actions, step limit, snapshots and oracle, in-process."""

from __future__ import annotations

import json

import pytest

from envhub.core.session import Session
from envhub.envs.webshop.engine import SEP
from envhub.envs.webshop.kind import WebShopKind


@pytest.fixture(scope="module")
def kind() -> WebShopKind:
    return WebShopKind()


def _session(kind: WebShopKind, index: int = 0, **kwargs: int) -> Session:
    return Session.start(kind, kind.tasks("test")[index], **kwargs)


def test_pages_and_admissible_actions(kind: WebShopKind) -> None:
    session = _session(kind)
    goal = kind.catalog.goals["test"][0]
    assert session.observation.text == SEP.join(["WebShop", "Instruction:", goal.instruction, "Search"])
    assert session.admissible_actions() == ["search[<your query>]"]
    product = kind.catalog.products[goal.asin]
    results = session.step(f"search[{product.title}]").result.observation
    assert results.info["page"] == "results" and "Page 1 (Total results: 50)" in results.text
    assert "< Prev" not in results.text and "Next >" in results.text
    admissible = session.admissible_actions()
    assert admissible[:2] == ["click[back to search]", "click[next >]"] and len(admissible) == 12
    assert admissible[2] == f"click[{goal.asin.lower()}]"  # its own title finds it first
    assert "< Prev" in session.step("click[Next >]").result.observation.text
    assert session.admissible_actions()[:3] == ["click[back to search]", "click[< prev]", "click[next >]"]
    session.step("click[< prev]")
    item = session.step(f"click[{goal.asin.lower()}]").result.observation.text
    for text in (product.title, f"Price: {product.price_tag}", "Description", "Features", "Reviews", "Buy Now"):
        assert text in item
    values = [v for vs in product.options.values() for v in vs]
    assert session.admissible_actions() == [
        "click[back to search]",
        "click[< prev]",
        *(f"click[{v}]" for v in dict.fromkeys(values)),
        "click[description]",
        "click[features]",
        "click[reviews]",
        "click[buy now]",
    ]
    session.step(f"click[{values[0]}]")
    features = session.step("click[features]").result.observation.text
    assert product.bullets[0] in features and session.admissible_actions() == ["click[back to search]", "click[< prev]"]
    session.step("click[< prev]")
    assert json.loads(session.env.native_state())["state"]["options"] == {next(iter(product.options)): values[0]}
    session.step("click[< prev]")  # the item's < Prev returns to the results page and forgets the options
    state = json.loads(session.env.native_state())["state"]
    assert state["page"] == "results" and state["options"] == {} and state["result_page"] == 1
    assert session.step("click[back to search]").result.observation.text.startswith("WebShop [SEP] Instruction:")
    assert json.loads(session.env.native_state())["state"]["page"] == "search"


def test_invalid_actions_change_nothing_and_say_why(kind: WebShopKind) -> None:
    session = _session(kind, 1, max_steps=100)
    before = session.env.native_state()
    page = session.observation.text
    for action, why in (
        ("click[]", "cannot be clicked"),
        ("click[buy now]", "cannot be clicked"),
        ("search[]", "needs a query"),
        ("buy it", "write search[query] or click[element]"),
        ("jump[high]", "unknown action"),
        ("search[" + "shoe " * 1000 + "]", "longer than 2000 characters"),
    ):
        result = session.step(action).result
        assert result.observation.text.startswith("Invalid action: ")
        assert why in result.observation.text and result.observation.text.endswith(page), action
        assert result.reward == 0.0 and not result.terminated and not result.observation.info["valid_action"]
        assert session.env.native_state() == before
    assert "Total results" in session.step("search[" + "cotton shirt " * 100 + "]").result.observation.text
    result = session.step("search[running shoes]").result
    assert "there is no search bar on this page" in result.observation.text
    assert session.step("click[zzzz]").result.observation.text.startswith("Invalid action: 'zzzz' cannot be clicked")


def test_no_result_query_and_step_limit(kind: WebShopKind) -> None:
    session = _session(kind, 2)
    assert session.max_steps == 15
    text = session.step("search[qqqqzzzz]").result.observation.text
    assert "Page 1 (Total results: 0)" in text and "Next >" not in text
    for _ in range(13):
        assert not session.step("click[nothing]").truncated
    assert session.step("click[nothing]").truncated and session.done


def test_buy_ends_with_the_reward_and_its_parts(kind: WebShopKind) -> None:
    session = _session(kind, 3)
    goal = kind.catalog.goals["test"][3]
    session.step(f"search[{kind.catalog.products[goal.asin].title}]")
    session.step(f"click[{goal.asin}]")  # clicks match case-insensitively
    step = session.step("click[Buy Now]")
    info = step.result.observation.info
    assert step.result.terminated and step.result.reward == info["reward"] < 1.0 and not step.result.won
    assert info["options_matched"] == 0 and info["attributes_matched"] == len(goal.attributes) and info["r_type"] == 1
    assert "Thank you for shopping with us!" in step.result.observation.text
    assert session.env.admissible_actions() == []


def test_fork_and_restore_continue_identically(kind: WebShopKind) -> None:
    session = _session(kind, 4)
    plan = []
    probe = _session(kind, 4)
    while not probe.done:
        plan.append(probe.expert_actions()[0])
        probe.step(plan[-1])
    for action in plan[:3]:
        session.step(action)
    fork = session.fork()
    assert fork.observation == session.observation and fork.admissible_actions() == session.admissible_actions()
    tail = ["click[description]", "click[< prev]", *plan[3:]]
    first = [session.step(a).result for a in tail]
    second = [fork.step(a).result for a in tail]
    assert first == second and first[-1].won


def test_oracle_solves_the_test_split(kind: WebShopKind) -> None:
    tasks = kind.tasks("test")
    wins = 0
    for task in tasks:
        session = Session.start(kind, task)
        while not session.done:
            step = session.step(session.expert_actions()[0])
        wins += step.result.won
        assert session.expert_actions() == []
    assert len(tasks) == 128 and wins / len(tasks) >= 0.95


def _play_test_split(kind: WebShopKind, expert: str) -> tuple[float, list[tuple[str, list[str], str]]]:
    """Plays `expert` on every test goal: its share of won goals and every (page, admissible actions, action)."""
    tasks = kind.tasks("test")
    wins, moves = 0, []
    for task in tasks:
        session = Session.start(kind, task, options={"expert": expert})
        while not session.done:
            [action] = session.expert_actions()
            assert action in session.admissible_actions() or action.startswith("search[")
            moves.append((session.observation.text, session.admissible_actions(), action))
            step = session.step(action)
        wins += step.result.won
    return wins / len(tasks), moves


def test_page_expert_solves_the_test_split_from_what_the_pages_show(kind: WebShopKind) -> None:
    won, moves = _play_test_split(kind, "page")
    assert won >= 0.9 and len(moves) / 128 < 6  # the oracle: every goal, 5.2 steps
    first = Session.start(kind, kind.tasks("test")[0], options={"expert": "page"})
    first.step(first.expert_actions()[0])
    goal = kind.catalog.goals["test"][0]
    [click] = first.expert_actions()
    shown = [a for a in first.admissible_actions() if a.startswith("click[b0")]
    assert click == shown[0] != f"click[{goal.asin.lower()}]"  # the first fitting product, not the oracle's own


def test_first_product_expert_clicks_the_first_listed_product(kind: WebShopKind) -> None:
    won, moves = _play_test_split(kind, "first")
    on_results = [(listed, action) for page, listed, action in moves if "Page " in page]
    assert len(on_results) >= 128 and 0.8 <= won < 0.95  # measured: 113 of 128 (the page expert: 122)
    for listed, action in on_results:
        assert action == next(a for a in listed if a.startswith("click[b0"))


def test_expert_option_is_checked(kind: WebShopKind) -> None:
    with pytest.raises(ValueError, match="expert='best' is not one of oracle, page, first"):
        kind.validate_options({"expert": "best"})
    kind.validate_options({"expert": "page"})
