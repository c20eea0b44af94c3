"""`WebShopKind`: WebShop as an envhub environment kind.

The catalogue is the generated one (`generator`, 3,000 products from seed 0, test 128 / train
the rest) unless `data_path` (or the `WEBSHOP_DATA` environment variable) names a folder with
WebShop's own files. Catalogue, search index and pages are built once per process and shared
by every kind object and session of it. A server sets these with `--set webshop.KEY=VALUE`
(`config_keys`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envhub.core import errors
from envhub.core.environment import Capabilities, Environment, EnvironmentKind, TaskSpec
from envhub.core.settings import whole_number
from envhub.envs.webshop.catalog import Catalog
from envhub.envs.webshop.engine import Shop
from envhub.envs.webshop.env import WebShopEnv
from envhub.envs.webshop.expert import expert_option
from envhub.envs.webshop.generator import DEFAULT_PRODUCTS, generate
from envhub.envs.webshop.nouns import NOUN_TAGGER
from envhub.envs.webshop.search import shared_index

DATA_ENV = "WEBSHOP_DATA"
"""Environment variable naming a folder of WebShop's files, used when no `data_path` is given."""
ENV_VERSION = "2"
"""Version of this adapter's behaviour (pages, rewards, native snapshot layout)."""
GENERATED_SPLITS: tuple[tuple[str, int | None], ...] = (("test", 128), ("train", None))
"""The generated catalogue's splits: 128 held-out test goals, as the papers evaluate, and the rest."""


@functools.lru_cache(maxsize=4)
def load_catalog(data_path: str = "", products: int = DEFAULT_PRODUCTS, seed: int = 0) -> Catalog:
    """The process's catalogue: the official files in `data_path`, else the generated one."""
    if data_path:
        return Catalog.from_folder(data_path)
    return Catalog.from_documents(*generate(products, seed), splits=GENERATED_SPLITS)


@functools.lru_cache(maxsize=4)
def _shop(catalog: Catalog) -> Shop:
    return Shop(dict(catalog.products), shared_index(catalog))


class WebShopKind(EnvironmentKind):
    """WebShop (text mode) over a generated or official catalogue, with BM25 search."""

    name = "webshop"
    description = "WebShop online shopping: search, browse, choose options, buy; reward from WebShop's formula"
    capabilities = Capabilities(native_snapshot=True, deterministic_replay=True, expert=True, admissible_actions=True)
    default_max_steps = 15
    options: Mapping[str, str] = {
        "expert": "the policy behind GetExpertActions: `oracle` (default: knows the goal's product) or `page` "
        "(acts only on what the page shows, for imitation; envhub/envs/webshop/expert.py)",
    }

    config_keys: Mapping[str, str] = {
        "data": "folder of WebShop's own files (items_shuffle.json, items_ins_v2.json, items_human_ins.json; "
        f"splits test 500 / valid 1000 / train the rest); default: ${DATA_ENV}, else the generated catalogue",
        "products": f"products (and goals: one each) of the generated catalogue, at least 1 (default "
        f"{DEFAULT_PRODUCTS}); the first {GENERATED_SPLITS[0][1]} goals are the test split, the rest train",
        "seed": "seed of the generated catalogue (default 0)",
    }

    def __init__(self, data_path: str | Path | None = None, *, products: int = DEFAULT_PRODUCTS, seed: int = 0) -> None:
        path = str(data_path or os.environ.get(DATA_ENV, ""))
        self.catalog = load_catalog(path, products, seed)
        self.shop = _shop(self.catalog)
        self._tasks: dict[str, list[TaskSpec]] = {}
        self._config = {"data": path} if path else {"products": str(products), "seed": str(seed)}
        self.version = f"envhub-webshop{ENV_VERSION}/catalog-{self.catalog.fingerprint}/nouns-{NOUN_TAGGER}"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> WebShopKind:
        """From `envhub serve --env webshop --set webshop.products=500` (keys: `config_keys`)."""
        cls.check_config_keys(config)
        data = str(config.get("data") or os.environ.get(DATA_ENV, ""))
        source = f"{'webshop.data' if config.get('data') else '$' + DATA_ENV}={data!r}"
        generated = sorted(key for key in ("products", "seed") if key in config)
        if data and generated:
            names = ", ".join(f"webshop.{key}" for key in generated)
            raise ValueError(f"settings of the generated catalogue ({names}) do not apply to the files of {source}")
        if data and not Path(data).is_dir():
            raise ValueError(f"{source} is not a folder")
        products = whole_number("webshop.products", config.get("products", DEFAULT_PRODUCTS), least=1)
        seed = whole_number("webshop.seed", config.get("seed", 0))
        try:
            return cls(data, products=products, seed=seed)
        except FileNotFoundError as exc:
            raise ValueError(f"{source}: {exc}") from exc

    def config(self) -> Mapping[str, str]:
        return dict(self._config)

    def splits(self) -> list[str]:
        return list(self.catalog.goals)

    def tasks(self, split: str) -> Sequence[TaskSpec]:
        if split not in self.catalog.goals:
            raise errors.not_found(
                f"unknown split {split!r}; known splits: {', '.join(self.catalog.goals)}", "UNKNOWN_SPLIT", split=split
            )
        if split not in self._tasks:
            self._tasks[split] = [self._spec(split, index) for index in range(len(self.catalog.goals[split]))]
        return self._tasks[split]

    def _spec(self, split: str, index: int) -> TaskSpec:
        goal = self.catalog.goals[split][index]
        return TaskSpec(
            task_id=f"{split}/{index:05d}", split=split, index=index, family=goal.category, description=goal.instruction
        )

    def task(self, task_id: str) -> TaskSpec:
        split, _, number = task_id.partition("/")
        goals = self.catalog.goals.get(split)
        if (
            goals is None
            or not number.isdigit()
            or int(number) >= len(goals)
            or task_id != f"{split}/{int(number):05d}"
        ):
            raise KeyError(task_id)
        return self._spec(split, int(number))

    def validate_options(self, options: Mapping[str, str]) -> None:
        super().validate_options(options)
        expert_option(options)

    def create(self) -> Environment:
        return WebShopEnv(self.catalog, self.shop)
