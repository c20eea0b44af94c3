"""The worker inbox's lanes: steps before queued session starts, one session's operations in order."""

from __future__ import annotations

import threading

from envhub.server import worker_ops as ops
from envhub.server.lanes import Lanes


def step(session_id: str) -> ops.Step:
    return ops.Step(session_id=session_id, action="look", admissible=False)


def create(session_id: str) -> ops.Create:
    return ops.Create(session_id=session_id, task_id="t", seed=0, options={}, max_steps=10, admissible=False)


def drain(lanes: Lanes) -> list[int]:
    lanes.close()
    order = []
    while (item := lanes.get()) is not None:
        order.append(item[0])
    return order


def test_steps_overtake_queued_session_starts() -> None:
    lanes = Lanes()
    lanes.put((1, create("new-a")))
    lanes.put((2, ops.Reset(session_id="b", task_id=None, seed=None, admissible=False)))
    lanes.put((3, step("c")))
    lanes.put((4, ops.StepMany((step("d"), step("e")))))
    lanes.put((5, ops.Fork(session_id="f", new_ids=("f1", "f2"))))
    lanes.put((6, ops.Close(session_id="g")))
    assert drain(lanes) == [3, 4, 6, 1, 2, 5]


def test_operations_of_one_session_keep_their_order() -> None:
    lanes = Lanes()
    lanes.put((1, ops.Reset(session_id="a", task_id=None, seed=None, admissible=False)))
    lanes.put((2, step("a")))  # behind its session's reset
    lanes.put((3, ops.StepMany((step("x"), step("a")))))  # one of its steps concerns "a": behind too
    lanes.put((4, step("x")))  # "x" waits in the slow lane (item 3): stays behind it
    lanes.put((5, step("y")))
    lanes.put((6, ops.Close(session_id="f1")))  # before the fork arrives: nothing of "f1" queued
    lanes.put((7, ops.Fork(session_id="f", new_ids=("f1",))))
    lanes.put((8, ops.Close(session_id="f1")))  # a copy the queued fork makes: behind it
    assert drain(lanes) == [5, 6, 1, 2, 3, 4, 7, 8]


def test_a_session_is_quick_again_once_its_slow_operations_were_applied() -> None:
    lanes = Lanes()
    lanes.put((1, create("a")))
    taken = lanes.get()
    assert taken == (1, create("a"))
    lanes.put((2, step("a")))  # its create is taken but not applied yet: behind it
    lanes.done(taken)
    behind = lanes.get()
    assert behind == (2, step("a"))
    lanes.done(behind)
    lanes.put((3, create("b")))
    lanes.put((4, step("a")))
    assert drain(lanes) == [4, 3]


def test_get_blocks_until_an_item_or_close() -> None:
    lanes = Lanes()
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.extend([lanes.get(), lanes.get()]))
    reader.start()
    lanes.put((1, step("a")))
    lanes.close()
    reader.join(timeout=10)
    assert not reader.is_alive() and got == [(1, step("a")), None]


def test_steps_cannot_starve_a_waiting_session_start() -> None:
    lanes = Lanes(slow_after=3)
    lanes.put((1, create("a")))
    lanes.put((2, create("b")))
    for call_id in range(3, 9):
        lanes.put((call_id, step(f"s{call_id}")))
    lanes.put((9, ops.StepMany((step("x"), step("y"), step("z")))))  # counts as its three steps
    lanes.put((10, step("w")))
    assert drain(lanes) == [3, 4, 5, 1, 6, 7, 8, 2, 9, 10]


def test_with_a_start_thread_only_slow_items_and_those_behind_them_are_queued() -> None:
    lanes = Lanes()
    assert not lanes.put_slow((1, step("a")))  # applied at once by the reading thread
    assert lanes.put_slow((2, ops.Reset(session_id="a", task_id=None, seed=None, admissible=False)))
    assert lanes.put_slow((3, step("a")))  # behind its session's reset
    assert not lanes.put_slow((4, ops.StepMany((step("b"), step("c")))))
    assert lanes.put_slow((5, ops.Fork(session_id="b", new_ids=("b1",))))
    assert lanes.put_slow((6, ops.Close(session_id="b1")))  # a copy the queued fork makes
    reset = lanes.get_slow()
    assert reset is not None and reset[0] == 2
    assert lanes.put_slow((7, step("a")))  # its reset is taken but not applied yet
    lanes.done(reset)
    taken = [lanes.get_slow() for _ in range(4)]
    assert [item[0] for item in taken if item] == [3, 5, 6, 7]
    for item in taken:
        assert item is not None
        lanes.done(item)
    assert not lanes.put_slow((8, step("a"))) and not lanes.put_slow((9, step("b1")))
    lanes.close()
    assert lanes.get_slow() is None


def test_the_reading_thread_applies_a_quick_item_itself_only_when_nothing_is_queued_or_being_applied() -> None:
    lanes = Lanes()
    assert not lanes.take_now((1, create("a")))  # a start: for the serving thread
    lanes.put((1, create("a")))
    assert not lanes.take_now((2, step("b")))  # something queued
    taken = lanes.get()
    assert not lanes.take_now((2, step("b")))  # something being applied
    assert taken is not None
    lanes.done(taken)
    assert lanes.take_now((2, step("b")))
    got: list[object] = []
    serving = threading.Thread(target=lambda: got.append(lanes.get()))
    serving.start()
    lanes.put((3, create("c")))  # e.g. a prepared start, queued while the reading thread applies item 2
    serving.join(timeout=0.2)
    assert serving.is_alive() and got == []  # the serving thread takes nothing until item 2 is done
    lanes.done((2, step("b")))
    serving.join(timeout=10)
    assert got == [(3, create("c"))]
