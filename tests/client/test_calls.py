"""Calls carry their effect as data: what each builder says it does, and a call sent to another session."""

from __future__ import annotations

import pytest

from envhub.client import calls
from envhub.client.calls import Effect, Retry
from envhub.v1 import envhub_pb2 as pb

EFFECTS = [
    (calls.list_environments(), Effect.READS, Retry.IDEMPOTENT),
    (calls.replica_id(), Effect.READS, Retry.IDEMPOTENT),
    (calls.list_tasks("alfworld"), Effect.READS, Retry.IDEMPOTENT),
    (calls.expert_actions("r.1"), Effect.READS, Retry.IDEMPOTENT),
    (calls.snapshot("r.1"), Effect.READS, Retry.IDEMPOTENT),
    (calls.create_session("alfworld", "train/00000"), Effect.CREATES, Retry.NEVER),
    (calls.restore(b"signed"), Effect.CREATES, Retry.NEVER),
    (calls.step("r.1", "look"), Effect.STEPS, Retry.KEYED),
    (calls.reset_session("r.1"), Effect.RESETS, Retry.KEYED),
    (calls.close_session("r.1"), Effect.CLOSES, Retry.NEVER),
    (calls.fork("r.1", 3), Effect.FORKS, Retry.NEVER),
    (calls.step_many([("r.1", "look"), ("s.2", "go")]), Effect.BATCHES, Retry.KEYED),
]


@pytest.mark.parametrize(("call", "effect", "retry"), EFFECTS, ids=[c.method + ":" + e.value for c, e, _ in EFFECTS])
def test_every_call_says_what_it_does_and_when_it_may_be_retried(
    call: calls.Call[object], effect: Effect, retry: Retry
) -> None:
    assert (call.effect, call.retry) == (effect, retry)


def test_a_batch_is_its_step_calls() -> None:
    call = calls.step_many([("r.1", "look"), ("s.2", "go")], admissible=True)
    assert [(part.effect, part.session_id) for part in call.parts] == [(Effect.STEPS, "r.1"), (Effect.STEPS, "s.2")]
    assert isinstance(call.request, pb.StepBatchRequest)
    assert list(call.request.steps) == [part.request for part in call.parts]


def test_a_call_addressed_to_another_session_keeps_its_request_id() -> None:
    call = calls.step("r.1", "look", admissible=True, expected_step_index=4)
    moved = call.addressed_to("s.9")
    assert isinstance(call.request, pb.StepRequest) and isinstance(moved.request, pb.StepRequest)
    assert (moved.session_id, moved.request.session_id) == ("s.9", "s.9")
    assert (moved.request.request_id, moved.request.action, moved.request.expected_step_index) == (
        call.request.request_id,
        "look",
        4,
    )
    assert call.request.session_id == "r.1", "the original request is not edited"
    assert call.addressed_to("r.1") is call
    with pytest.raises(ValueError, match="not about one session"):
        calls.create_session("alfworld", "train/00000").addressed_to("s.9")


def test_created_sessions_come_from_the_response() -> None:
    assert calls.create_session("alfworld", "t").created(pb.CreateSessionResponse(session_id="r.1")) == ["r.1"]
    assert calls.fork("r.1", 2).created(pb.ForkSessionResponse(session_ids=["r.2", "r.3"])) == ["r.2", "r.3"]
    assert calls.fork("r.1", 2).sessions_made(pb.ForkSessionResponse(session_ids=["r.2", "r.3"])) == 2
    assert calls.close_session("r.1").sessions_made(pb.CloseSessionResponse()) == -1
    assert calls.step("r.1", "look").created(pb.StepResponse()) == []
