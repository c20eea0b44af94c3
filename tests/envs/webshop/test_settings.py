"""WebShop server settings (`envhub serve --set webshop.KEY=VALUE`): listed, served, refused when bad."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from envhub import cli
from envhub.client import EnvhubClient
from envhub.envs.webshop.catalog import Catalog
from envhub.envs.webshop.generator import generate, write
from envhub.envs.webshop.kind import DATA_ENV, GENERATED_SPLITS, WebShopKind
from envhub.server.background import BackgroundServer


def _official_folder(root: Path) -> tuple[Path, Catalog]:
    """60 generated products written in WebShop's file layout, and the catalogue those files hold."""
    documents = generate(60, seed=5)
    write(root / "shop", documents)
    return root / "shop", Catalog.from_documents(*documents)


@pytest.mark.parametrize("source", ["generated", "data"])
def test_a_server_lists_its_settings_and_serves_that_catalogue(tmp_path: Path, source: str) -> None:
    if source == "data":
        folder, catalog = _official_folder(tmp_path)
        settings: dict[str, object] = {"data": str(folder)}
        splits = {"test": 60, "valid": 0, "train": 0}
    else:
        settings = {"products": 200, "seed": 1}
        catalog = Catalog.from_documents(*generate(200, seed=1), splits=GENERATED_SPLITS)
        splits = {"test": 128, "train": 72}
    with (
        BackgroundServer.local("webshop", workers=1, environment_config={"webshop": settings}) as server,
        EnvhubClient(server.target) as client,
    ):
        [info] = client.list_environments()
        assert dict(info.config) == {key: str(value) for key, value in settings.items()}
        assert info.splits == splits and f"/catalog-{catalog.fingerprint}/" in info.version
        goal = catalog.goals["test"][0]
        session = client.create_session("webshop", "test/00000")
        assert goal.instruction in session.view.text
        found = client.step(session.session_id, f"search[{catalog.products[goal.asin].title}]").text
        assert f"[SEP] {goal.asin} [SEP]" in found


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"products": 0}, "webshop.products must be a whole number of at least 1, not 0"),
        ({"products": "many"}, "webshop.products must be a whole number"),
        ({"seed": -1}, "webshop.seed must be a whole number of at least 0, not -1"),
        ({"data": "/no/such/folder"}, "webshop.data='/no/such/folder' is not a folder"),
        ({"data": ".", "products": 10}, r"settings of the generated catalogue \(webshop.products\) do not apply"),
        ({"size": 10}, r"unknown configuration key\(s\) \['size'\] for webshop"),
    ],
)
def test_bad_settings_are_refused_with_their_name(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WebShopKind.from_config(settings)


def test_a_folder_without_webshop_files_or_with_webshop_data_set_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"none of items_shuffle\.json"):
        WebShopKind.from_config({"data": str(tmp_path)})
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    with pytest.raises(ValueError, match=rf"\(webshop.seed\) do not apply to the files of \${DATA_ENV}="):
        WebShopKind.from_config({"seed": 2})


def test_serve_refuses_to_start_with_a_bad_setting(caplog: pytest.LogCaptureFixture) -> None:
    argv = ["serve", "--env", "webshop", "--port", "0", "--set", "webshop.products=-5"]
    with caplog.at_level(logging.ERROR, logger="envhub"):
        assert cli.main(argv) == 1
    assert "webshop.products must be a whole number of at least 1, not -5" in caplog.text
