"""The oracle behind `expert_actions`: it knows the goal's product and plays it straight.

From the search page it searches the goal's instruction (without the budget clause); on a
results page it clicks the goal product when shown, else `Next >`, else goes back to search
and, on the second search, searches the goal product's title. On another product's page, or a
sub-page, it goes back (`< Prev`). On the goal product's page it clicks, for each goal option,
the offered value that matches it best (WebShop's fuzzy rule, after colour normalisation) and
is not chosen yet, then `Buy Now`. Its success rate on the generated test split is in
docs/environments/webshop.md.
"""

from __future__ import annotations

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
from envhub.envs.webshop.records import Goal
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
    chosen = set(state.options.values())
    offered = [value for values in shop.products[goal.asin].options.values() for value in values]
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
