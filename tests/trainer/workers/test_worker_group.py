"""The worker group's pieces that need no model: the executor contract, task splitting, merging."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from trainer.rollout import RolloutStats, Trajectory
from trainer.workers import LocalExecutor, merge_rollouts, split_tasks


class Accumulator:
    """A stand-in role with state, to show the executor's call semantics."""

    def __init__(self, start: int) -> None:
        self.total = start

    def add(self, value: int) -> int:
        self.total += value
        return self.total


def test_local_executor_runs_calls_in_order_and_passes_pending_results_on() -> None:
    executor = LocalExecutor()
    first, second = executor.spawn(None, Accumulator, 1), executor.spawn(None, Accumulator, 10)
    pending = [executor.submit(first, Accumulator.add, 2), executor.submit(second, Accumulator.add, 3)]
    assert executor.gather(pending) == [3, 13]
    # A pending result is a valid argument of another call (as a Ray object reference is).
    assert executor.call(second, Accumulator.add, executor.submit(first, Accumulator.add, 1).as_argument()) == 17
    executor.kill([first, second])


def test_executors_refuse_a_method_of_another_class() -> None:
    executor = LocalExecutor()
    worker = executor.spawn(None, Accumulator, 1)
    with pytest.raises(TypeError, match="'split_tasks' is not a method of Accumulator"):
        executor.call(worker, split_tasks, 2)  # type: ignore[arg-type]
    assert worker.ref.total == 1


def test_split_tasks_is_contiguous_and_near_equal() -> None:
    tasks = [(f"t{i}", i) for i in range(7)]
    chunks = split_tasks(tasks, 3)
    assert [len(c) for c in chunks] == [3, 2, 2]
    assert [t for c in chunks for t in c] == tasks
    assert split_tasks(tasks[:1], 3) == [[("t0", 0)], [], []]


def test_merge_renumbers_groups_batch_unique() -> None:
    def part(groups: list[int], turns: int) -> tuple[list[Trajectory], RolloutStats]:
        return [Trajectory(f"t{g}", group=g, seed=0) for g in groups], RolloutStats(turns=turns, wall_s=turns)

    merged, stats = merge_rollouts([part([0, 0, 1], 4), part([0, 1, 1], 6)])
    assert [t.group for t in merged] == [0, 0, 1, 2, 3, 3]
    assert stats.turns == 10 and stats.wall_s == 6


def test_merge_sums_every_counter_and_keeps_the_longest_wall_time() -> None:
    def stats(n: int) -> RolloutStats:
        return RolloutStats(
            turns=10 * n,
            invalid_turns=n,
            truncated_turns=2 * n,
            matched_turns=9 * n,
            trimmed_prompts=3 * n,
            generated_tokens=100 * n,
            retries=4 * n,
            takeovers=5 * n,
            teacher_turns=6 * n,
            rewinds=7 * n,
            dropped=Counter({"deadline": n, f"only-{n}": 1}),
            forks=8 * n,
            fork_s=0.125 * n,
            generate_s=0.5 * n,
            step_s=0.25 * n,
            wall_s=float(n),
        )

    _, merged = merge_rollouts([([], stats(1)), ([], stats(2))])
    expected = {
        "turns": 30,
        "invalid_turns": 3,
        "truncated_turns": 6,
        "matched_turns": 27,
        "trimmed_prompts": 9,
        "generated_tokens": 300,
        "retries": 12,
        "takeovers": 15,
        "teacher_turns": 18,
        "rewinds": 21,
        "dropped": Counter({"deadline": 3, "only-1": 1, "only-2": 1}),
        "forks": 24,
        "fork_s": 0.375,  # summed: the forks of different workers are different calls
        "generate_s": 1.5,
        "step_s": 0.75,
        "wall_s": 2.0,  # workers run side by side: the merged call took as long as the slowest
    }
    # A field added to RolloutStats must get a merge rule here (and in RolloutStats.merge).
    assert {f.name: getattr(merged, f.name) for f in dataclasses.fields(RolloutStats)} == expected


def test_local_ray_start_is_retried_only_when_the_raylet_missed_its_start_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    from trainer.config import load_config
    from trainer.workers.executor import LOCAL_RAY_START_ATTEMPTS, init_ray

    calls: list[str] = []
    errors = iter([Exception("The current node timed out during startup. ...")] * (LOCAL_RAY_START_ATTEMPTS - 1))

    def fake_init(**_: object) -> None:  # Ray's own start is what is stood in for, not our code
        calls.append("init")
        error = next(errors, None)
        if error is not None:
            raise error

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    config = load_config("quickstart.yaml")
    init_ray(config.ray)
    assert calls == ["init", "shutdown"] * (LOCAL_RAY_START_ATTEMPTS - 1) + ["init"]
    errors = iter([ValueError("bad runtime_env")])
    with pytest.raises(ValueError, match="bad runtime_env"):  # any other failure is not retried
        init_ray(config.ray)
