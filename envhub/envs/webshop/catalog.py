"""A catalogue: products by asin, and goals by split, read from WebShop's file layout.

WebShop's files are `items_shuffle.json` (products), `items_ins_v2.json` (mined attributes,
and synthetic instructions) and `items_human_ins.json` (human instructions); WebShop's
1,000-product files (`items_shuffle_1000.json`, `items_ins_v2_1000.json`) are found too.
`Catalog.from_documents` reads them the way WebShop's `load_products` and `get_goals` do:

* products with asin "nan", an asin longer than 10 characters or a repeated asin are skipped;
  the query is lower-cased and stripped; option groups are lower-cased and option values
  stripped, lower-cased, with "/" shown as " | "; the bullet points are `small_description`;
  a product without mined attributes gets ["DUMMY_ATTR"];
* `pricing` "$a" shows as "$a", "$a - $b" as "$a to $b", none as "$100.0"; the price paid for
  a range is drawn uniformly from it, here from a random generator seeded by the asin so that
  every process agrees (WebShop draws once per server start);
* goals come from the human instructions when the file is there (instructions without
  attributes are skipped), else from the synthetic ones (one goal per option combination);
  the budget is WebShop's: of the first four multiples of $10 above the price, two are drawn
  and the larger is the budget ("..., and price lower than 40.00 dollars"); with fewer than
  two the budget is 1,000,000 and the instruction does not mention it;
* goals are shuffled with seed 233 (WebShop's value) and cut into splits in order: WebShop's
  test 500 / valid 1,000 / train the rest for the official files (`OFFICIAL_SPLITS`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.envs.webshop.records import Goal, Product, Review

PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_BUDGET = 1_000_000.0
GOAL_SHUFFLE_SEED = 233
OFFICIAL_SPLITS: tuple[tuple[str, int | None], ...] = (("test", 500), ("valid", 1000), ("train", None))
"""Split name -> size (None: the rest), in order over the shuffled goals."""


@dataclass(frozen=True, eq=False)
class Catalog:
    """Products and goals; one per server process, shared by every session."""

    products: Mapping[str, Product]
    """asin -> product, in catalogue order."""
    goals: Mapping[str, Sequence[Goal]]
    """split -> goals."""
    fingerprint: str
    """Digest of the products and goals: names the search index cache and enters the kind's version."""

    @classmethod
    def from_documents(
        cls,
        items: Sequence[Mapping[str, Any]],
        mined: Mapping[str, Any],
        human: Mapping[str, Any] | None,
        splits: Sequence[tuple[str, int | None]] = OFFICIAL_SPLITS,
    ) -> Catalog:
        products: dict[str, Product] = {}
        for item in items:
            asin = str(item.get("asin", ""))
            if asin == "nan" or not asin or len(asin) > 10 or asin in products:
                continue
            products[asin] = _product(item, mined.get(asin, {}))
        goals = list(_human_goals(products, human) if human is not None else _synthetic_goals(products, mined))
        random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
        by_split: dict[str, list[Goal]] = {}
        start = 0
        for name, size in splits:
            end = len(goals) if size is None else min(len(goals), start + size)
            by_split[name] = goals[start:end]
            start = end
        return cls(products, by_split, _fingerprint(products, by_split))

    @classmethod
    def from_folder(cls, folder: str | Path, splits: Sequence[tuple[str, int | None]] = OFFICIAL_SPLITS) -> Catalog:
        """The official files in `folder` (full or 1,000-product versions)."""
        root = Path(folder)
        items_path = _first(root, "items_shuffle.json", "items_shuffle_1000.json")
        mined_path = _first(root, "items_ins_v2.json", "items_ins_v2_1000.json")
        human_path = root / "items_human_ins.json"
        items = json.loads(items_path.read_text())
        mined = json.loads(mined_path.read_text())
        human = json.loads(human_path.read_text()) if human_path.is_file() else None
        return cls.from_documents(items, mined, human, splits)


