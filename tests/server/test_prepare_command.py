"""`envhub prepare` builds a cache that a fresh server then serves from without generating anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.cli import main
from envhub.client import EnvhubClient
from envhub.prepare import chosen_tasks, parse_counts, prepare
from envhub.server.background import BackgroundServer


def _files(cache: Path) -> dict[str, int]:
    """Every file of the cache with its modification time (ns)."""
    return {str(path.relative_to(cache)): path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}


def test_tasks_are_counted_per_split() -> None:
    assert parse_counts("0") == 0
    assert parse_counts("train:128,valid_seen:2") == {"train": 128, "valid_seen": 2}
    for bad in ("train:x", "train:1,train:2", "-1"):
        with pytest.raises(ValueError):
            parse_counts(bad)


def test_unknown_split_is_refused() -> None:
    pytest.importorskip("alfworld")
    from envhub.envs.alfworld.kind import AlfWorldKind

    kind = AlfWorldKind()
    assert [t.task_id for t in chosen_tasks(kind, {"valid_seen": 2})] == ["valid_seen/00000", "valid_seen/00001"]
    with pytest.raises(ValueError, match="unknown split"):
        chosen_tasks(kind, {"nope": 1})
    assert main(["prepare", "--env", "alfworld", "--tasks", "nope:1"]) == 2


@pytest.mark.slow
def test_a_server_serves_a_prepared_cache_without_generating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("alfworld")
    cache = tmp_path / "cache"
    assert main(["prepare", "--env", "alfworld", "--cache", str(cache), "--tasks", "train:3", "--workers", "2"]) == 0
    assert "3 tasks ready" in capsys.readouterr().out
    games = sorted(path.name for path in cache.glob("alfworld/*/train/*.json"))
    assert games == ["00000.json", "00001.json", "00002.json"]
    again = prepare("alfworld", cache=cache, counts={"train": 3}, workers=2)
    assert (again.tasks, again.made) == (3, 0)  # a rerun makes nothing
    before = _files(cache)
    monkeypatch.setenv("ENVHUB_CACHE", str(cache))  # inherited by the server's workers
    with BackgroundServer.local("alfworld", workers=1) as server, EnvhubClient(server.target, timeout=60) as client:
        for index in range(3):
            session = client.create_session("alfworld", task=f"train/{index:05d}", seed=0)
            assert session.view.text
            step = client.step(session.session_id, "look")  # a step reads the game too
            assert not step.truncated
        assert _files(cache) == before  # nothing generated, translated or rewritten
        client.create_session("alfworld", task="train/00003", seed=0)  # not prepared: the server makes it
        made = _files(cache).keys() - before.keys()
        assert any(name.endswith("train/00003.json") for name in made)  # so the check above can fail
