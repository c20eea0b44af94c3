"""WebShop's pages and actions as a state machine over plain data (web_agent_text_env.py, text mode).

Pages: `search` (instruction and a search bar), `results` (10 per page with `< Prev` from page
2 and `Next >` while more results follow, each result's asin, title and price, `Back to
Search`), `item` (`Back to Search`, `< Prev`, each option group with its values, title, price,
rating, `Description`, `Features`, `Reviews`, `Buy Now`), the three sub-pages (`Back to
Search`, `< Prev`, their text) and `done` (the purchase and its score). Observations are
WebShop's "simple" text mode: the page's visible texts joined by " [SEP] ".

Actions are `search[query]` (only on the search page) and `click[element]` with an element the
page offers, matched case-insensitively; `admissible` lists them as WebShop does (lower-case
clickables; `search[<your query>]` for the search bar). Anything else, malformed or not offered,
leaves the state unchanged and answers the current page preceded by why nothing happened.

Choices WebShop leaves to its HTML: `< Prev` on a sub-page returns to the item with the chosen
options kept, `< Prev` on an item returns to its results page and forgets them, `Back to Search`
forgets the query; `Next >` is offered only while a further page has results (WebShop always
shows it, leading to empty pages); an option value offered by two groups selects the later one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from envhub.envs.webshop.records import Goal, Product
from envhub.envs.webshop.reward import Reward, purchase_reward
from envhub.envs.webshop.search import SearchIndex, page

SEP = " [SEP] "
RESULTS_PER_PAGE = 10
MAX_ACTION_CHARS = 2000
"""Longer actions are answered as invalid (WebShop has no limit; the session layer has its own)."""
SUB_PAGES = ("description", "features", "reviews")
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "back to search", "next >", "< prev", "buy now"
SEARCH_HINT = "search[<your query>]"


@dataclass
class ShopState:
    """Everything an episode has done, as plain data (the native snapshot)."""

    page: str = "search"
    """search | results | item | description | features | reviews | done"""
    query: str = ""
    results: list[str] = field(default_factory=list)
    """All hits of the last search (asins, best first)."""
    result_page: int = 1
    asin: str = ""
    options: dict[str, str] = field(default_factory=dict)
    """Chosen option group -> value, in the order chosen."""
    searches: int = 0
    reward: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShopState:
        state = cls(**data)
        if state.page not in ("search", "results", "item", "done", *SUB_PAGES):
            raise ValueError(f"unknown page {state.page!r}")
        return state


@dataclass(frozen=True)
class Outcome:
    """What one action did: the new observation text, and the reward when it was a purchase."""

    text: str
    valid: bool
    reward: Reward | None = None


def parse(action: str) -> tuple[str, str] | None:
    """(name, argument) of "name[argument]", name lower-cased and both stripped; None if malformed."""
    text = action.strip()
    start = text.find("[")
    if start <= 0 or not text.endswith("]"):
        return None
    return text[:start].strip().lower(), text[start + 1 : -1].strip()


class Shop:
    """The pages of one catalogue; stateless, shared by the sessions of a process."""

    def __init__(self, products: dict[str, Product], index: SearchIndex) -> None:
        self.products = products
        self.index = index

    # pages -----------------------------------------------------------------------------------

    def render(self, state: ShopState, goal: Goal) -> str:
        """The observation text of the page `state` is on."""
        head = ["Instruction:", goal.instruction, "Back to Search"]
        if state.page == "search":
            return SEP.join(["WebShop", "Instruction:", goal.instruction, "Search"])
        if state.page == "results":
            shown = page(state.results, state.result_page, RESULTS_PER_PAGE)
            parts = [*head, f"Page {state.result_page} (Total results: {len(state.results)})"]
            parts += [label for label in ("< Prev", "Next >") if label.lower() in self._result_buttons(state)]
            for asin in shown:
                product = self.products[asin]
                parts += [asin, product.title, product.price_tag]
            return SEP.join(parts)
        product = self.products[state.asin]
        if state.page == "item":
            parts = [*head, "< Prev"]
            for group, values in product.options.items():
                parts += [group, *values]
            parts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}"]
            return SEP.join([*parts, "Description", "Features", "Reviews", "Buy Now"])
        if state.page == "description":
            return SEP.join([*head, "< Prev", product.description])
        if state.page == "features":
            return SEP.join([*head, "< Prev", *product.bullets])
        if state.page == "reviews":
            parts = [*head, "< Prev"]
            for review in product.reviews:
                parts += [f'"{review.title}"', str(review.score), review.body]
            return SEP.join(parts)
        options = json.dumps(state.options)
        return SEP.join(
            [
                "Thank you for shopping with us!",
                "Purchased",
                "asin",
                state.asin,
                "options",
                options,
                "Your score (min 0.0, max 1.0)",
                str(state.reward),
            ]
        )

    def _result_buttons(self, state: ShopState) -> list[str]:
        buttons = [BACK_TO_SEARCH]
        if state.result_page > 1:
            buttons.append(PREV_PAGE)
        if len(state.results) > state.result_page * RESULTS_PER_PAGE:
            buttons.append(NEXT_PAGE)
        return buttons

    def clickables(self, state: ShopState) -> list[str]:
        """The elements `click[...]` accepts on this page, lower-case, in page order."""
        if state.page == "results":
            shown = page(state.results, state.result_page, RESULTS_PER_PAGE)
            return [*self._result_buttons(state), *(asin.lower() for asin in shown)]
        if state.page == "item":
            values = [value for values in self.products[state.asin].options.values() for value in values]
            return [BACK_TO_SEARCH, PREV_PAGE, *dict.fromkeys(values), *SUB_PAGES, BUY_NOW]
        if state.page in SUB_PAGES:
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def admissible(self, state: ShopState) -> list[str]:
        """Every action the page offers."""
        searches = [SEARCH_HINT] if state.page == "search" else []
        return searches + [f"click[{element}]" for element in self.clickables(state)]

    # actions ---------------------------------------------------------------------------------

    def step(self, state: ShopState, goal: Goal, action: str) -> tuple[ShopState, Outcome]:
        """Apply `action`; an invalid one returns `state` itself and an explanatory observation."""
        problem, new, reward = self._apply(state, goal, action)
        if problem:
            return state, Outcome(f"Invalid action: {problem} Nothing happened.{SEP}{self.render(state, goal)}", False)
        return new, Outcome(self.render(new, goal), True, reward)

    def _apply(self, state: ShopState, goal: Goal, action: str) -> tuple[str, ShopState, Reward | None]:
        if len(action) > MAX_ACTION_CHARS:
            return f"the action is longer than {MAX_ACTION_CHARS} characters.", state, None
        parsed = parse(action)
        if parsed is None:
            return "write search[query] or click[element].", state, None
        name, argument = parsed
        if state.page == "done":
            return "the purchase is done.", state, None
        if name == "search":
            if state.page != "search":
                return "there is no search bar on this page; click[back to search] first.", state, None
            if not argument:
                return "search[] needs a query.", state, None
            query = argument.lower()
            results = self.index.search(query)
            return "", replace(state, page="results", query=query, results=results, result_page=1,
                               asin="", options={}, searches=state.searches + 1), None  # fmt: skip
        if name != "click":
            return f"unknown action {name!r}; use search[...] or click[...].", state, None
        element = argument.lower()
        if element not in self.clickables(state):
            return f"{argument!r} cannot be clicked on this page.", state, None
        return "", *self._click(state, goal, element)

    def _click(self, state: ShopState, goal: Goal, element: str) -> tuple[ShopState, Reward | None]:
        if element == BACK_TO_SEARCH:
            return replace(state, page="search", query="", results=[], result_page=1, asin="", options={}), None
        if state.page == "results":
            if element == NEXT_PAGE:
                return replace(state, result_page=state.result_page + 1), None
            if element == PREV_PAGE:
                return replace(state, result_page=state.result_page - 1), None
            asin = next(a for a in page(state.results, state.result_page, RESULTS_PER_PAGE) if a.lower() == element)
            return replace(state, page="item", asin=asin, options={}), None
        if state.page in SUB_PAGES:  # only < Prev is left
            return replace(state, page="item"), None
        if element == PREV_PAGE:
            return replace(state, page="results", asin="", options={}), None
        if element in SUB_PAGES:
            return replace(state, page=element), None
        product = self.products[state.asin]
        if element == BUY_NOW:
            reward = purchase_reward(product, goal, product.price, state.options)
            return replace(state, page="done", reward=reward.value), reward
        group = next(g for g in reversed(product.options) if element in product.options[g])
        return replace(state, options={**state.options, group: element}), None
