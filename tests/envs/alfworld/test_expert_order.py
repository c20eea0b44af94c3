"""The observed expert's `expert_order` option: "listed" follows the admissible commands' order, which every prompt
shows, and still wins; "intro" (the default) follows the first observation's order."""

from __future__ import annotations

import pytest

from envhub.core.session import Session
from envhub.envs.alfworld.kind import AlfWorldKind
from envhub.envs.alfworld.observed_expert import ObservedExpert, ObservedTask

GAMES = 8
"""Pick-and-place training games played in each order (small rooms: a few seconds)."""


def expert_game(kind: AlfWorldKind, index: int, order: str) -> tuple[list[str], bool, list[list[str]]]:
    """The expert's actions on train game `index`, whether it won, and the admissible commands before each."""
    options = {} if order == "intro" else {"expert_order": order}
    session = Session.start(kind, kind.tasks("train")[index], options=options, max_steps=50)
    won, admissible = False, []
    while not session.done and (plan := session.expert_actions()):
        admissible.append(list(session.admissible_actions()))
        won = session.step(plan[0]).result.won
    session.close()
    return list(session.actions), won, admissible


def test_listed_order_wins_and_differs_from_intro_where_ties_exist(small: AlfWorldKind) -> None:
    games = [t.index for t in small.tasks("train") if t.family == "pick_and_place_simple"][:GAMES]
    intro = {index: expert_game(small, index, "intro") for index in games}
    listed = {index: expert_game(small, index, "listed") for index in games}
    assert all(won for _, won, _ in listed.values()), {i: g[0] for i, g in listed.items() if not g[1]}
    assert all(won for _, won, _ in intro.values())
    assert any(intro[i][0] != listed[i][0] for i in games), "no game where the two orders part"
    for actions, _, admissible in listed.values():  # the first move goes to the first likely receptacle listed
        first = actions[0]
        if first.startswith("go to "):
            gone = [c for c in admissible[0] if c.startswith("go to ")]
            same_class = [c for c in gone if c.rsplit(" ", 1)[0] == first.rsplit(" ", 1)[0]]
            assert first == same_class[0], (first, gone)


def test_listed_order_breaks_ties_by_name_intro_by_the_first_observation() -> None:
    intro = "You are in the middle of a room. Looking quickly around you, you see a shelf 2, a shelf 1, and a sofa 1.\n"
    admissible = ["go to shelf 1", "go to shelf 2", "go to sofa 1", "inventory", "look"]
    task = ObservedTask("pick_and_place_simple", target="book", parent="sofa")
    chosen = {}
    for order in ("intro", "listed"):
        expert = ObservedExpert(task, order)
        expert.start(intro, admissible)
        chosen[order] = expert.next_action(admissible)
    assert chosen == {"intro": "go to shelf 2", "listed": "go to shelf 1"}
    with pytest.raises(ValueError, match="expert order 'random' is not one of intro, listed"):
        ObservedExpert(task, "random")
