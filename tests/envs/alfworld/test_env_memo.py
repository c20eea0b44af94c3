"""The engine caches give the outputs of the functions they replace, and the shared library swaps state exactly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fast_downward
import pytest
import textworld.envs.pddl.logic as pddl_logic
import textworld.envs.pddl.textgen as textgen
from textworld.logic import Rule

from envhub.envs.alfworld import memo, translations
from envhub.envs.alfworld.engine import GameEngine
from envhub.envs.alfworld.library import SharedDownward
from envhub.envs.alfworld.sas import sas_task
from envhub.envs.alfworld.taskset import AlfredGame, GeneratedTaskSet
from envhub.envs.alfworld.translations import TranslationStore


@pytest.fixture(scope="module")
def game(tmp_path_factory: pytest.TempPathFactory) -> AlfredGame:
    cache: Path = tmp_path_factory.mktemp("alfworld-cache")
    return GeneratedTaskSet(seed=0, cache_dir=cache).game("valid_seen", 0)


@pytest.fixture(scope="module")
def library() -> Iterator[SharedDownward]:
    shared = SharedDownward()
    yield shared
    shared.close()


@pytest.fixture
def uncached() -> Iterator[None]:
    """Run a block with the original functions, then put the caches back."""
    memo.uninstall()
    yield
    memo.install()


def play(engine: GameEngine, game: AlfredGame, actions: list[str]) -> list[tuple[str, list[str], bool]]:
    engine.load(game.game_json, game.task_id)
    engine.reset()
    return [(engine.step(a)["feedback"], engine.admissible, engine.won) for a in actions]


def test_cached_functions_equal_originals(game: AlfredGame) -> None:
    memo.install()
    domain, problem, grammar = (game.game_json[k] for k in ("pddl_domain", "pddl_problem", "grammar"))
    originals = memo._ORIGINALS
    for optimize in (False, True):
        _, sas = originals["pddl2sas"](domain, problem, optimize=optimize)
        for _ in range(2):  # miss, then hit
            assert fast_downward.pddl2sas(domain, problem, optimize=optimize)[1] == sas
    actions, rules = originals["logic_parse"](grammar, rule_name="pddlStart")
    cached_actions, cached_rules = pddl_logic._parse_and_convert(grammar, rule_name="pddlStart")
    assert {k: vars(a) for k, a in actions.items()} == {k: vars(a) for k, a in cached_actions.items()}
    assert repr(dict(rules._rules)) == repr(dict(cached_rules._rules))
    for template in ("#intro#", "#look.feedback#", "You arrive at {r.name}. #examine_receptacle#"):
        expected = repr(originals["textgen_parse"](template, rule_name="symbols"))
        for _ in range(2):
            assert repr(textgen._parse_and_convert(template, rule_name="symbols")) == expected
    queries = sorted({r.condition for rs in rules._rules.values() for r in rs if r.condition})
    assert len(queries) > 10
    parse = originals["conjunctive_query"].__get__(None, Rule)
    for query in queries:
        assert str(Rule.parse_conjunctive_query(query)) == str(parse(query))


@pytest.mark.parametrize("index", [0, 1, 2])
def test_episodes_with_and_without_speedups_are_identical(
    tmp_path_factory: pytest.TempPathFactory, library: SharedDownward, index: int, uncached: None
) -> None:
    game = GeneratedTaskSet(seed=0, cache_dir=tmp_path_factory.getbasetemp() / "memo").game("valid_unseen", index)
    engine = GameEngine(library)
    engine.load(game.game_json, game.task_id)
    engine.reset()
    plan = engine.replan()
    gotos = [a for a in engine.admissible if a.startswith("go to ")]
    actions = ["look", "inventory", "go to nowhere", *gotos[:4], *plan]
    without = play(engine, game, actions)
    memo.install()
    with_speedups = play(GameEngine(library), game, actions)
    assert with_speedups == without and with_speedups[-1][2] is True


def test_state_rewrite_round_trips(game: AlfredGame) -> None:
    _, sas = memo.cached_pddl2sas(game.game_json["pddl_domain"], game.game_json["pddl_problem"])
    task = sas_task(sas)
    assert task.with_state(sas, task.initial) == sas
    true_atoms = [
        value
        for variable, initial in zip(task.variables, task.initial, strict=True)
        for value in variable.values[initial : initial + 1]
        if value.startswith("Atom ")
    ]
    assert task.values_from_atoms(true_atoms) == task.initial_state()


def test_interleaved_engines_on_one_library_equal_separate_runs(game: AlfredGame, library: SharedDownward) -> None:
    memo.install()
    first, second = GameEngine(library), GameEngine(library)
    first.load(game.game_json, game.task_id)
    first.reset()
    plan = first.replan()
    alone = play(GameEngine(library), game, plan)
    second.load(game.game_json, game.task_id)
    second.reset()
    swaps = library.swaps
    together = []
    for action in plan:  # alternate: each step swaps the other engine's state out of the library
        together.append((first.step(action)["feedback"], first.admissible, first.won))
        second.step(action)
    assert together == alone and library.swaps == swaps  # stepping never loads a state into the library
    assert (second.admissible, second.won) == (first.admissible, first.won)


def _task_summary(task: object) -> list[object]:
    """What `PddlState` and the engine read of a translator task, as comparable text."""
    return [
        [(a.name, [str(p) for p in a.parameters], [str(e.literal) for e in a.effects]) for a in task.actions],  # type: ignore[attr-defined]
        [(o.name, o.type_name) for o in task.objects],  # type: ignore[attr-defined]
        [str(fact) for fact in task.init],  # type: ignore[attr-defined]
        [(t.name, t.supertype_names) for t in task.types],  # type: ignore[attr-defined]
        [a.name for a in task.axioms],  # type: ignore[attr-defined]
    ]


def test_stored_translations_equal_the_translators(game: AlfredGame, tmp_path: Path) -> None:
    """A translation read back from the store (another process's, say) is the translator's own."""
    domain, problem = game.game_json["pddl_domain"], game.game_json["pddl_problem"]
    store = TranslationStore(tmp_path / "translations")
    for optimize in (False, True):
        task, sas = memo._ORIGINALS["pddl2sas"](domain, problem, optimize=optimize)
        memo.install(store)
        memo._pddl2sas.cache_clear()
        fast_downward.pddl2sas(domain, problem, optimize=optimize)  # translated, then stored
        assert store.get(domain, problem, optimize) == sas
        memo._pddl2sas.cache_clear()
        read_task, read_sas = fast_downward.pddl2sas(domain, problem, optimize=optimize)  # read back
        assert read_sas == sas and _task_summary(read_task) == _task_summary(task)
    assert len(list(store.folder.rglob("*.sas.gz"))) == 2


def test_a_stored_games_two_translations_parse_its_task_once(
    game: AlfredGame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load asks for the plain and the optimised translation; read from the store, the task is parsed once."""
    domain, problem = game.game_json["pddl_domain"], game.game_json["pddl_problem"]
    store = TranslationStore(tmp_path / "translations")
    for optimize in (False, True):
        store.put(domain, problem, optimize, memo._ORIGINALS["pddl2sas"](domain, problem, optimize=optimize)[1])
    parsed: list[str] = []

    def parse_task(domain: str, problem: str) -> object:
        parsed.append(problem)
        return translations.parse_task(domain, problem)

    monkeypatch.setattr(memo, "parse_task", parse_task)
    memo.install(store)
    memo._pddl2sas.cache_clear()
    memo._parsed_task.cache_clear()
    plain, _ = fast_downward.pddl2sas(domain, problem)
    optimised, _ = fast_downward.pddl2sas(domain, problem, optimize=True)
    assert parsed == [problem]
    assert optimised is plain
