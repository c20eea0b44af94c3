"""Task discovery, splits, options and error mapping of the ScienceWorld kind."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from envhub.core.errors import EnvhubError
from envhub.core.registry import kind_class
from envhub.core.session import Session
from envhub.envs.scienceworld import catalog
from envhub.envs.scienceworld.jvm import Jvm
from envhub.envs.scienceworld.kind import NONDETERMINISTIC_TASKS, ScienceWorldKind
from envhub.envs.scienceworld.options import KNOWN_SIMPLIFICATIONS

STUDY = Path(__file__).resolve().parents[3] / "docs" / "results" / "scienceworld-determinism.json"
"""The committed result of `python -m envhub.bench.scienceworld_determinism`."""


def test_registered_under_its_name() -> None:
    assert kind_class("scienceworld") is ScienceWorldKind


def test_shipped_catalog_matches_the_jar() -> None:
    jvm = Jvm()
    try:
        from_jar = catalog.read_from_jar(jvm)
        simulator = jvm.new_simulator()
        jar_simplifications = set(str(simulator.getPossibleSimplifications()).split(", "))
    finally:
        jvm.close()
    assert from_jar == catalog.load_catalog()
    assert len(from_jar["tasks"]) == 30
    assert jar_simplifications | {"easy"} == KNOWN_SIMPLIFICATIONS


def test_splits_follow_the_package_variation_lists(kind: ScienceWorldKind) -> None:
    assert kind.splits() == ["train", "dev", "test", "type-train", "type-heldout"]
    counts = {split: len(kind.tasks(split)) for split in catalog.SPLITS}
    assert counts == {"train": 3592, "dev": 1796, "test": 1819}  # ScienceWorld paper, Table 1 totals
    boil = [spec.task_id for spec in kind.tasks("train") if spec.family == "boil"]
    assert boil == [f"boil/{v}" for v in range(14)]
    for split in kind.splits():
        specs = kind.tasks(split)
        assert [spec.index for spec in specs] == list(range(len(specs)))
        assert {spec.split for spec in specs} == {split}
    assert kind.tasks("test")[0].task_id == "boil/21"
    assert {spec.family for spec in kind.tasks("dev")} == {t["name"] for t in catalog.load_catalog()["tasks"]}


def test_type_split_is_divopd_table_6(kind: ScienceWorldKind) -> None:
    """Disjoint task types (17 training, 13 held out, every type in one), the first half of each type's variation
    ids, one fixed shuffle; the same game ids as the jar's splits."""
    train, held_out = kind.tasks("type-train"), kind.tasks("type-heldout")
    assert len(catalog.TRAINING_TYPES) == 17 and len(catalog.HELD_OUT_TYPES) == 13
    assert {s.family for s in train} == set(catalog.TRAINING_TYPES)
    assert {s.family for s in held_out} == set(catalog.HELD_OUT_TYPES)
    assert not {s.family for s in train} & {s.family for s in held_out}  # no held-out type is a training type
    names = {t["name"]: t["variations"] for t in catalog.load_catalog()["tasks"]}
    assert set(catalog.TRAINING_TYPES) | set(catalog.HELD_OUT_TYPES) == set(names)
    for specs in (train, held_out):
        assert [s.index for s in specs] == list(range(len(specs)))
        for family in {s.family for s in specs}:
            variations = sorted(int(s.task_id.rpartition("/")[2]) for s in specs if s.family == family)
            assert variations == list(range(names[family] // 2))
        assert len({s.family for s in specs[:20]}) > 3  # shuffled: the first tasks mix types
    assert [s.task_id for s in kind.tasks("type-heldout")][:3] == [s.task_id for s in held_out][:3]  # fixed
    assert kind.task("freeze/0").split == "train"  # an id names one game, listed under the jar's split
    assert len(train) == 2294 and len(held_out) == 1308


def test_deterministic_flags_come_from_the_committed_study(kind: ScienceWorldKind) -> None:
    study = json.loads(STUDY.read_text())
    flagged = frozenset(name for name, row in study["tasks"].items() if not row["deterministic"])
    assert flagged == NONDETERMINISTIC_TASKS == frozenset(study["summary"]["nondeterministic"])
    for spec in kind.tasks("dev"):
        assert spec.deterministic == (spec.family not in flagged)


def test_task_lookup_and_unknown_ids(kind: ScienceWorldKind) -> None:
    spec = kind.task("boil/3")
    assert (spec.split, spec.index, spec.family) == ("train", 3, "boil")
    for bad in ("boil/30", "boil/-1", "boil", "no-such-task/0", "boil/dev"):
        with pytest.raises(KeyError):
            kind.task(bad)
    with pytest.raises(KeyError):
        kind.tasks("validation")


@pytest.mark.parametrize("value", ["bogus", "easy,", "open Doors", "teleportAction,,openDoors"])
def test_bad_simplifications_are_rejected(kind: ScienceWorldKind, value: str) -> None:
    with pytest.raises(ValueError, match="simplifications"):
        kind.validate_options({"simplifications": value})
    with pytest.raises(EnvhubError) as caught:
        Session.start(kind, kind.task("boil/0"), options={"simplifications": value})
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_OPTION")


def test_unknown_option_and_task_incompatible_simplification(kind: ScienceWorldKind) -> None:
    with pytest.raises(ValueError, match="unknown option"):
        kind.validate_options({"simplification": "easy"})
    kind.validate_options({"simplifications": "teleportAction,openDoors"})
    with pytest.raises(EnvhubError) as caught:
        Session.start(kind, kind.task("power-component/0"), options={"simplifications": "noElectricalAction"})
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "BAD_OPTION")


def test_a_jvm_that_cannot_start_is_reported() -> None:
    jvm = Jvm(["-XX:hashCode=2"])  # experimental flag without -XX:+UnlockExperimentalVMOptions
    with pytest.raises(EnvhubError) as caught:
        jvm.new_simulator()
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAVAILABLE, "JVM_START_FAILED")


def test_trainer_selects_the_type_split_and_never_trains_a_held_out_type(kind: ScienceWorldKind) -> None:
    """The trainer's task selection over the split set: `env.train_split=type-train` for training,
    `env.eval_split=type-heldout` for `eval.every` and `trainer eval`; the two share no task type."""
    from trainer.config import load_config
    from trainer.held_out import held_out_tasks
    from trainer.runs import training_tasks

    class Listing:  # the server's ListTasks answer, read from the real kind
        def task_ids(self, split: str, families: tuple[str, ...] | list[str] = ()) -> list[str]:
            return [s.task_id for s in kind.tasks(split) if not families or s.family in families]

    overrides = ["env.name=scienceworld", "env.families=[]", "env.max_tasks=0", "env.train_split=type-train"]
    config = load_config("quickstart.yaml", [*overrides, "env.eval_split=type-heldout", "eval.num_tasks=2000"])
    trained = {task.partition("/")[0] for task in training_tasks(config.env, Listing())}
    [held_out] = held_out_tasks(config, Listing()).values()
    evaluated = {task.partition("/")[0] for task in held_out}
    assert trained == set(catalog.TRAINING_TYPES) and evaluated == set(catalog.HELD_OUT_TYPES)
    assert not trained & evaluated
