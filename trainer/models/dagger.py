"""DAgger rounds for a ladder model (docs/design/028-ladder-dagger.md): play, let the expert label, SFT again.

Each round the model plays `tasks` training games (the next ones in turn, wrapping around) at `temperature`, the
server's expert labels every state it reached (`trainer.rollout.dagger`), the labels join those of earlier rounds,
and the model continues SFT for `steps` on the expert's own turns plus every label so far (Ross et al. 2011's
aggregation; training continues from the current model rather than restarting), or only the labels of the last
`keep_rounds` rounds (the current model's own states; earlier rounds' come from weaker policies).
`labels_per_state` caps the labels of each distinct state of an episode (a loop's repeated turns; 0: every turn
labelled).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import ConfigError, TrainerConfig

Example = tuple[list[int], list[int]]


@dataclass(frozen=True)
class Dagger:
    """A rung's DAgger rounds (`dagger:` in a ladder spec's rung; 0 rounds: none)."""

    rounds: int = 0
    tasks: int = 400
    """Training games the model plays in each round (taken in turn through the split)."""
    steps: int = 600
    """SFT steps after each round, on the expert's turns and every round's labels."""
    lr: float = 1e-3
    """Peak learning rate of each round's SFT (cosine)."""
    temperature: float = 0.4
    """Sampling temperature of the rounds' play (the held-out evaluation's)."""
    labels_per_state: int = 0
    """At most this many labels of each distinct state (observation, expert action) of an episode; 0: every turn."""
    keep_rounds: int = 0
    """SFT on the labels of the last this many rounds only (1: the current model's); 0: every round's (Ross et al.)."""
    action_match: str = ""
    """How the rounds' play sends the model's replies (`rollout.action_match`); "": the config's."""

    def __post_init__(self) -> None:
        from trainer.rollout.matching import ACTION_MATCHES

        if self.action_match and self.action_match not in ACTION_MATCHES:
            raise ConfigError(f"dagger.action_match {self.action_match!r} is not one of {', '.join(ACTION_MATCHES)}")


def kept_labels(rounds: Sequence[Sequence[Example]], keep_rounds: int) -> list[Example]:
    """The labels the next SFT trains on: those of the last `keep_rounds` rounds (0: every round's), oldest first."""
    first = max(len(rounds) - keep_rounds, 0) if keep_rounds else 0
    return [label for one in rounds[first:] for label in one]


def dagger_rounds(
    dagger: Dagger,
    config: TrainerConfig,
    target: str,
    model: Any,
    tokenizer: Any,
    expert_examples: Sequence[Example],
    *,
    games: Sequence[str],
    seed: int,
    batch_tokens: int,
    bf16: bool,
    score: Callable[[Any], float],
    log: Callable[[str], None] = print,
) -> list[dict[str, float]]:
    """Run `dagger.rounds` rounds on `model` in place, playing `games` (training task ids) in turn; a record per
    round (play, labels, SFT, `score(model)`)."""
    from trainer.rollout import SamplingSettings
    from trainer.rollout.dagger import label_all, labelled_examples
    from trainer.sft import learner_budget, sft_train
    from trainer.workers import RolloutWorker

    play = config.model_copy(deep=True)
    play.rollout.strategy = "group"  # the model plays alone
    if dagger.action_match:
        play.rollout.action_match = dagger.action_match  # type: ignore[assignment]
    rounds: list[list[Example]] = []
    records = []
    folder = Path(tempfile.mkdtemp(prefix="dagger-"))
    try:
        for index in range(dagger.rounds):
            start = time.perf_counter()
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            worker = RolloutWorker(play, target, policy_path=str(folder))
            try:
                chosen = [games[(index * dagger.tasks + i) % len(games)] for i in range(min(dagger.tasks, len(games)))]
                sampling = SamplingSettings(
                    max_new_tokens=config.rollout.max_new_tokens, temperature=dagger.temperature, seed=seed + index
                )
                played, _ = worker.run([(game, seed) for game in chosen], sampling, 1)
                labelled = label_all(
                    worker.port, played, max_turns=config.env.max_turns, labels_per_state=dagger.labels_per_state
                )
            finally:
                worker.close()
            rounds.append(labelled_examples(labelled, tokenizer, config.prompt.reply_space))
            labels = kept_labels(rounds, dagger.keep_rounds)
            turns = sum(len(one.actions) for one in labelled)
            repeats = sum(one.repeats for one in labelled)
            record = {
                "round": float(index + 1),
                "play_success": sum(t.won for t in played) / len(played),
                "labelled_turns": float(turns),
                "repeated_turns": float(repeats),
                "agreement": sum(one.agreed for one in labelled) / max(turns + repeats, 1),
                "diverged": float(sum(one.diverged for one in labelled)),
                "sft_labels": float(len(labels)),
                "play_seconds": time.perf_counter() - start,
            }
            trained = sft_train(
                model, tokenizer, [*expert_examples, *labels], steps=dagger.steps, lr=dagger.lr,
                batch_tokens=batch_tokens, seed=seed + index, schedule="cosine", cpu_bf16=bf16,
                **learner_budget(config.optim),
            )  # fmt: skip
            record.update({f"sft_{key}": value for key, value in trained.items()}, score=score(model))
            log(f"dagger round {index + 1}: {record}")
            records.append(record)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return records
