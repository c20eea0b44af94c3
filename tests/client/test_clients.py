"""Clients against two real ScienceWorld replicas: pool routing, cross-replica restore, asyncio, gymnasium."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator

import grpc
import pytest
from gymnasium.utils.env_checker import check_env

from envhub.client import AsyncEnvhubClient, EnvhubClient, EnvhubError, EnvhubPool, TaskRef
from envhub.gym import EnvhubGymEnv
from envhub.server.background import BackgroundServer

ACTIONS = ["open door to kitchen", "go to kitchen", "look around", "pick up thermometer"]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BackgroundServer]]:
    key_file = tmp_path_factory.mktemp("keys") / "snapshot.key"
    key_file.write_bytes(b"shared-by-both-replicas-0123456789")
    first = BackgroundServer.local("scienceworld", snapshot_key_file=str(key_file))
    try:
        with BackgroundServer.local("scienceworld", snapshot_key_file=str(key_file)) as second:
            yield [first, second]
    finally:
        first.stop()


def test_error_pickles_with_its_details() -> None:
    error = EnvhubError(grpc.StatusCode.NOT_FOUND, "gone", "SESSION_NOT_FOUND", {"session_id": "r1.x"})
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.message, copy.reason, copy.metadata) == (
        error.code,
        "gone",
        "SESSION_NOT_FOUND",
        error.metadata,
    )


def test_pool_places_routes_and_restores_across_replicas(replicas: list[BackgroundServer]) -> None:
    with EnvhubPool([server.target for server in replicas]) as pool:
        assert sorted(pool.replicas) == sorted(server.replica_id for server in replicas)
        starts = [pool.create_session("scienceworld", task="boil/0", seed=1) for _ in range(2)]
        owners = {start.session_id.split(".")[0] for start in starts}
        assert owners == set(pool.replicas)  # one on each replica
        source = starts[0].session_id
        for action in ACTIONS[:2]:
            pool.step(source, action)
        snapshot = pool.snapshot(source)
        other = next(server for server in replicas if not source.startswith(server.replica_id + "."))
        with EnvhubClient(other.target) as direct:
            moved = direct.restore(snapshot)  # restored by the replica that did not take it
            assert moved.session_id.startswith(other.replica_id + ".")
            assert [pool.step(moved.session_id, a) for a in ACTIONS[2:]] == [pool.step(source, a) for a in ACTIONS[2:]]
        with pytest.raises(EnvhubError) as caught:
            pool.step("nosuchreplica.123", "look around")
        assert caught.value.code == grpc.StatusCode.NOT_FOUND
        for session_id in (moved.session_id, *(start.session_id for start in starts)):
            pool.close_session(session_id)


def test_async_client_plays_and_raises_envhub_errors(replicas: list[BackgroundServer]) -> None:
    async def scenario() -> None:
        async with AsyncEnvhubClient(replicas[0].target) as client:
            environments = await client.list_environments()
            assert await client.replica_id() == replicas[0].replica_id and environments[0].name == "scienceworld"
            start = await client.create_session("scienceworld", task=TaskRef(split="train", index=0), admissible=True)
            assert start.task.task_id == "boil/0" and start.view.admissible
            results = await asyncio.gather(*(client.step(start.session_id, "look around") for _ in range(3)))
            assert [result.step_index for result in results] == [1, 2, 3]  # pipelined, in order
            [fork] = await client.fork(start.session_id)
            assert (await client.step(fork, "inventory")).step_index == 4
            with pytest.raises(EnvhubError) as caught:
                await client.step(start.session_id, "")
            assert caught.value.reason == "EMPTY_ACTION"
            for session_id in (start.session_id, fork):
                await client.close_session(session_id)

    asyncio.run(scenario())


def test_gymnasium_adapter_passes_check_env(replicas: list[BackgroundServer]) -> None:
    with EnvhubClient(replicas[0].target) as client:
        env = EnvhubGymEnv(client, "scienceworld", "boil/0", render_mode="ansi")
        check_env(env, skip_render_check=False)
        observation, info = env.reset(seed=5)
        assert observation == env.render() and info["task_id"] == "boil/0"
        observation, reward, terminated, truncated, info = env.step("open door to kitchen")
        assert observation in env.observation_space and info["step_index"] == 1
        assert not terminated and not truncated and reward == 0.0
        session_id = env.session_id
        env.close()
        env.close()
        with pytest.raises(EnvhubError):
            client.step(str(session_id), "look around")
