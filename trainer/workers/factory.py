"""What the worker roles are built from: device, generation backend, environment port, rollout settings."""

from __future__ import annotations

from typing import Any

import torch

from envhub.client import Sessions
from envhub.client.formats import action_format
from trainer.backends.base import GenerationBackend
from trainer.config import BackendConfig, PlacementConfig, TrainerConfig
from trainer.precision import model_dtype
from trainer.prompts import PromptRenderer
from trainer.rollout import RolloutSettings


def resolve_device(device: str) -> str:
    """`auto` -> cuda when available, else cpu."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def sleeps(config: TrainerConfig) -> bool:
    """Whether the engines sleep during learner updates: colocated mode with a sleep level, except vLLM engines on
    CPU (vLLM's CPU build has no sleep mode, and there is no GPU memory to give the learner)."""
    return config.placement.mode == "colocated" and config.placement.sleep_level > 0 and not config.vllm_on_cpu()


def vllm_engine_kwargs(config: TrainerConfig) -> dict[str, Any]:
    """What every vLLM engine of a run gets from `backend` beyond its role's settings: the CPU build's KV cache
    size (`backend.cpu_kv_cache_mb`) and eager mode (`backend.enforce_eager`, None: eager on the CPU build)."""
    eager = config.vllm_on_cpu() if config.backend.enforce_eager is None else config.backend.enforce_eager
    return {
        "gpu_memory_utilization": config.backend.gpu_memory_utilization,
        "cpu_kv_cache_bytes": int(config.backend.cpu_kv_cache_mb * 1024 * 1024),
        "enforce_eager": eager,
    }


def bucket_bytes(backend: BackendConfig) -> int:
    """Most bytes of one weight-sync chunk (`backend.weight_bucket_mb`)."""
    return int(backend.weight_bucket_mb * 1024 * 1024)


def teacher_parallel_size(placement: PlacementConfig) -> int:
    """The teacher engine's tensor-parallel size: its GPUs in split mode, else 1."""
    placed = placement.mode == "split" and placement.learner_gpus > 0
    return placement.teacher_gpus if placed else 1


def make_generation_backend(config: TrainerConfig, path: str) -> GenerationBackend:
    """The student's generation backend named by `backend.kind`; a response ends once its action is closed (the
    environment's action format's stop strings: saves tokens, the parser needs nothing after them). hf: in bf16
    where `precision.cpu_bf16` says so, keeping keys and values across turns in `full` context mode."""
    from trainer.backends import make_backend

    stop = action_format(config.env.name).stop
    if config.backend.kind == "vllm":
        sync = config.weight_sync()
        return make_backend(
            "vllm",
            path,
            **vllm_engine_kwargs(config),
            stop=stop,
            weight_transfer=sync if sync in ("ipc", "nccl") else None,
            sleep_mode=sleeps(config),
            tensor_parallel_size=config.backend.tensor_parallel_size,
            bucket_bytes=bucket_bytes(config.backend),
        )
    device = resolve_device(config.backend.device)
    return make_backend(
        "hf",
        path,
        device=device,
        dtype=model_dtype(config.precision.cpu_bf16, device),
        stop=stop,
        kv_cache_mb=config.backend.kv_cache_mb if config.prompt.context == "full" else 0,
        decode_attention=config.backend.decode_attention_impl(),
        width_multiple=config.backend.score_width_multiple,
    )


def make_env_port(config: TrainerConfig, target: str) -> Sessions:
    """The session port over an envhub client connected to `target` ("host:port"); when the target
    stands for several replicas (a DNS name, an address list) and `env.failover_snapshot_every` is
    not 0, over every replica of it, with failover. Sessions get `env.options`, and list admissible
    actions when the prompt shows them."""
    from envhub.client import EnvhubClient
    from envhub.client.endpoints import several
    from envhub.client.failover import FailoverTransport

    every = config.env.failover_snapshot_every
    pooled = every > 0 and several(target)
    client = EnvhubClient(FailoverTransport.over([target], snapshot_every=every) if pooled else target)
    return Sessions(client, config.env.name, options=config.env.options, admissible=config.prompt.show_admissible)


def make_renderer(config: TrainerConfig) -> PromptRenderer:
    """The prompt renderer of `config.prompt` for `config.env`."""
    return PromptRenderer(
        config.env.name,
        style=config.prompt.style,
        context=config.prompt.context,
        history_length=config.prompt.history_length,
        show_admissible=config.prompt.show_admissible,
        lowercase_observation=config.prompt.lowercase_observation,
    )


def rollout_settings(config: TrainerConfig, *, held_out: bool = False) -> RolloutSettings:
    """Episode settings of `config`: of training rollouts (`rollout.max_turns` turns at most), or `held_out`
    (evaluations: `env.max_turns`)."""
    limit = config.rollout.max_turns
    return RolloutSettings(
        group_size=config.rollout.group_size,
        max_turns=config.env.max_turns if held_out or limit is None else limit,
        snapshots=config.rollout.snapshots,
        step_timeout_s=config.env.step_timeout_s,
        step_retries=config.env.step_retries,
        concurrency=config.rollout.concurrency,
        max_prompt_tokens=config.prompt.max_prompt_tokens,
        truncation=config.rollout.truncation,
        action_match=config.rollout.action_match,
        reply_space=config.prompt.reply_space,
    )
