"""Checks every envhub environment must pass over a real server, reusable per environment.

    spec = ComplianceSpec("scienceworld", {"boil/0": ["look around", "open door to kitchen", ...]})
    run_all(EnvhubClient(target), spec)

Each `check_*` function raises `ComplianceError` with a message saying what differed.
The server under test must allow at least `spec.max_sessions` sessions, or exactly that many
when `check_max_sessions` runs (it fills the server).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc

from envhub.client import EnvhubClient, EnvhubError, EnvView, Sessions, SessionStart, TaskRef
from envhub.v1 import snapshot_pb2


class ComplianceError(AssertionError):
    """An environment or server broke the envhub contract."""


@dataclass(frozen=True)
class ComplianceSpec:
    """What to play: an environment, a few deterministic tasks, and a few actions for each."""

    environment: str
    tasks: Mapping[str, Sequence[str]]
    """Deterministic task id -> actions to play from reset (at least 2 each)."""
    seed: int = 7
    max_sessions: int | None = None
    """The server's max_sessions, for `check_max_sessions` (None skips it)."""

    def __post_init__(self) -> None:
        if not self.tasks or any(len(actions) < 2 for actions in self.tasks.values()):
            raise ValueError("give at least one task with at least two actions")


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ComplianceError(message)


def _trace(view: EnvView) -> tuple[object, ...]:
    return (view.text, view.score, view.step_index, view.reward, view.terminated, view.truncated, view.won)


def _play(client: EnvhubClient, session_id: str, actions: Sequence[str]) -> list[tuple[object, ...]]:
    return [_trace(client.step(session_id, action)) for action in actions]


def _expect_error(call: Callable[[], object], code: grpc.StatusCode, what: str, reason: str = "") -> EnvhubError:
    try:
        call()
    except EnvhubError as error:
        _expect(error.code == code, f"{what}: expected {code.name}, got {error}")
        _expect(not reason or error.reason == reason, f"{what}: expected reason {reason}, got {error.reason}")
        return error
    raise ComplianceError(f"{what}: expected {code.name}, but the call succeeded")


