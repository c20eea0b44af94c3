"""Game states stepped in Python answer exactly as fast-downward's library, and games play exactly as stock ALFWorld.

Both sides are the real thing: the library is the one copy of this process (the generator's
planner-expert env), and stock ALFWorld is `AlfredDemangler(PddlEnv)` on it without envhub's caches.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fast_downward
import pytest
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.envs.pddl import PddlEnv
from textworld.envs.pddl.logic import Atom

from envhub.envs.alfworld import memo
from envhub.envs.alfworld.engine import GameEngine
from envhub.envs.alfworld.generator.scene import ROOMS
from envhub.envs.alfworld.generator.solver import expert_env
from envhub.envs.alfworld.generator.splits import task_types
from envhub.envs.alfworld.generator.tasks import TASK_TYPES
from envhub.envs.alfworld.library import SharedDownward
from envhub.envs.alfworld.sas import SasTask
from envhub.envs.alfworld.taskset import AlfredGame, GeneratedTaskSet

STEPS = 40


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> list[AlfredGame]:
    """The first train game of every task type (small rooms), and one whole-room game."""
    cache: Path = tmp_path_factory.mktemp("alfworld-sas")
    small = GeneratedTaskSet(seed=0, cache_dir=cache)
    order = task_types("train", 0)
    whole = GeneratedTaskSet(seed=0, cache_dir=cache, room=ROOMS["whole"])
    return [small.game("train", order.index(t)) for t in TASK_TYPES] + [whole.game("train", 0)]


@pytest.fixture(scope="module")
def library() -> Any:
    """This process's native library (the one the generator's planner-expert env loaded)."""
    return expert_env()[0].unwrapped.downward_lib


@pytest.fixture(scope="module")
def shared() -> Iterator[SharedDownward]:
    handle_library = SharedDownward()
    yield handle_library
    handle_library.close()


def _library_state(lib: Any) -> list[str]:
    atoms = (Atom * lib.get_state_size())()
    lib.get_state(atoms)
    return [atom.name for atom in atoms]


def _library_applicable(lib: Any) -> list[tuple[int, str, int]]:
    operators = (fast_downward.Operator * lib.get_applicable_operators_count())()
    lib.get_applicable_operators(operators)
    return [(op.id, op.name, op.nb_effect_atoms) for op in operators]


def test_sas_task_answers_like_the_library(games: list[AlfredGame], library: Any) -> None:
    """Random walks, mostly along the library's own plans (so every task type reaches its goal)."""
    memo.install()
    reached_goal = 0
    for number, game in enumerate(games):
        domain, problem = game.game_json["pddl_domain"], game.game_json["pddl_problem"]
        _, sas = fast_downward.pddl2sas(domain, problem)
        _, sas_replan = fast_downward.pddl2sas(domain, problem, optimize=True)
        task = SasTask(sas)
        values = task.initial_state()
        library.load_sas(sas.encode())
        library.load_sas_replan(sas_replan.encode())
        rng = random.Random(number)
        for _ in range(STEPS):
            applicable = _library_applicable(library)
            assert [(op.id, op.name, op.nb_effect_atoms) for op in task.applicable(values)] == applicable
            assert [task.atom((var, value)) for var, value in enumerate(values)] == _library_state(library)
            assert task.is_goal(values) == library.check_goal()
            if library.check_goal() or not applicable:
                reached_goal += library.check_goal()
                break
            chosen = applicable[rng.randrange(len(applicable))]
            if rng.random() < 0.7 and library.replan(False):
                plan = (fast_downward.Operator * library.get_last_plan_length())()
                library.get_last_plan(plan)
                chosen = next(op for op in applicable if op[1] == plan[0].name)
            effects = (Atom * chosen[2])()
            library.apply_operator(chosen[0], effects)
            assert [task.atom(fact) for fact in task.apply(values, task.operators[chosen[0]])] == [
                atom.name for atom in effects
            ]
    assert reached_goal >= len(TASK_TYPES)


