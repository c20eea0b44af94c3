"""The `recovery` rollout strategy (DivOPD `+R`): `GroupRollout` with teacher takeover of stalled rollouts.

Select it with `rollout.strategy: recovery`; `divopd.recovery` holds patience, takeover turns and
rewind. The worker loads the frozen teacher as a second generation backend. Evaluation always plays
the `group` strategy, so takeover never runs there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.rollout.group import GroupRollout
from trainer.rollout.strategies import RolloutParts, Strategy, register_strategy
from trainer.rollout.takeover import Recovery, RecoverySettings


def recovery_rollout(parts: RolloutParts) -> GroupRollout:
    """A `GroupRollout` whose stalled sessions the teacher takes over."""
    from trainer.workers.factory import make_generation_backend

    config = parts.config
    r = config.divopd.recovery
    rules = frozenset(r.no_progress)
    settings = RecoverySettings(r.patience, r.takeover_turns, r.rewind, rules)
    teacher = make_generation_backend(config, config.models.teacher)
    return GroupRollout(
        parts.port, parts.backend, parts.tokenizer, parts.renderer, parts.settings, Recovery(settings, teacher)
    )


def recovery_needs(config: Any) -> Mapping[str, bool]:
    """What teacher takeover needs of the config: remedy -> met."""
    return {
        "models.teacher (it hands turns to the teacher)": bool(config.models.teacher),
        "prompt.context: history (it rewinds the prompt history)": config.prompt.context == "history",
        "rollout.snapshots: true, or divopd.recovery.rewind: false (rewind restores turn snapshots)": (
            config.rollout.snapshots or not config.divopd.recovery.rewind
        ),
    }


register_strategy(Strategy("recovery", recovery_rollout, needs=recovery_needs))
