"""`trainer bench --speed` pieces on the tiny model: both paths measure every rate, the page shows the ratios."""

from __future__ import annotations

import pytest

from trainer.experiments.speed import (
    LEARNER_RECOMPUTE,
    OLD,
    PathSpec,
    SpeedSizes,
    _measure,
    matmul_probe,
    speed_markdown,
)
from trainer.models.tiny import TinyModels

SMALL = SpeedSizes(
    sessions=2,
    turns=2,
    new_tokens=3,
    follow_up=4,
    prompt=8,
    learner_rows=2,
    learner_prompt=8,
    learner_response=4,
    sft_steps=1,
    sft_batch_tokens=256,
)


@pytest.mark.slow  # ~25 s under load: two learners, two SFT runs
def test_both_paths_measure_every_rate_and_the_page_shows_their_ratio(tiny_models: TinyModels) -> None:
    new = PathSpec("new", bf16=True, kv_cache_mb=16, share_prefixes=True, supervised_only=True)
    old, fresh = _measure(str(tiny_models.student), OLD, SMALL), _measure(str(tiny_models.student), new, SMALL)
    # the bf16 path also measures its learner with a separate logp_old recompute (029), against the same old one
    assert set(fresh) == {*old, LEARNER_RECOMPUTE} and all(value > 0 for value in [*old.values(), *fresh.values()])
    ratio = {key: fresh[key] / old[key] for key in old}
    ratio[LEARNER_RECOMPUTE] = fresh[LEARNER_RECOMPUTE] / old["learner_tokens_per_s"]
    old.update(load_before=1.5, load_after=2.5)
    fresh.update(load_before=2.5, load_after=3.0)
    diff = {
        "backend_bf16_mean": 0.1,
        "backend_bf16_max": 0.2,
        "learner_autocast_mean": 0.3,
        "learner_autocast_max": 0.4,
    }
    result = {
        "threads": 1,
        "cpu_bf16_flags": [],
        "sizes": SMALL.__dict__,
        "paths": {"old": OLD.name, "new": new.name},
        "matmul_gflops": matmul_probe(rows=(4,)),
        "models": {"tiny": {"old": old, "new": fresh, "ratio": ratio, "logprob_diff": diff}},
    }
    page = speed_markdown(result)
    assert f"| tiny | teacher scoring tokens/s | {old['scoring_tokens_per_s']:.0f} |" in page
    assert f"{ratio['generation_tokens_per_s']:.2f}x | >= 4x |" in page
    assert "| tiny | 0.1000 | 0.2000 | 0.3000 | 0.4000 |" in page
    assert "| tiny | 1.5 -> 2.5 | 2.5 -> 3.0 |" in page
    recompute = f"| tiny | learner tokens/s, separate logp_old recompute (029) | {old['learner_tokens_per_s']:.0f} |"
    assert f"{recompute} {fresh[LEARNER_RECOMPUTE]:.0f} | {ratio[LEARNER_RECOMPUTE]:.2f}x | >= 3x |" in page
    del fresh[LEARNER_RECOMPUTE]  # a path without bf16 measures no recompute: its row is left out
    assert "separate logp_old recompute (029) |" not in speed_markdown(result)
