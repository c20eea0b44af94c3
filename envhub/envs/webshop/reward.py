"""WebShop's reward for a purchase, rule by rule (web_agent_site/engine/goal.py).

    reward = r_type * (matched attributes + matched options + [price <= budget])
                    / (goal attributes + goal options + 1)

* Fuzzy match (`fuzzy_match`): WebShop scores with thefuzz's `token_set_ratio`, which first
  keeps ASCII only, lower-cases and turns non-alphanumerics into spaces, and rounds the
  score to an integer; a pair matches when that integer is above 85. Here: rapidfuzz's
  `token_set_ratio` with the same preprocessing and rounding.
* Attributes (`attribute_matches`): a goal attribute matches when it fuzzy-matches one of
  the product's attributes, or else occurs (as a substring) in the lower-cased title,
  bullet points or description.
* Options (`option_matches`): both sides are colour-normalised (`normalize_color`); a goal
  option matches when it fuzzy-matches one of the chosen option values.
* Price: 1 when the price paid is at most the goal's `price_upper`.
* Product type (`type_factor`): 1, or 0.5 when neither the queries are equal, nor the
  category paths share at least two levels, nor the title-noun overlap is above 0.2; then
  0.1 when the overlap is below 0.1, and 0 when it is 0. The overlap is the share of the
  goal title's nouns (`nouns.title_nouns`) found among the purchased title's; a goal title
  without nouns counts as 0.2.

Success is a reward of 1 (`is_success`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from envhub.envs.webshop.normalize import normalize_color
from envhub.envs.webshop.nouns import title_nouns
from envhub.envs.webshop.records import Goal, Product

MATCH_THRESHOLD = 85
"""A fuzzy score must be above this (WebShop's value)."""
SUCCESS_TOLERANCE = 1e-9


def fuzzy_score(a: str, b: str) -> int:
    """thefuzz's token_set_ratio: ASCII only, default preprocessing, rounded to an integer."""
    a = a.encode("ascii", "ignore").decode()
    b = b.encode("ascii", "ignore").decode()
    return round(fuzz.token_set_ratio(a, b, processor=default_process))


def fuzzy_match(a: str, b: str) -> bool:
    return fuzzy_score(a, b) > MATCH_THRESHOLD


def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has (fuzzy in its attributes, else a substring of its texts)."""
    title = product.title.lower()
    bullets = " ".join(product.bullets).lower()
    description = product.description.lower()
    texts = (title, bullets, description)
    return sum(
        1
        for wanted in goal_attributes
        if any(fuzzy_match(have, wanted) for have in product.attributes) or any(wanted in text for text in texts)
    )


def option_matches(chosen: Iterable[str], goal_options: Iterable[str]) -> int:
    """How many goal options are among the chosen option values, after colour normalisation."""
    chosen_norm = [normalize_color(value) for value in chosen]
    return sum(1 for wanted in goal_options if any(fuzzy_match(have, normalize_color(wanted)) for have in chosen_norm))


@dataclass(frozen=True)
class TypeMatch:
    """The product-type factor and what it was decided from."""

    factor: float
    query_match: bool
    category_match: bool
    title_score: float


def _category_levels(path: str) -> set[str]:
    return {level.strip() for level in path.split("›")}


def type_factor(product: Product, goal: Goal) -> TypeMatch:
    """WebShop's r_type: is the purchased product the kind of product the goal asks for?"""
    query_match = product.query == goal.query
    category_match = len(_category_levels(product.product_category) & _category_levels(goal.product_category)) >= 2
    wanted = title_nouns(goal.name)
    have = set(title_nouns(product.title))
    title_score = len(have & set(wanted)) / len(wanted) if wanted else 0.2
    factor = 1.0
    if not (query_match or category_match or title_score > 0.2):
        factor = 0.5
    if title_score < 0.1:
        factor = 0.1
    if title_score == 0.0:
        factor = 0.0
    return TypeMatch(factor, query_match, category_match, title_score)


@dataclass(frozen=True)
class Reward:
    """The reward of one purchase with its parts."""

    value: float
    type_match: TypeMatch
    attributes_matched: int
    options_matched: int
    price_ok: bool

    def info(self) -> dict[str, float | int | bool]:
        """JSON-compatible breakdown (observation info on the done page)."""
        return {
            "reward": self.value,
            "r_type": self.type_match.factor,
            "query_match": self.type_match.query_match,
            "category_match": self.type_match.category_match,
            "title_score": self.type_match.title_score,
            "attributes_matched": self.attributes_matched,
            "options_matched": self.options_matched,
            "price_ok": self.price_ok,
        }


def purchase_reward(product: Product, goal: Goal, price: float, chosen: Mapping[str, str]) -> Reward:
    """The reward for buying `product` at `price` with `chosen` options (group -> value) under `goal`."""
    type_match = type_factor(product, goal)
    attributes = attribute_matches(product, goal.attributes)
    options = option_matches(chosen.values(), goal.options)
    price_ok = price <= goal.price_upper
    total = (attributes + options + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return Reward(total * type_match.factor, type_match, attributes, options, price_ok)


def is_success(reward: float) -> bool:
    """WebShop counts an episode a success when its reward is 1."""
    return abs(reward - 1.0) < SUCCESS_TOLERANCE
