"""The experts behind `expert_actions` (session option `expert`): the oracle (default) and the page expert.

The oracle knows the goal's product and plays it straight.

From the search page it searches the goal's instruction (without the budget clause); on a
results page it clicks the goal product when shown, else `Next >`, else goes back to search
and, on the second search, searches the goal product's title. On another product's page, or a
sub-page, it goes back (`< Prev`). On the goal product's page it clicks, for each goal option,
the offered value that matches it best (WebShop's fuzzy rule, after colour normalisation) and
is not chosen yet, then `Buy Now`. Its success rate on the generated test split is in
docs/environments/webshop.md.

The page expert (`expert=page`) acts only on what the prompt shows, so that a policy can imitate it (the
oracle pages on to its hidden product past results that would earn the full reward, which no policy can
recover from the page): it searches the instruction as the oracle does; on a results page it clicks the first
product whose title holds the goal's attributes (two of them when the goal asks for more: titles list two or
three) and whose shown price, all of a range, is within the budget, else `Next >`; on a product page it clicks
the offered value matching each goal option, then `Buy Now`.

The first-product expert (`expert=first`) is the page expert that on a results page always clicks the first listed
product: a choice a policy makes by copying the first id after `Next >`, without weighing titles and prices (the
page expert clicks a later product in about a quarter of its clicks; docs/design/040-webshop-teacher.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from envhub.envs.webshop.engine import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    RESULTS_PER_PAGE,
    Shop,
    ShopState,
)
from envhub.envs.webshop.normalize import normalize_color
from envhub.envs.webshop.records import Goal, Product
from envhub.envs.webshop.reward import MATCH_THRESHOLD, fuzzy_score
from envhub.envs.webshop.search import page


def goal_query(goal: Goal) -> str:
    """The instruction without WebShop's budget clause."""
    return goal.instruction.split(", and price lower than")[0]


def oracle_action(shop: Shop, state: ShopState, goal: Goal) -> str | None:
    """The oracle's next action, or None on the done page."""
    if state.page == "done":
        return None
    if state.page == "search":
        query = goal_query(goal) if state.searches == 0 else shop.products[goal.asin].title
        return f"search[{query.lower()}]"
    clickables = shop.clickables(state)
    if state.page == "results":
        if goal.asin in page(state.results, state.result_page, RESULTS_PER_PAGE):
            return f"click[{goal.asin.lower()}]"
        return f"click[{NEXT_PAGE if NEXT_PAGE in clickables else BACK_TO_SEARCH}]"
    if state.page != "item" or state.asin != goal.asin:
        return f"click[{PREV_PAGE}]"
    return _options_then_buy(shop, state, goal)


def page_action(shop: Shop, state: ShopState, goal: Goal) -> str | None:
    """The page expert's next action (only what the page and the instruction show), or None when it has none."""
    if state.page == "done":
        return None
    if state.page == "search":
        return f"search[{goal_query(goal).lower()}]"
    if state.page == "results":
        for asin in page(state.results, state.result_page, RESULTS_PER_PAGE):
            if _looks_right(shop.products[asin], goal):
                return f"click[{asin.lower()}]"
        return f"click[{NEXT_PAGE}]" if NEXT_PAGE in shop.clickables(state) else f"click[{BACK_TO_SEARCH}]"
    return _off_results(shop, state, goal)


def first_product_action(shop: Shop, state: ShopState, goal: Goal) -> str | None:
    """The first-product expert's next action: the page expert's, but the first listed product on a results page."""
    if state.page == "results":
        shown = page(state.results, state.result_page, RESULTS_PER_PAGE)
        return f"click[{shown[0].lower()}]" if shown else f"click[{BACK_TO_SEARCH}]"
    return page_action(shop, state, goal)


def _off_results(shop: Shop, state: ShopState, goal: Goal) -> str:
    """Off the search and results pages: the options and `Buy Now` on a product page, else back (`< Prev`)."""
    if state.page != "item":
        return f"click[{PREV_PAGE}]"
    return _options_then_buy(shop, state, goal)


def _looks_right(product: Product, goal: Goal) -> bool:
    """The title holds the goal's attributes (at most two needed) and the whole shown price is within budget."""
    title = product.title.lower()
    held = sum(attribute in title for attribute in goal.attributes)
    prices = [float(number) for number in re.findall(r"\d+(?:\.\d+)?", product.price_tag)] or [product.price]
    return held >= min(len(goal.attributes), 2) and max(prices) <= goal.price_upper


def _options_then_buy(shop: Shop, state: ShopState, goal: Goal) -> str:
    """On a product page: the offered value matching each goal option not chosen yet, then `Buy Now`."""
    chosen = set(state.options.values())
    offered = [value for values in shop.products[state.asin].options.values() for value in values]
    for wanted in goal.options:
        value = _best_value(offered, wanted)
        if value is not None and value not in chosen:
            return f"click[{value}]"
    return f"click[{BUY_NOW}]"


def _best_value(offered: list[str], wanted: str) -> str | None:
    """The offered option value equal to `wanted`, else the best fuzzy match above the threshold."""
    if wanted in offered:
        return wanted
    scored = [(fuzzy_score(normalize_color(value), normalize_color(wanted)), value) for value in offered]
    best = max(scored, default=(0, ""), key=lambda pair: pair[0])
    return best[1] if best[0] > MATCH_THRESHOLD else None


EXPERTS: dict[str, Callable[[Shop, ShopState, Goal], str | None]] = {
    "oracle": oracle_action,
    "page": page_action,
    "first": first_product_action,
}
"""The session option `expert`'s values and their policies."""


def expert_option(options: Mapping[str, str]) -> str:
    """The session's `expert` option (default `oracle`); ValueError naming the known values otherwise."""
    name = options.get("expert", "oracle")
    if name not in EXPERTS:
        raise ValueError(f"option expert={name!r} is not one of {', '.join(EXPERTS)}")
    return name
