"""The observed expert answers from states off its own path (what DAgger's labels need,
docs/design/028-ladder-dagger.md): after an agent's detour (objects taken and put anywhere, closed receptacles passed
by) its next actions still win the game."""

from __future__ import annotations

import random

from envhub.core.session import Session
from envhub.envs.alfworld.kind import AlfWorldKind
from envhub.envs.alfworld.observed_expert import ObservedExpert, ObservedTask

GAMES = 16
"""Pick-and-place training games, each after a detour of `DETOUR` random actions (small rooms: a few seconds)."""
DETOUR = 8


def detour_then_expert(kind: AlfWorldKind, index: int, rng: random.Random) -> tuple[bool, list[str]]:
    """`DETOUR` random admissible actions, then the expert's until it wins (50 turns in all); won, actions."""
    session = Session.start(kind, kind.tasks("train")[index], options={"expert_order": "listed"}, max_steps=50)
    won = False
    for _ in range(DETOUR):
        choices = [a for a in session.admissible_actions() if a not in ("look", "inventory", "help")]
        won = session.step(rng.choice(choices)).result.won
        if won:
            break
    while not won and not session.done and (plan := session.expert_actions()):
        won = session.step(plan[0]).result.won
    session.close()
    return won, list(session.actions)


def test_the_expert_wins_after_a_random_detour(small: AlfWorldKind) -> None:
    games = [t.index for t in small.tasks("train") if t.family == "pick_and_place_simple"][:GAMES]
    rng = random.Random(0)
    played = {index: detour_then_expert(small, index, rng) for index in games}
    lost = {index: actions for index, (won, actions) in played.items() if not won}
    assert not lost, lost


INTRO = "You are in the middle of a room. Looking quickly around you, you see a drawer 1, a shelf 1, and a sofa 1.\n"
TASK = ObservedTask("pick_and_place_simple", target="book", parent="sofa")


def test_an_object_the_goal_does_not_need_is_put_back() -> None:
    expert = ObservedExpert(TASK, "listed")
    expert.start(INTRO, ["go to drawer 1", "go to shelf 1", "go to sofa 1"])
    expert.observe("go to shelf 1", "On the shelf 1, you see a pen 1.", ["go to drawer 1", "go to sofa 1",
                   "take pen 1 from shelf 1"])  # fmt: skip
    holding = ["go to drawer 1", "go to sofa 1", "move pen 1 to shelf 1"]
    expert.observe("take pen 1 from shelf 1", "You pick up the pen 1 from the shelf 1.", holding)
    assert expert.next_action(holding) == "move pen 1 to shelf 1"


def test_the_target_placed_off_the_goal_is_taken_again() -> None:
    expert = ObservedExpert(TASK, "listed")
    expert.start(INTRO, ["go to drawer 1", "go to shelf 1", "go to sofa 1"])
    at_shelf = ["go to drawer 1", "go to sofa 1", "take book 1 from shelf 1"]
    expert.observe("go to shelf 1", "On the shelf 1, you see a book 1.", at_shelf)
    expert.observe("take book 1 from shelf 1", "You pick up the book 1.", ["go to drawer 1", "go to sofa 1"])
    expert.observe(
        "go to drawer 1", "The drawer 1 is open.", ["go to shelf 1", "go to sofa 1", "move book 1 to drawer 1"]
    )
    after = ["go to shelf 1", "go to sofa 1", "take book 1 from drawer 1"]
    expert.observe("move book 1 to drawer 1", "You move the book 1 to the drawer 1.", after)
    assert expert.next_action(after) == "take book 1 from drawer 1"


def test_a_closed_receptacle_passed_by_is_searched_later() -> None:
    expert = ObservedExpert(TASK, "listed")
    expert.start(INTRO, ["go to drawer 1", "go to shelf 1", "go to sofa 1"])
    expert.observe("go to drawer 1", "The drawer 1 is closed.", ["go to shelf 1", "go to sofa 1", "open drawer 1"])
    expert.observe("go to sofa 1", "On the sofa 1, you see nothing.", ["go to drawer 1", "go to shelf 1"])
    expert.observe("go to shelf 1", "On the shelf 1, you see nothing.", ["go to drawer 1", "go to sofa 1"])
    assert expert.next_action(["go to drawer 1", "go to sofa 1"]) == "go to drawer 1"


def test_a_receptacle_passed_by_with_full_hands_is_searched_later() -> None:
    expert = ObservedExpert(TASK, "listed")
    expert.start(INTRO, ["go to drawer 1", "go to shelf 1", "go to sofa 1"])
    at_sofa = ["go to drawer 1", "go to shelf 1", "take pen 1 from sofa 1"]
    expert.observe("go to sofa 1", "On the sofa 1, you see a pen 1.", at_sofa)
    expert.observe("take pen 1 from sofa 1", "You pick up the pen 1.", ["go to drawer 1", "go to shelf 1"])
    expert.observe("go to shelf 1", "On the shelf 1, you see a book 1.", ["go to drawer 1", "go to sofa 1"])
    expert.observe("go to sofa 1", "On the sofa 1, you see nothing.", ["go to drawer 1", "go to shelf 1"])
    expert.observe("move pen 1 to sofa 1", "You move the pen 1 to the sofa 1.", at_sofa)
    assert expert.next_action(at_sofa) == "go to shelf 1"
