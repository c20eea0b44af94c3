"""Search-QA server settings (`envhub serve --set searchqa.KEY=VALUE`): listed, used by sessions, refused when bad."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from envhub import cli
from envhub.client import EnvhubClient
from envhub.envs.searchqa.kind import SearchQAKind
from envhub.envs.searchqa.remote import RetrieverServer
from envhub.envs.searchqa.retriever import open_index
from envhub.server.background import BackgroundServer

EVERY_PASSAGE = "<search>Analytical Engine Babbage Lovelace algorithm</search>"
"""Matches each of the three passages of the tiny folder."""


def test_a_server_lists_its_settings_and_sessions_follow_them(
    tmp_path: Path, write_search_r1_files: Callable[[Path, bool], None]
) -> None:
    write_search_r1_files(tmp_path, False)
    settings = {"data": str(tmp_path), "index": str(tmp_path / "index"), "topk": 1, "max_turns": 2}
    with (
        BackgroundServer.local("searchqa", workers=1, environment_config={"searchqa": settings}) as server,
        EnvhubClient(server.target) as client,
    ):
        [info] = client.list_environments()
        assert dict(info.config) == {key: str(value) for key, value in settings.items()}
        assert info.splits == {"test": 2} and info.default_max_steps == 2 and "default 1" in info.options["topk"]
        session = client.create_session("searchqa", "test_0").session_id
        first = client.step(session, EVERY_PASSAGE)
        assert first.text.count("Doc ") == 1 and not first.truncated
        assert client.step(session, "no tags").truncated  # the second turn is the last
        wider = client.create_session("searchqa", "test_0", options={"topk": "3"}, max_steps=5).session_id
        assert client.step(wider, EVERY_PASSAGE).text.count("Doc ") == 3  # the session's option wins


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"topk": 0}, "searchqa.topk must be a whole number from 1 to 20, not 0"),
        ({"topk": "three"}, "searchqa.topk must be a whole number from 1 to 20"),
        ({"max_turns": 0}, "searchqa.max_turns must be a whole number of at least 1"),
        ({"max_turns": 2.5}, "searchqa.max_turns must be a whole number"),
        ({"data": "/no/such/folder"}, "searchqa.data='/no/such/folder' is not a folder"),
        ({"retriever": "localhost:8000"}, "must be an http:// or https:// URL"),
        ({"k": 3}, r"unknown configuration key\(s\) \['k'\] for searchqa"),
    ],
)
def test_bad_settings_are_refused_with_their_name(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchQAKind.from_config(settings)


def test_a_folder_without_questions_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no question files"):
        SearchQAKind.from_config({"data": str(tmp_path)})


def test_serve_refuses_to_start_with_a_bad_setting(caplog: pytest.LogCaptureFixture) -> None:
    argv = ["serve", "--env", "searchqa", "--port", "0", "--set", "searchqa.topk=21"]
    with caplog.at_level(logging.ERROR, logger="envhub"):
        assert cli.main(argv) == 1
    assert "searchqa.topk must be a whole number from 1 to 20, not 21" in caplog.text


def test_a_retriever_setting_searches_through_that_server(
    tmp_path: Path, write_search_r1_files: Callable[[Path, bool], None]
) -> None:
    write_search_r1_files(tmp_path, False)
    with RetrieverServer(open_index(tmp_path / "index"), port=0) as retriever:
        settings = {"data": str(tmp_path), "retriever": retriever.url}
        with (
            BackgroundServer.local("searchqa", workers=1, environment_config={"searchqa": settings}) as server,
            EnvhubClient(server.target) as client,
        ):
            [info] = client.list_environments()
            assert dict(info.config) == {**settings, "topk": "3", "max_turns": "4"}
            session = client.create_session("searchqa", "test_0").session_id
            text = client.step(session, "<search>Analytical Engine designed</search>").text
            assert text.startswith("<information>Doc 1(Title: Charles Babbage)")
