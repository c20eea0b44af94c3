"""The stream transport (`AsyncEnvhubClient.stream()`) and step_many against a real ScienceWorld server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from envhub.client import AsyncEnvhubClient, EnvhubClient, EnvhubError, EnvhubPool, EnvView, RetryPolicy, TaskRef
from envhub.client.stream import StreamTransport
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE, Gate

ACTIONS = ["open door to kitchen", "go to kitchen", "look around", "pick up thermometer"]


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer.local("scienceworld", max_sessions=16) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[EnvhubClient]:
    with EnvhubClient(server.target) as c:
        yield c


def test_stream_results_equal_unary_results(server: BackgroundServer, client: EnvhubClient) -> None:
    unary = client.create_session("scienceworld", task="boil/0", seed=4, admissible=True)
    want = [client.step(unary.session_id, action, admissible=index == 2) for index, action in enumerate(ACTIONS)]
    want_reset = client.reset_session(unary.session_id, task=TaskRef(split="dev", index=1), seed=2)

    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as aio, aio.stream() as stream:
            start = await stream.create_session("scienceworld", task="boil/0", seed=4, admissible=True)
            assert (start.task, start.view) == (unary.task, unary.view)
            got = [await stream.step(start.session_id, a, admissible=i == 2) for i, a in enumerate(ACTIONS)]
            assert got == want
            assert got[2].admissible and got[3].admissible is None
            reset = await stream.reset_session(start.session_id, task=TaskRef(split="dev", index=1), seed=2)
            assert (reset.session_id, reset.task, reset.view) == (
                start.session_id,
                want_reset.task,
                want_reset.view,
            )
            await stream.close_session(start.session_id)

    asyncio.run(scenario())
    client.close_session(unary.session_id)


def test_errors_are_per_request_and_match_unary_errors(server: BackgroundServer, client: EnvhubClient) -> None:
    session_id = client.create_session("scienceworld", task="boil/0").session_id
    bad_calls = [("nosuch.x", "look around"), (session_id, ""), (session_id, "x" * 5000)]
    unary_errors = []
    for bad_session, action in bad_calls:
        with pytest.raises(EnvhubError) as caught:
            client.step(bad_session, action)
        unary_errors.append((caught.value.code, caught.value.reason))
    assert [reason for _, reason in unary_errors] == ["SESSION_NOT_FOUND", "EMPTY_ACTION", "ACTION_TOO_LONG"]

    async def scenario() -> None:
        once = RetryPolicy(attempts=1)  # so the deadline below is not retried
        async with AsyncEnvhubClient(server.target, policy=once) as aio, aio.stream() as stream:
            outcomes = await asyncio.gather(
                *(stream.step(bad_session, action) for bad_session, action in bad_calls),
                stream.step(session_id, "look around"),
                return_exceptions=True,
            )
            assert [(e.code, e.reason) for e in outcomes[:3] if isinstance(e, EnvhubError)] == unary_errors
            assert isinstance(outcomes[3], EnvView) and outcomes[3].step_index == 1
            with pytest.raises(EnvhubError) as caught:  # an answer that never comes in time
                await stream.reset_session(session_id, timeout=0.001)
            assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            await stream.close_session(session_id)
            with pytest.raises(EnvhubError) as caught:
                await stream.close_session(session_id)
            assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
            assert (await stream.create_session("scienceworld", task="boil/0")).view.step_index == 0

    asyncio.run(scenario())


def test_many_sessions_interleave_on_one_stream(server: BackgroundServer) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target) as aio, aio.stream() as stream:
            starts = await asyncio.gather(
                *(stream.create_session("scienceworld", task="boil/0", seed=seed) for seed in range(6))
            )
            # every session's steps are sent at once: pipelined within a session, concurrent across them
            calls = [stream.step(s.session_id, action) for action in ACTIONS for s in starts]
            results = await asyncio.gather(*calls)
            assert isinstance(stream.transport, StreamTransport) and stream.transport.pending == 0
            by_session = [results[index :: len(starts)] for index in range(len(starts))]
            for steps in by_session:
                assert [step.step_index for step in steps] == [1, 2, 3, 4]
                assert [step.text for step in steps] == [s.text for s in by_session[0]]
            await asyncio.gather(*(stream.close_session(s.session_id) for s in starts))

    asyncio.run(scenario())


def test_step_many_on_the_sync_client_and_the_pool(server: BackgroundServer, client: EnvhubClient) -> None:
    sessions = [client.create_session("scienceworld", task="boil/0", seed=1).session_id for _ in range(3)]
    reference = client.create_session("scienceworld", task="boil/0", seed=1).session_id
    want = [client.step(reference, action) for action in ACTIONS[:2]]
    first = client.step_many([(session_id, ACTIONS[0]) for session_id in sessions])
    assert first == [want[0]] * 3
    with EnvhubPool([server.target]) as pool:
        mixed = pool.step_many(
            [(sessions[0], ACTIONS[1]), ("elsewhere.1", "look"), (sessions[1], "")], return_errors=True
        )
    assert mixed[0] == want[1]
    assert isinstance(mixed[1], EnvhubError) and mixed[1].reason == "UNKNOWN_REPLICA"
    assert isinstance(mixed[2], EnvhubError) and mixed[2].reason == "EMPTY_ACTION"
    with pytest.raises(EnvhubError) as caught:
        client.step_many([(sessions[2], ACTIONS[1]), (sessions[2], "")])
    assert caught.value.reason == "EMPTY_ACTION"
    assert client.step(sessions[2], "look around").step_index == 3  # the good step ran
    for session_id in (*sessions, reference):
        client.close_session(session_id)


def test_a_stream_refused_for_its_token_raises_the_refusal_in_every_call() -> None:
    """Each call of a refused stream raises UNAUTHENTICATED (MISSING_OR_BAD_TOKEN), never INTERNAL: several
    calls are queued at once, whose writes raced the refusal in about 6 of 10 streams before the client
    waited for the server's admission (grpc/grpc#36066)."""

    async def scenario(target: str) -> list[tuple[grpc.StatusCode, str]]:
        seen = []
        for _ in range(20):
            async with AsyncEnvhubClient(target, token="wrong") as anonymous, anonymous.stream() as stream:
                outcomes = await asyncio.gather(
                    *(stream.create_session("toy", task="train-count/0") for _ in range(3)),
                    stream.step("nosuch.x", "inc"),
                    return_exceptions=True,
                )
            seen += [(error.code, error.reason) for error in outcomes if isinstance(error, EnvhubError)]
        return seen

    with BackgroundServer.local(REFERENCE, token="secret") as server:
        seen = asyncio.run(scenario(server.target))
    assert seen == [(grpc.StatusCode.UNAUTHENTICATED, "MISSING_OR_BAD_TOKEN")] * 80


def test_a_broken_stream_fails_pending_and_later_calls_with_unavailable(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gate")
    server = BackgroundServer.local(
        REFERENCE, token="secret", environment_config={REFERENCE: {"gate": str(gate.folder)}}
    )

    async def scenario() -> None:
        async with AsyncEnvhubClient(server.target, token="secret") as aio, aio.stream() as stream:
            start = await stream.create_session("toy", task="train-count/0")
            blocked = asyncio.ensure_future(stream.step(start.session_id, "wait"))
            queued = asyncio.ensure_future(stream.step(start.session_id, "inc"))
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, gate.wait_entered)  # both steps are at the server, one inside the env
            stopping = loop.run_in_executor(None, server.stop)  # cancels the calls in flight
            outcomes = await asyncio.gather(blocked, queued, return_exceptions=True)
            for error in outcomes:
                assert isinstance(error, EnvhubError), error
                assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "STREAM_BROKEN")
            with pytest.raises(EnvhubError) as caught:
                await stream.step(start.session_id, "inc")
            assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAVAILABLE, "STREAM_BROKEN")
            await loop.run_in_executor(None, gate.release)  # lets the stopping worker finish its step
            await stopping

    try:
        asyncio.run(scenario())
    finally:
        server.stop()
