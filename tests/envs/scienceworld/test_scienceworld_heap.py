"""The ScienceWorld heap sizing rule: planned in steps from the live sessions, resized on the real JVM."""

from __future__ import annotations

from envhub.core.session import Session
from envhub.envs.scienceworld.jvm import heap_mb, planned_simulators
from envhub.envs.scienceworld.kind import ScienceWorldKind


def test_the_plan_doubles_when_outgrown_and_halves_at_a_quarter() -> None:
    planned, changes = 16, []
    for live in [*range(1, 161), *range(159, -1, -1)]:  # a ramp to the cap of 160, then every session ends
        now = planned_simulators(live, planned, cap=160, step=16)
        if now != planned:
            changes.append((live, now))
        planned = now
        assert live <= planned <= max(16, 4 * live + 3) or planned == 16  # room for every live session, not 4x more
    assert changes == [(17, 32), (33, 64), (65, 128), (129, 160), (40, 80), (20, 40), (10, 20), (5, 16)]
    assert planned_simulators(200, 16, cap=160, step=16) == 160  # never past the cap (the kind refuses beyond it)
    assert planned_simulators(3, 16, cap=160, step=16) == 16  # never under the first step


def test_the_jvm_heap_grows_with_the_sessions_and_shrinks_when_they_end() -> None:
    kind = ScienceWorldKind(sessions_per_worker=8, heap_step=2)
    sessions = []
    try:
        task = kind.task("boil/0")
        sessions.append(Session.start(kind, task))
        started = kind._jvm.heap_committed_mb()
        assert kind.planned == 2 and started <= heap_mb(2) + 1
        for _ in range(4):  # 5 live: the plan doubles to 4, then to 8
            sessions.append(Session.start(kind, task))
        assert kind.planned == 8
        grown = kind._jvm.heap_committed_mb()
        assert grown > started and grown <= heap_mb(8) + 1
        for session in sessions[1:]:
            session.close()
        assert kind.planned == 2  # 1 live: a quarter of 4, then of 2 would be under the step
        assert kind._jvm.heap_committed_mb() < grown
        assert sessions[0].step("look around").result.observation.text  # the resizes harmed no session
    finally:
        sessions[0].close()
        kind.close()