def check_seed_determinism(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """Two sessions with the same task and seed see the same reset and the same steps."""
    for task_id, actions in spec.tasks.items():
        traces = []
        for _ in range(2):
            start = client.create_session(spec.environment, task=task_id, seed=spec.seed)
            traces.append((start.view, _play(client, start.session_id, actions)))
            client.close_session(start.session_id)
        _expect(traces[0][0] == traces[1][0], f"{task_id}: two resets with seed {spec.seed} differ")
        for index, (first, second) in enumerate(zip(traces[0][1], traces[1][1], strict=True), start=1):
            _expect(first == second, f"{task_id}: step {index} differs between equal seeds: {first} != {second}")


def check_snapshot_restore(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """A restored snapshot shows the recorded observation and continues like the original."""
    for task_id, actions in spec.tasks.items():
        half = len(actions) // 2
        start = client.create_session(spec.environment, task=task_id, seed=spec.seed)
        _play(client, start.session_id, actions[:half])
        snapshot = client.snapshot(start.session_id)
        _expect(snapshot.step_index == half, f"{task_id}: snapshot step_index {snapshot.step_index} != {half}")
        original = _play(client, start.session_id, actions[half:])
        restored = client.restore(snapshot)
        _expect(restored.view.step_index == half, f"{task_id}: restored step_index is not {half}")
        continued = _play(client, restored.session_id, actions[half:])
        _expect(original == continued, f"{task_id}: the restored session continues differently")
        client.close_session(start.session_id)
        client.close_session(restored.session_id)


def check_fork(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """Forks continue exactly like the original, and independently of each other."""
    for task_id, actions in spec.tasks.items():
        half = len(actions) // 2
        start = client.create_session(spec.environment, task=task_id, seed=spec.seed)
        _play(client, start.session_id, actions[:half])
        forks = client.fork(start.session_id, 2)
        _expect(len(set(forks)) == 2 and start.session_id not in forks, f"{task_id}: fork ids are not new and distinct")
        original = _play(client, start.session_id, actions[half:])
        first = _play(client, forks[0], actions[half:])
        _play(client, forks[1], actions[:1])  # an unrelated step must not disturb the first fork's history
        _expect(original == first, f"{task_id}: a fork continues differently from its source")
        for session_id in (start.session_id, *forks):
            client.close_session(session_id)


def check_restore_batch(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """RestoreSnapshotBatch restores several snapshots in one call, each exactly as RestoreSnapshot would
    (the recorded observation, the same continuation), and answers a tampered one with its own
    INVALID_ARGUMENT in its place while the others go through."""
    for task_id, actions in spec.tasks.items():
        half = len(actions) // 2
        start = client.create_session(spec.environment, task=task_id, seed=spec.seed)
        at_start = client.snapshot(start.session_id)
        head = _play(client, start.session_id, actions[:half])
        middle = client.snapshot(start.session_id)
        tail = _play(client, start.session_id, actions[half:])
        envelope = snapshot_pb2.SignedSnapshot.FromString(middle.data)
        envelope.state += b"\x00"
        answers = client.restore_many([at_start, envelope.SerializeToString(), middle], return_errors=True)
        first, tampered, second = answers
        _expect(
            isinstance(tampered, EnvhubError) and tampered.code == grpc.StatusCode.INVALID_ARGUMENT,
            f"{task_id}: a tampered snapshot in a batch answered {tampered!r}, not INVALID_ARGUMENT in its place",
        )
        _expect(
            isinstance(first, SessionStart) and isinstance(second, SessionStart),
            f"{task_id}: a batch's good restores failed: {first!r}, {second!r}",
        )
        assert isinstance(first, SessionStart) and isinstance(second, SessionStart)
        _expect(first.view == start.view, f"{task_id}: a batch-restored start snapshot does not show the reset's view")
        _expect(
            (second.view.text, second.view.step_index) == (head[-1][0], half),
            f"{task_id}: a batch-restored snapshot does not show the recorded observation",
        )
        _expect(_play(client, second.session_id, actions[half:]) == tail, f"{task_id}: it continues differently")
        _expect(
            _play(client, first.session_id, actions) == head + tail, f"{task_id}: a restored start plays differently"
        )
        for session_id in (start.session_id, first.session_id, second.session_id):
            client.close_session(session_id)


GROUP_SIZE = 4
"""Sessions in the group `check_fork_started_group` starts."""


def _outcome(result: EnvView | EnvhubError) -> object:
    return (result.code, result.reason) if isinstance(result, EnvhubError) else result


def _lock_step(sessions: Sessions, views: Sequence[EnvView], plans: Sequence[Sequence[str]]) -> list[object]:
    """Step every session of `views` along its plan, all at once per turn (StepBatch); end them; the outcomes."""
    trace: list[object] = [list(views)]
    for turn in range(len(plans[0])):
        steps = [(view.session_id, plan[turn]) for view, plan in zip(views, plans, strict=True)]
        trace.append([_outcome(result) for result in sessions.step_each(steps)])
    for view in views:
        sessions.end(view.session_id)
    return trace


def check_fork_started_group(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """A group started as one create and G - 1 forks (`Sessions.start_group`) plays, step for step, exactly as
    G sessions created one by one with the same task and seed: each session along its own actions (a rotation
    of the task's), all stepped in lock-step with StepBatch, as a rollout does. (The two sets play one after
    the other, so a server allowing G sessions passes.)"""
    sessions = Sessions(client, spec.environment)
    for task_id, actions in spec.tasks.items():
        plans = [[*actions[i % len(actions) :], *actions[: i % len(actions)]] for i in range(GROUP_SIZE)]
        forked = sessions.start_group(task_id, size=GROUP_SIZE, seed=spec.seed)
        _expect(len({view.session_id for view in forked}) == GROUP_SIZE, f"{task_id}: a group's session ids repeat")
        group = _lock_step(sessions, forked, plans)
        alone = _lock_step(sessions, [sessions.start(task_id, seed=spec.seed) for _ in range(GROUP_SIZE)], plans)
        for turn, (mine, theirs) in enumerate(zip(group, alone, strict=True)):
            what = "the start" if turn == 0 else f"turn {turn}"
            _expect(mine == theirs, f"{task_id}: {what} of a fork-started group differs from separate sessions")


def check_error_codes(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """Each bad request gets its status code and leaves other sessions working."""
    task_id, actions = next(iter(spec.tasks.items()))
    witness = client.create_session(spec.environment, task=task_id, seed=spec.seed, max_steps=1000)
    closed = client.create_session(spec.environment, task=task_id, seed=spec.seed)
    client.close_session(closed.session_id)
    good = client.snapshot(witness.session_id).data
    envelope = snapshot_pb2.SignedSnapshot.FromString(good)  # the server's internal format, tampered with
    envelope.state += b"\x00"
    tampered = envelope.SerializeToString()
    invalid, not_found = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    env = spec.environment
    bad_requests: list[tuple[str, grpc.StatusCode, Callable[[], object]]] = [
        ("unknown session", not_found, lambda: client.step("nosuchreplica.0", actions[0])),
        ("closed session", not_found, lambda: client.step(closed.session_id, actions[0])),
        ("empty action", invalid, lambda: client.step(witness.session_id, "")),
        ("1 MB action", invalid, lambda: client.step(witness.session_id, "x" * 1_000_000)),
        ("unknown environment", invalid, lambda: client.create_session("no-such-env", task=task_id)),
        ("unknown task", invalid, lambda: client.create_session(env, task="no/such/task")),
        (
            "split index out of range",
            invalid,
            lambda: client.create_session(env, task=TaskRef(split="train", index=10**9)),
        ),
        ("unknown split", invalid, lambda: client.create_session(env, task=TaskRef(split="no-such-split", index=0))),
        ("bad option", invalid, lambda: client.create_session(env, task=task_id, options={"no_such": "1"})),
        ("garbage snapshot", invalid, lambda: client.restore(b"\xff\x00garbage" * 7)),
        ("truncated snapshot", invalid, lambda: client.restore(good[: len(good) // 2])),
        ("tampered snapshot", invalid, lambda: client.restore(tampered)),
        ("empty snapshot", invalid, lambda: client.restore(b"")),
        ("fork count 0", invalid, lambda: client.fork(witness.session_id, 0)),
    ]
    for what, code, call in bad_requests:
        _expect_error(call, code, what)
        before = client.snapshot(witness.session_id).step_index
        after = client.step(witness.session_id, actions[0]).step_index
        _expect(after == before + 1, f"after the {what} request the witness session stopped working")
    client.close_session(witness.session_id)


def check_episode_over(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """A step after the episode ended (here: truncated by max_steps=1) is FAILED_PRECONDITION."""
    task_id, actions = next(iter(spec.tasks.items()))
    start = client.create_session(spec.environment, task=task_id, seed=spec.seed, max_steps=1)
    result = client.step(start.session_id, actions[0])
    _expect(result.done, f"{task_id}: max_steps=1 did not end the episode after one step")
    _expect_error(
        lambda: client.step(start.session_id, actions[1]), grpc.StatusCode.FAILED_PRECONDITION, "step after the end"
    )
    client.reset_session(start.session_id)
    _expect(client.step(start.session_id, actions[0]) == result, f"{task_id}: reset did not restart the episode")
    client.close_session(start.session_id)


def check_double_close(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """Closing a session twice answers NOT_FOUND the second time."""
    task_id = next(iter(spec.tasks))
    start = client.create_session(spec.environment, task=task_id, seed=spec.seed)
    client.close_session(start.session_id)
    _expect_error(lambda: client.close_session(start.session_id), grpc.StatusCode.NOT_FOUND, "second close")


def check_max_sessions(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """Past the server's max_sessions, CreateSession answers RESOURCE_EXHAUSTED; closing frees room."""
    if spec.max_sessions is None:
        return
    task_id = next(iter(spec.tasks))
    opened = [client.create_session(spec.environment, task=task_id).session_id for _ in range(spec.max_sessions)]
    try:
        _expect_error(
            lambda: client.create_session(spec.environment, task=task_id),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "one session too many",
        )
        client.close_session(opened.pop())
        opened.append(client.create_session(spec.environment, task=task_id).session_id)
    finally:
        for session_id in opened:
            client.close_session(session_id)


CHECKS: tuple[Callable[[EnvhubClient, ComplianceSpec], None], ...] = (
    check_seed_determinism,
    check_snapshot_restore,
    check_restore_batch,
    check_fork,
    check_fork_started_group,
    check_error_codes,
    check_episode_over,
    check_double_close,
    check_max_sessions,
)
"""Every check, in a cheap-first order."""


def run_all(client: EnvhubClient, spec: ComplianceSpec) -> None:
    """Run every check; the first failure raises `ComplianceError`."""
    for check in CHECKS:
        check(client, spec)