def test_rewritten_state_loads_into_the_library(games: list[AlfredGame], library: Any) -> None:
    """A state written back as the task's initial state is the same state for the library."""
    memo.install()
    game = games[-1]
    _, sas = fast_downward.pddl2sas(game.game_json["pddl_domain"], game.game_json["pddl_problem"])
    task = SasTask(sas)
    values = task.initial_state()
    rng = random.Random(7)
    for _ in range(12):
        ops = task.applicable(values)
        task.apply(values, ops[rng.randrange(len(ops))])
    library.load_sas(task.with_state(sas, values).encode())
    assert _library_state(library) == [task.atom((var, value)) for var, value in enumerate(values)]
    true_atoms = [name for name in _library_state(library) if name.startswith("Atom ")]
    assert task.values_from_atoms(true_atoms) == values


def _true_atoms(task: SasTask, values: list[int]) -> set[str]:
    named = (task.atom((var, value)) for var, value in enumerate(values))
    return {name for name in named if name.startswith("Atom ")}


def test_values_after_a_states_differences_equal_its_whole_state(games: list[AlfredGame]) -> None:
    """What a restore computes from a snapshot's fact differences is what the state's true atoms give."""
    memo.install()
    changed = 0
    for number, game in enumerate(games):
        _, sas = fast_downward.pddl2sas(game.game_json["pddl_domain"], game.game_json["pddl_problem"])
        task = SasTask(sas)
        values = task.initial_state()
        initial = _true_atoms(task, values)
        initial_values = task.values_from_atoms(initial)
        rng = random.Random(number)
        for _ in range(STEPS):
            ops = task.applicable(values)
            if not ops or task.is_goal(values):
                break
            task.apply(values, ops[rng.randrange(len(ops))])
            now = _true_atoms(task, values)
            changed += bool(initial - now)
            assert task.values_after(initial_values, initial - now, now - initial) == task.values_from_atoms(now)
    assert changed >= len(games)  # every walk removed initial atoms, not only added some


def _stock(library: Any) -> Any:
    """Stock ALFWorld's env on this process's library (ALFWorld builds `AlfredDemangler(PddlEnv)`)."""
    env = PddlEnv.__new__(PddlEnv)
    textworld.Environment.__init__(env, textworld.EnvInfos(won=True, admissible_commands=True))
    env.downward_lib = library
    return AlfredDemangler(env)


def _play(env: Any, reset: Any, actions_from: Any) -> list[tuple[str, list[str], bool]]:
    """Feedback, sorted admissible commands and `won` after reset and after each action `actions_from` picks."""
    state = reset()
    out = [(state["feedback"], sorted(state["admissible_commands"]), bool(state["won"]))]
    for action in actions_from(out):
        state = env.step(action)
        state = state[0] if isinstance(state, tuple) else state
        out.append((state["feedback"], sorted(state["admissible_commands"]), bool(state["won"])))
    return out


def test_games_play_exactly_as_stock_alfworld(games: list[AlfredGame], library: Any, shared: SharedDownward) -> None:
    """The walkthrough with looks and inventories mixed in (it wins), then random admissible commands."""
    for number, game in enumerate(games):
        walk = [a for action in game.game_json["walkthrough"] for a in ("look", action, "inventory")]

        def walkthrough(_: list[tuple[str, list[str], bool]], walk: list[str] = walk) -> Iterator[str]:
            yield from walk

        def wander(seen: list[tuple[str, list[str], bool]], seed: int = number) -> Iterator[str]:
            rng = random.Random(seed)
            for _ in range(STEPS):
                yield rng.choice(seen[-1][1])

        memo.uninstall()
        stock = _stock(library)
        stock.load(game.game_json)
        expected = [_play(stock, stock.reset, plan) for plan in (walkthrough, wander)]
        memo.install()
        engine = GameEngine(shared)
        engine.load(game.game_json, f"test-sas/{number}/{game.task_id}")
        played = [_play(engine, engine.reset, plan) for plan in (walkthrough, wander)]
        engine.close()
        for mine, theirs in zip(played, expected, strict=True):
            first = next((i for i, pair in enumerate(zip(mine, theirs, strict=True)) if pair[0] != pair[1]), None)
            assert first is None, (game.task_id, first, mine[first], theirs[first])
        assert expected[0][-1][2] is True
