"""The paper sizing of docs/gpu.md: shapes against published figures, and the fitting rules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainer.sizing import (
    H200_GIB,
    HEADROOM,
    QWEN3,
    ModelShape,
    Workload,
    activations_gib,
    colocated,
    learner_peak_gib,
    learner_peak_parts_gib,
    learner_states_gib,
    read_shape,
    root_params,
    smallest,
    split,
    table,
)


@pytest.mark.parametrize(
    ("name", "published_billions"), [("Qwen3-1.7B", 1.7), ("Qwen3-4B", 4.0), ("Qwen3-8B", 8.2), ("Qwen3-32B", 32.8)]
)
def test_parameter_counts_match_published_sizes(name: str, published_billions: float) -> None:
    assert QWEN3[name].params / 1e9 == pytest.approx(published_billions, rel=0.03)


def test_kv_cache_per_token_is_k_and_v_over_all_layers_in_bf16() -> None:
    model = QWEN3["Qwen3-1.7B"]
    assert model.kv_bytes_per_token == 2 * 28 * 8 * 128 * 2


def test_more_learner_ranks_shard_the_optimizer_states() -> None:
    student, teacher = QWEN3["Qwen3-8B"], QWEN3["Qwen3-32B"]
    one, four = colocated(student, teacher, 1, Workload()), colocated(student, teacher, 4, Workload())
    assert four.learner_gib == pytest.approx(one.learner_gib / 4)


def test_smallest_plan_fits_within_headroom() -> None:
    work = Workload()
    for student, teacher in (("Qwen3-1.7B", "Qwen3-4B"), ("Qwen3-8B", "Qwen3-32B")):
        for plan_for in (colocated, split):
            plan = smallest(plan_for, QWEN3[student], QWEN3[teacher], work)
            assert plan.learner_gib + plan.activations_gib <= HEADROOM * H200_GIB
            assert plan.concurrent_sequences >= 64
    assert "Qwen3-8B / Qwen3-32B" in table(work)


def test_an_8b_learner_does_not_fit_one_gpu_colocated_with_a_32b_teacher() -> None:
    plan = colocated(QWEN3["Qwen3-8B"], QWEN3["Qwen3-32B"], 1, Workload())
    assert plan.kv_cache_gib < 0 or plan.concurrent_sequences < 64


def test_shapes_round_trip_through_a_hugging_face_config(tmp_path: Path) -> None:
    from transformers import AutoConfig

    for name, shape in QWEN3.items():
        assert ModelShape.from_hf_config(name, shape.hf_config()) == shape
    config = AutoConfig.for_model(**QWEN3["Qwen3-1.7B"].hf_config())
    assert (config.model_type, config.num_hidden_layers, config.head_dim) == ("qwen3", 28, 128)
    (tmp_path / "config.json").write_text(json.dumps(QWEN3["Qwen3-4B"].hf_config()))
    assert read_shape(tmp_path) == dataclasses.replace(QWEN3["Qwen3-4B"], name=tmp_path.name)
    assert read_shape(tmp_path / "missing") is None


def test_the_update_peak_counts_adamws_temporary_and_the_fsdp_roots_bf16_copy() -> None:
    """gpu-check's estimate beside the measured peak: the 4B learner's update on one H200 peaks in the optimizer
    step at 20 bytes per parameter (75 GiB), not at states + activations (65 GiB)."""
    four_b, work = QWEN3["Qwen3-4B"], Workload(micro_batch_tokens=16384, logit_chunk=1024)
    states, acts = learner_states_gib(four_b, 1), activations_gib(four_b, work)
    parts = learner_peak_parts_gib(four_b, 1, work)
    assert parts["optimizer"] == pytest.approx(20 * four_b.params / 2**30)
    assert parts["backward"] == pytest.approx(states + acts + 2 * root_params(four_b) / 2**30)
    assert root_params(four_b) == 151936 * 2560 + 2560  # tied: the embedding is the head
    assert learner_peak_gib(four_b, 1, work) == pytest.approx(74.9, abs=0.1)
    assert learner_peak_gib(four_b, 1, work) > states + acts + 9
    assert learner_peak_gib(QWEN3["Qwen3-1.7B"], 1, work) == pytest.approx(32.0, abs=0.1)
