"""GPU memory sizing on paper: how the papers' student/teacher pairs fit on H200s.

`python -m trainer.sizing` prints the table quoted in docs/gpu.md. Every number is computed here
from the models' published shapes (their Hugging Face `config.json`) and the rules below, so the
method can be read, checked and rerun for another model or GPU.

Rules (bytes):
* learner, FSDP2 over `n` ranks, bf16 compute with fp32 master weights: params 4P/n, grads 4P/n
  (fp32 reduce), AdamW moments 8P/n.
* learner activations, gradient checkpointing per decoder layer: the saved layer inputs
  (tokens x hidden x 2 B x layers) plus one layer's recomputed working set
  (tokens x (4 hidden + q/k/v/o widths + 3 intermediate) x 2 B); log-probs computed in chunks of
  `logit_chunk` tokens: chunk x vocab x 4 B x 2 (fp32 logits and log-softmax). The unchunked
  figure (the whole micro-batch at once) is printed beside it.
* the learner update's peak (`learner_peak_gib`, what gpu-check prints beside the measured peak): the larger
  of the backward (states + activations + the FSDP2 root's unsharded bf16 parameters, 2 B x the
  embeddings, untied head and final norm, which FSDP2 keeps from the forward to the end of the backward)
  and the optimizer step (states + AdamW's fp32 temporary: torch's foreach AdamW takes the square root of
  every second moment at once, 4P/n).
* vLLM engine: bf16 weights 2P / tensor-parallel size, a fixed 3 GiB for CUDA graphs, activations
  and the sampler, and the KV cache: 2 (K and V) x layers x kv_heads x head_dim x 2 B per token.
* a plan fills at most HEADROOM (90%) of a GPU.
* colocated: one pool runs every role; vLLM sleeps (level 2) during the update, so the peak is the
  larger of the rollout phase (learner shards resident + student and teacher engines + KV cache) and
  the update phase (learner shards + activations). split: separate GPUs for learner, student engine
  and teacher engine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
H200_GIB = 139.0
"""Usable memory of one H200 as the device reports it (about 139 GiB of its 141 GB)."""
ENGINE_OVERHEAD_GIB = 3.0
HEADROOM = 0.9
"""Share of a GPU a plan may fill: the rest is left to fragmentation and NCCL buffers."""


@dataclass(frozen=True)
class ModelShape:
    """The decoder shapes that set memory (Qwen3 `config.json` fields)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool

    @property
    def params(self) -> int:
        """Parameter count: embeddings (+ untied LM head) + per layer attention, MLP and norms."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads) + 2 * self.head_dim
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + embeddings + self.hidden

    @classmethod
    def from_hf_config(cls, name: str, config: Mapping[str, Any]) -> ModelShape:
        """The shape of a Hugging Face decoder `config.json` (Qwen3, Llama and the like)."""
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        return cls(
            name,
            hidden,
            int(config["num_hidden_layers"]),
            heads,
            int(config.get("num_key_value_heads") or heads),
            int(config.get("head_dim") or hidden // heads),
            int(config["intermediate_size"]),
            int(config["vocab_size"]),
            bool(config.get("tie_word_embeddings", False)),
        )

    def hf_config(self) -> dict[str, Any]:
        """A Qwen3 `config.json` of this shape (Qwen3's published rope, norm and context settings), for
        random-initialised models of the papers' sizes (gpu-check's throughput and memory figures)."""
        return {
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tied_embeddings,
            "hidden_act": "silu",
            "max_position_embeddings": 40960,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000,
            "attention_bias": False,
        }

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 K and V for one token across all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


QWEN3 = {
    "Qwen3-1.7B": ModelShape("Qwen3-1.7B", 2048, 28, 16, 8, 128, 6144, 151936, True),
    "Qwen3-4B": ModelShape("Qwen3-4B", 2560, 36, 32, 8, 128, 9728, 151936, True),
    "Qwen3-8B": ModelShape("Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936, False),
    "Qwen3-32B": ModelShape("Qwen3-32B", 5120, 64, 64, 8, 128, 25600, 151936, False),
}


def read_shape(folder: str | Path) -> ModelShape | None:
    """The shape in a local model folder's `config.json`; None when there is none or it is not a decoder's."""
    path = Path(folder) / "config.json"
    try:
        return ModelShape.from_hf_config(Path(folder).name, json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class Workload:
    """What one training step asks of the GPUs (the papers' scale by default)."""

    sessions: int = 1024
    context_tokens: int = 4096 + 512
    micro_batch_tokens: int = 16384
    logit_chunk: int = 1024


def learner_states_gib(model: ModelShape, ranks: int) -> float:
    """fp32 master params + fp32 grads + AdamW moments, sharded over `ranks`."""
    return 16 * model.params / ranks / GIB


def root_params(model: ModelShape) -> int:
    """Parameters FSDP2's root unit holds (outside the decoder layers): embeddings, an untied LM head, the final
    norm."""
    return model.vocab * model.hidden * (1 if model.tied_embeddings else 2) + model.hidden


ADAMW_TEMP_BYTES = 4
"""Bytes per parameter of foreach AdamW's temporary (`torch._foreach_sqrt` of every fp32 second moment)."""


def learner_peak_parts_gib(model: ModelShape, ranks: int, work: Workload) -> dict[str, float]:
    """The update's two candidate peaks per rank: `backward` (states + activations + the root's unsharded bf16
    copy) and `optimizer` (states + AdamW's fp32 temporary)."""
    states = learner_states_gib(model, ranks)
    root_copy = 2 * root_params(model) / GIB
    return {
        "backward": states + activations_gib(model, work) + root_copy,
        "optimizer": states + ADAMW_TEMP_BYTES * model.params / ranks / GIB,
    }


def learner_peak_gib(model: ModelShape, ranks: int, work: Workload) -> float:
    """The most memory a learner rank allocates during an update (the larger of `learner_peak_parts_gib`)."""
    return max(learner_peak_parts_gib(model, ranks, work).values())


def activations_gib(model: ModelShape, work: Workload, *, chunked: bool = True) -> float:
    """Checkpointed activations of one micro-batch plus the log-prob temporaries."""
    tokens = work.micro_batch_tokens
    saved = tokens * model.hidden * 2 * model.layers
    widths = 4 * model.hidden + model.head_dim * (2 * model.heads + 2 * model.kv_heads) + 3 * model.intermediate
    working = tokens * widths * 2
    logit_tokens = work.logit_chunk if chunked else tokens
    logits = logit_tokens * model.vocab * 4 * 2
    return (saved + working + logits) / GIB


def engine_weights_gib(model: ModelShape, tensor_parallel: int = 1) -> float:
    """bf16 weights of one vLLM engine shard plus its fixed overhead."""
    return 2 * model.params / tensor_parallel / GIB + ENGINE_OVERHEAD_GIB


@dataclass(frozen=True)
class Plan:
    """A placement and its per-GPU memory."""

    student: str
    teacher: str
    mode: str
    gpus: int
    learner_gib: float
    activations_gib: float
    engines_gib: float
    kv_cache_gib: float

    @property
    def concurrent_sequences(self) -> int:
        """Full-context sequences the KV cache of one student engine holds."""
        model = QWEN3[self.student]
        return int(self.kv_cache_gib * GIB // (model.kv_bytes_per_token * Workload().context_tokens))


def colocated(student: ModelShape, teacher: ModelShape, gpus: int, work: Workload, gpu_gib: float = H200_GIB) -> Plan:
    """Every GPU holds a learner shard, a student engine (TP = 1) and a teacher engine shard (TP = gpus)."""
    learner = learner_states_gib(student, gpus)
    acts = activations_gib(student, work)
    engines = engine_weights_gib(student) + engine_weights_gib(teacher, gpus)
    kv = HEADROOM * gpu_gib - learner - engines
    if learner + acts > HEADROOM * gpu_gib:
        kv = -1.0
    return Plan(student.name, teacher.name, "colocated", gpus, learner, acts, engines, kv)


def split(
    student: ModelShape, teacher: ModelShape, learner_gpus: int, work: Workload, gpu_gib: float = H200_GIB
) -> Plan:
    """Learner on `learner_gpus`, one student engine GPU, teacher engine on as few GPUs as fit (TP)."""
    teacher_tp = 1
    while engine_weights_gib(teacher, teacher_tp) > 0.6 * gpu_gib:
        teacher_tp *= 2
    learner = learner_states_gib(student, learner_gpus)
    acts = activations_gib(student, work)
    kv = HEADROOM * gpu_gib - engine_weights_gib(student)
    if learner + acts > HEADROOM * gpu_gib:
        kv = -1.0
    gpus = learner_gpus + 1 + teacher_tp
    return Plan(student.name, teacher.name, "split", gpus, learner, acts, engine_weights_gib(student), kv)


PlanFor = Callable[[ModelShape, ModelShape, int, Workload], Plan]


def smallest(plan_for: PlanFor, student: ModelShape, teacher: ModelShape, work: Workload) -> Plan:
    """The smallest power-of-two GPU count whose plan fits with room for at least 64 sequences."""
    for n in (1, 2, 4, 8, 16, 32):
        plan = plan_for(student, teacher, n, work)
        if plan.kv_cache_gib > 0 and plan.concurrent_sequences >= 64:
            return plan
    raise ValueError(f"{student.name} / {teacher.name} does not fit 32 GPUs")


def table(work: Workload = Workload()) -> str:
    """The markdown table of docs/gpu.md."""
    lines = [
        "| student / teacher | mode | GPUs | learner states / GPU | activations / GPU | engine weights / GPU |"
        " KV cache (student engine) | full-context sequences in KV |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for student_name, teacher_name in (("Qwen3-1.7B", "Qwen3-4B"), ("Qwen3-8B", "Qwen3-32B")):
        student, teacher = QWEN3[student_name], QWEN3[teacher_name]
        plans: tuple[PlanFor, ...] = (colocated, split)
        for plan_for in plans:
            plan = smallest(plan_for, student, teacher, work)
            lines.append(
                f"| {student_name} / {teacher_name} | {plan.mode} | {plan.gpus} | {plan.learner_gib:.1f} GiB |"
                f" {plan.activations_gib:.1f} GiB | {plan.engines_gib:.1f} GiB | {plan.kv_cache_gib:.1f} GiB |"
                f" {plan.concurrent_sequences} |"
            )
    return "\n".join(lines)


def shapes_table(work: Workload = Workload()) -> str:
    """Per-model inputs: parameters, KV bytes per token, activations chunked vs unchunked."""
    lines = [
        "| model | parameters | KV cache per token |"
        " activations per 16k-token micro-batch (chunked / unchunked logits) |",
        "|---|---|---|---|",
    ]
    for model in QWEN3.values():
        lines.append(
            f"| {model.name} | {model.params / 1e9:.2f} B | {model.kv_bytes_per_token / 1024:.0f} KiB |"
            f" {activations_gib(model, work):.1f} / {activations_gib(model, work, chunked=False):.1f} GiB |"
        )
    return "\n".join(lines)


def main() -> None:
    """Print both tables."""
    work = Workload()
    print(shapes_table(work))
    print()
    print(table(work))
    print(
        f"\n(H200 = {H200_GIB} GiB usable; {work.sessions} sessions at {work.context_tokens} tokens need "
        f"{math.ceil(work.sessions / 64)} waves of 64 if the KV cache holds 64 sequences.)"
    )


if __name__ == "__main__":
    main()