def _first(root: Path, *names: str) -> Path:
    for name in names:
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"none of {', '.join(names)} in {root} (WebShop's data folder layout)")


def _prices(pricing: object) -> list[float]:
    if not isinstance(pricing, str) or not pricing:
        return []
    out = []
    for piece in pricing.split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", piece)
        try:
            out.append(float(digits))
        except ValueError:
            continue
    return out[:2]


def _product(item: Mapping[str, Any], mined: Mapping[str, Any]) -> Product:
    asin = str(item["asin"])
    prices = _prices(item.get("pricing"))
    if not prices:
        prices, tag = [100.0], "$100.0"
    elif len(prices) == 1:
        tag = f"${prices[0]}"
    else:
        tag = f"${prices[0]} to ${prices[1]}"
    price = prices[0] if len(prices) == 1 else random.Random(asin).uniform(prices[0], prices[1])
    options: dict[str, tuple[str, ...]] = {}
    for group, contents in (item.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[group.lower()] = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
    bullets = item.get("small_description") or []
    reviews = tuple(
        Review(str(r.get("title", "")), int(r.get("stars", r.get("score", 0))), str(r.get("review", r.get("body", ""))))
        for r in item.get("reviews") or []
    )
    rating = item.get("average_rating")
    return Product(
        asin=asin,
        title=str(item.get("name", "")),
        category=str(item.get("category", "")),
        query=str(item.get("query", "")).lower().strip(),
        product_category=str(item.get("product_category", "")),
        attributes=tuple(mined.get("attributes") or ["DUMMY_ATTR"]),
        bullets=tuple(bullets) if isinstance(bullets, list) else (str(bullets),),
        description=str(item.get("full_description") or ""),
        options=options,
        price=price,
        price_tag=tag,
        rating="N.A." if rating is None else str(rating),
        reviews=reviews,
    )


def budget(price: float, rng: random.Random) -> tuple[float, str]:
    """WebShop's budget for a goal on a product at `price`: (price_upper, instruction suffix)."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return NO_BUDGET, ""
    upper = max(rng.sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def _goal(product: Product, instruction: str, attributes: Iterable[str], options: Iterable[str]) -> Goal:
    upper, suffix = budget(product.price, random.Random(f"{product.asin}:{instruction}"))
    return Goal(
        asin=product.asin,
        instruction=instruction + suffix,
        attributes=tuple(attributes),
        options=tuple(options),
        price_upper=upper,
        query=product.query,
        product_category=product.product_category,
        name=product.title,
        category=product.category,
    )


def _human_goals(products: Mapping[str, Product], human: Mapping[str, Any]) -> Iterable[Goal]:
    for asin, product in products.items():
        for entry in human.get(asin) or []:
            attributes = entry.get("instruction_attributes") or []
            if attributes:
                text = str(entry["instruction"]).strip(".")
                yield _goal(product, text, attributes, entry.get("instruction_options") or [])


def _synthetic_goals(products: Mapping[str, Product], mined: Mapping[str, Any]) -> Iterable[Goal]:
    for asin, product in products.items():
        entry = mined.get(asin) or {}
        text, attributes = entry.get("instruction"), entry.get("instruction_attributes")
        if not text or not attributes:
            continue
        groups = sorted(product.options)
        for combination in itertools.product(*(product.options[g] for g in groups)):
            chosen = ", and ".join(f"{g}: {v}" for g, v in zip(groups, combination, strict=True))
            yield _goal(product, f"{text} with {chosen}" if chosen else text, attributes, combination)


def _fingerprint(products: Mapping[str, Product], goals: Mapping[str, Sequence[Goal]]) -> str:
    digest = hashlib.sha256()
    for product in products.values():
        digest.update(repr(product).encode())
    for split, split_goals in goals.items():
        digest.update(split.encode())
        for goal in split_goals:
            digest.update(repr(goal).encode())
    return digest.hexdigest()[:16]
