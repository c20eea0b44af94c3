"""`WebShopEnv`: one WebShop episode behind envhub's `Environment` contract.

The reward is the purchase's (`reward.purchase_reward`), on the `Buy Now` step, which ends the
episode; `won` is a reward of 1. The step limit is the session's (15 by default, as in the
papers). Native snapshots are the plain `ShopState` as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envhub.core import errors
from envhub.core.environment import Environment, Observation, StepResult, TaskSpec
from envhub.envs.webshop.catalog import Catalog
from envhub.envs.webshop.engine import Outcome, Shop, ShopState
from envhub.envs.webshop.expert import EXPERTS, expert_option
from envhub.envs.webshop.records import Goal
from envhub.envs.webshop.reward import is_success

NATIVE_FORMAT = 1


class WebShopEnv(Environment):
    """A shopper on one catalogue; reusable across goals."""

    def __init__(self, catalog: Catalog, shop: Shop) -> None:
        self._catalog = catalog
        self._shop = shop
        self._goal: Goal | None = None
        self._task_id = ""
        self._state = ShopState()
        self._expert = EXPERTS["oracle"]

    def _live(self) -> Goal:
        if self._goal is None:
            raise errors.failed_precondition("the WebShop environment has not been reset", "NOT_RESET")
        return self._goal

    def _observation(self, outcome: Outcome) -> Observation:
        goal = self._live()
        info: dict[str, Any] = {"page": self._state.page, "valid_action": outcome.valid}
        if outcome.reward is not None:
            info.update(outcome.reward.info())
        return Observation(text=outcome.text, task_description=goal.instruction, score=self._state.reward, info=info)

    def _start(self, task: TaskSpec, options: Mapping[str, str]) -> Goal:
        try:
            self._expert = EXPERTS[expert_option(options)]
        except ValueError as exc:
            raise errors.invalid_argument(str(exc), "BAD_OPTION") from exc
        self._goal = self._catalog.goals[task.split][task.index]
        self._task_id = task.task_id
        return self._goal

    def reset(self, task: TaskSpec, *, seed: int, options: Mapping[str, str]) -> Observation:
        goal = self._start(task, options)
        self._state = ShopState()
        return self._observation(Outcome(self._shop.render(self._state, goal), True))

    def step(self, action: str) -> StepResult:
        goal = self._live()
        self._state, outcome = self._shop.step(self._state, goal, action)
        reward = outcome.reward.value if outcome.reward is not None else 0.0
        done = outcome.reward is not None
        return StepResult(self._observation(outcome), reward, terminated=done, won=done and is_success(reward))

    def admissible_actions(self) -> list[str]:
        self._live()
        return self._shop.admissible(self._state)

    def expert_actions(self) -> list[str]:
        action = self._expert(self._shop, self._state, self._live())
        return [] if action is None else [action]

    def native_state(self) -> str:
        self._live()
        data = {"format": NATIVE_FORMAT, "task_id": self._task_id, "state": self._state.to_json()}
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    def load_native_state(
        self, task: TaskSpec, *, seed: int, options: Mapping[str, str], state: str, observation: Observation
    ) -> None:
        try:
            data = json.loads(state)
            if data["format"] != NATIVE_FORMAT or data["task_id"] != task.task_id:
                raise ValueError(f"native state is format {data['format']} of {data['task_id']!r}")
            shop_state = ShopState.from_json(data["state"])
            self._check(shop_state)
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.invalid_argument(f"unusable WebShop native state: {exc!r}", "BAD_NATIVE_STATE") from exc
        self._start(task, options)
        self._state = shop_state

    def _check(self, state: ShopState) -> None:
        """Refuse states naming products this catalogue lacks (a snapshot from other data)."""
        unknown = [asin for asin in [*state.results, *([state.asin] if state.asin else [])]
                   if asin not in self._shop.products]  # fmt: skip
        if unknown or (state.page not in ("search", "results") and not state.asin):
            raise ValueError(f"state names unknown products {unknown[:3]} or lacks one on page {state.page!r}")
