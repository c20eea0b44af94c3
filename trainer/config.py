"""Typed, validated trainer configuration (pydantic v2), loaded from YAML.

Every field has a description; `docs/trainer.md` renders them as the config reference
(`python -m trainer.config` prints that table). Defaults follow the papers and
`OBJECTIVES.md`; the tiny CPU configs in `trainer/configs/` override what must differ
(learning rate, turn limit, prompt style). Misconfiguration raises `ConfigError` at
start-up with the remedy in the message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainer.errors import TrainerError
from trainer.lr_schedule import LrSchedule


class ConfigError(TrainerError):
    """A configuration that cannot run; the message says how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="INVALID_TRAINER_CONFIG")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelsConfig(_Section):
    """Where the student and teacher weights live (local folders only; everything is offline)."""

    student: str = Field("runs/models/student", description="Local HF folder (or .gguf file) of the student policy.")
    teacher: str | None = Field(
        "runs/models/teacher",
        description="Local HF folder of the frozen teacher; required by objectives that need one (opd, atod).",
    )
    gguf_file: str | None = Field(None, description="GGUF file name inside `student` when loading a GGUF model.")


class BackendConfig(_Section):
    """Generation / scoring backend."""

    kind: Literal["hf", "vllm"] = Field(
        "hf", description="`hf` (transformers, CPU or GPU) or `vllm` (CUDA: the [gpu] extra; CPU: vLLM's CPU build)."
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="`auto` picks cuda when available.")
    gpu_memory_utilization: float = Field(0.4, gt=0, le=1, description="vLLM: share of GPU memory per engine.")
    cpu_kv_cache_mb: float = Field(
        512,
        gt=0,
        description="vLLM's CPU build: KV cache of each engine in MB, set explicitly (there gpu_memory_utilization "
        "would reserve a share of the machine's RAM per engine). 512 MB holds ~23k tokens of SmolLM2-135M in bf16.",
    )
    enforce_eager: bool | None = Field(
        None,
        description="vLLM: run the model eagerly (no torch.compile, no CUDA graphs). None: eager on vLLM's CPU build "
        "(there torch.compile builds C++ kernels per model at every engine start: 30-40 s per engine on 2 cores, "
        "minutes under load), compiled with CUDA graphs on a GPU (vLLM's default).",
    )
    weight_sync: Literal["auto", "state_dict", "inproc", "ipc", "nccl"] = Field(
        "auto",
        description="How learner weights reach the rollout engines. `state_dict`: a CPU copy (hf backend); "
        "`inproc`: the learner's tensors handed to an engine in the same process (Ray off; the hf backend copies them "
        "into its own weights, without `state_dict`'s full fp32 copy first: docs/design/039); `ipc`: vLLM's "
        "weight-transfer API over CUDA IPC (colocated); `nccl`: the same API over an NCCL broadcast (split). "
        "`auto`: state_dict for hf; for vllm inproc without Ray, ipc when colocated, nccl when split (CUDA), "
        "state_dict under Ray on CPU (ipc and nccl move CUDA tensors).",
    )
    weight_bucket_mb: float = Field(
        2048, gt=0, description="Most megabytes of bf16 weights per transfer chunk (verl's 2048)."
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="vLLM tensor parallel size of each rollout engine (split mode: equal to placement.rollout_gpus; "
        "the engine's TP workers are its own processes on its bundle's GPUs).",
    )
    kv_cache_mb: float = Field(
        1024,
        ge=0,
        description="hf backend, `prompt.context: full`: most megabytes of keys and values kept between turns so "
        "a session's next prompt (which extends the previous prompt and response) prefills only its new tokens; "
        "least recently used entries are evicted past it (SmolLM2-135M: 46 KB a token in fp32, 23 KB in bf16). "
        "0: off (every turn prefills its whole prompt).",
    )
    teacher_batch_rows: int = Field(
        64,
        ge=1,
        description="hf backend: trajectories' longest rows the teacher scores in one forward. Its activations and "
        "logit chunks scale with it (SmolLM2, rows of ~300-400 tokens: +0.49 GB peak at 32 rows, +0.14 GB at 8, which "
        "also ran faster on one CPU thread; docs/design/039).",
    )
    score_width_multiple: int = Field(
        1,
        ge=1,
        description="hf backend: the rows of each listed-reply forward (`rollout.action_match: choice`, the teacher's "
        "reply scores) padded to a multiple of this many tokens, masked out: fewer distinct tensor shapes, as "
        "`optim.micro_batch_width_multiple` for the learner (oneDNN keeps kernels for every shape it meets on the CPU; "
        "docs/design/055). 1: the longest row's width.",
    )
    decode_attention: Literal["eager", "model"] = Field(
        "eager",
        description="hf backend: attention of the decode steps (one new token a row). `eager`: transformers' eager "
        "attention there, the model's own (SDPA) for the prefill and scoring (SmolLM2 in bf16 on the CPU: a decode "
        "step 232 ms against 507 ms with SDPA, whose prefill is 2.6x faster; docs/design/029, 033); `model`: the "
        "model's own throughout. On the H200 (Qwen3-1.7B shape, batch 64, 512-token prompts, bf16) `eager` is 2.7x "
        "faster too: 26.7 ms a decode step against 73.3 ms (docs/results/gpu-check-2026-12-04).",
    )

    def decode_attention_impl(self) -> str | None:
        """The hf backend's `decode_attention` argument: None for the model's own attention."""
        return None if self.decode_attention == "model" else self.decode_attention


class PrecisionConfig(_Section):
    """Numeric precision of CPU work (docs/design/019-cpu-bf16-kv-cache.md); the CUDA path is unchanged."""

    cpu_bf16: Literal["auto", "on", "off"] = Field(
        "off",
        description="bf16 on the CPU: the hf backend's generation and teacher scoring with bf16 weights, the learner "
        "and SFT under bf16 autocast (fp32 master weights and AdamW state). `auto`: on when the CPU lists "
        "amx_bf16 or avx512_bf16 (the reason is logged once). Default off: bf16 moves log-probs (SmolLM2-135M: "
        "mean 0.05, max 0.29 from fp32) and `auto` would make results depend on the machine; SmolLM2 runs 1.2-11x "
        "faster with it (docs/results/trainer-bench-speed.md), and the SmolLM2 quickstart sets `auto`.",
    )

    @field_validator("cpu_bf16", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: object) -> object:
        """YAML reads a bare `on` / `off` as a boolean: take it as the word."""
        return ("on" if value else "off") if isinstance(value, bool) else value


class EnvConfig(_Section):
    """Which environment to train on and where its server runs."""

    name: str = Field(
        "alfworld",
        description="Environment kind served by envhub (built in: alfworld, scienceworld, searchqa, webshop; or any "
        "installed environment package's). Its action format (prompt template, reply parser, stop strings) ships "
        "with the environment and must be found at load (`envhub.client.formats`).",
    )
    targets: list[str] = Field(
        default_factory=lambda: ["local"],
        description='Server addresses "host:port"; ["local"] starts a server on a free loopback port.',
    )
    failover_snapshot_every: int = Field(
        2,
        ge=0,
        description="Steps between the snapshots a rollout worker's envhub client keeps of each session when "
        'its target stands for several replicas ("dns:///name:port", every address of a Kubernetes headless '
        'Service, looked up again every 30 s; or "ipv4:host:port,host:port"): the client pools them and moves '
        "sessions off replicas that drain or die, or lose a worker (envhub.client.failover, docs/deployment.md). "
        "2 is measured: docs/results/envhub-failover-recovery.md. 0: no failover (a plain client per target).",
    )
    local_host: str = Field(
        "auto",
        description='Where "local" servers are reached: `auto` = localhost, or this node\'s routable address '
        "(servers then bind every interface) when ray.address names a cluster whose actors may run on other nodes; "
        "any other value is advertised as given (servers bind every interface). Other targets (host:port, "
        "Kubernetes service names) pass through unchanged.",
    )
    train_split: str = Field("train", description="Split the training tasks come from.")
    eval_split: str = Field("valid_unseen", description="Held-out split used by `trainer eval`.")
    eval_splits: list[str] = Field(
        default_factory=list,
        description="Held-out splits evaluated together, each reported and their mean (the papers' ALFWorld "
        "[valid_seen, valid_unseen]: in and out of distribution); empty: [eval_split].",
    )
    server_settings: dict[str, str] = Field(
        default_factory=dict,
        description="Settings of the servers the trainer starts itself (targets `local`), as `envhub serve --set "
        "<env>.KEY=VALUE` (the quickstart's {rooms: small}: ALFWorld's short games); empty: the environment's own "
        "defaults (ALFWorld: whole rooms, as the papers).",
    )
    task_ids: list[str] = Field(
        default_factory=list, description="Explicit training task ids; empty means every task of `train_split`."
    )
    families: list[str] = Field(
        default_factory=list, description="Keep only tasks of these families (e.g. pick_and_place_simple); empty: all."
    )
    max_tasks: int = Field(0, ge=0, description="Use only the first N training tasks (0: all).")
    max_turns: int = Field(50, ge=1, description="Turn limit per episode (ATOD: 50 on ALFWorld).")
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Options of every new session (CreateSession options, e.g. a ScienceWorld simplification).",
    )
    step_timeout_s: float = Field(30.0, gt=0, description="Deadline of one Step call.")

    def held_out_splits(self) -> list[str]:
        """The splits held-out evaluation plays: `eval_splits`, else `[eval_split]`."""
        return list(self.eval_splits) or [self.eval_split]

    step_retries: int = Field(1, ge=0, description="Retries of a failed step from the turn's snapshot before dropping.")

    @model_validator(mode="after")
    def _check_format(self) -> EnvConfig:
        from envhub.client.formats import action_format

        try:
            action_format(self.name)
        except (LookupError, ImportError, ValueError) as exc:
            raise ValueError(f"env.name {self.name!r}: {exc}") from exc
        return self


class PromptConfig(_Section):
    """How observations become prompts."""

    style: Literal["atod", "compact"] = Field(
        "atod", description="`atod`: the paper's Appendix B.4 templates; `compact`: a short variant for tiny models."
    )
    context: Literal["history", "full"] = Field(
        "history",
        description="`history`: one row per turn with the last `history_length` steps re-rendered; "
        "`full`: the whole episode as one growing chat.",
    )
    history_length: int = Field(
        2,
        ge=0,
        description="Recent (observation, action) pairs shown in history mode (`compact` style: the actions alone).",
    )
    show_admissible: bool = Field(True, description="Ask the server for admissible actions and list them.")
    reply_space: bool = Field(
        False,
        description="Expert replies (SFT targets) put a space after the opening tag (`<answer> Sao Tome</answer>`), "
        "so that a word copied from the prompt, where a space precedes it, is the same tokens in the reply.",
    )
    lowercase_observation: bool = Field(
        False,
        description="Observations in lower case, so that text the environment shows in capitals and lists in lower "
        "case among the admissible actions (WebShop's product ids) is the same tokens in both places.",
    )
    max_prompt_tokens: int = Field(
        1024,
        ge=16,
        description="History-mode prompt budget: fewer history steps are shown until it fits; the task and "
        "instructions are never cut (last resort: the middle). `full` mode is never cut (bound it with max_turns).",
    )


class RolloutConfig(_Section):
    """Sampling of trajectories."""

    strategy: str = Field(
        "group",
        description="Rollout strategy registered in `trainer.rollout.strategies` (`group`: G forked sessions per "
        "task in lock-step; the others are plugins that bring their driver step and config section: "
        "`python -m trainer.config` lists them).",
    )

    group_size: int = Field(8, ge=1, description="G trajectories per task (GRPO/ATOD: 8; Multi-Rollout OPD: n).")
    tasks_per_step: int = Field(4, ge=1, description="Task groups per training step.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature during training.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    max_new_tokens: int = Field(256, ge=1, description="Response length cap per turn.")
    truncation: Literal["invalid", "mask"] = Field(
        "invalid",
        description="A response cut at max_new_tokens (finish reason `length`): `invalid` (default, as in "
        "verl-agent/ATOD: an invalid action, nothing is sent, trained like any turn) or `mask` (sent if it "
        "parses, excluded from the loss, DAPO's overlong filtering).",
    )
    action_match: Literal["exact", "nearest", "constrained", "choice"] = Field(
        "exact",
        description="A reply's action not on the episode's concrete admissible list (ALFWorld, ScienceWorld): "
        "`exact` (default, the papers' free text: sent as written), `nearest` (the most similar listed action is "
        "sent, history and DAgger replay show it, the reply's tokens are learnt as generated; Huang et al. 2022; "
        "docs/design/038-action-matching.md), `constrained` (replies sampled token by token only among those naming a "
        "listed action) or `choice` (one of those replies drawn whole by the model's probability of each); the last "
        "two record unmasked log-probs, hf backend only (docs/design/041-constrained-actions.md).",
    )
    top_logprobs: int = Field(0, ge=0, le=20, description="Record the top-k log-probs per token (BranchOPD: 20).")
    snapshots: bool = Field(False, description="Record a snapshot handle at each turn start (one extra call).")
    concurrency: int = Field(16, ge=1, description="Concurrent Step calls per rollout worker.")
    max_turns: int | None = Field(
        None,
        ge=1,
        description="Turn limit of training episodes, at most env.max_turns (None: env.max_turns, the papers' "
        "setting). Held-out evaluations always play env.max_turns: a lower limit only makes the training rollouts of "
        "a student that wanders cheaper (docs/design/054-training-turn-limit.md).",
    )

    @model_validator(mode="after")
    def _check_strategy(self) -> RolloutConfig:
        from trainer.rollout.strategies import get_strategy

        get_strategy(self.strategy)
        return self


class PbrSection(_Section):
    """Protocol-boundary repair (BranchOPD PBR): detection rules and the weight / cap of its loss term."""

    rules: list[str] = Field(
        default_factory=list,
        description="PBR rules scanning every response (e.g. stray_close_think, eos_after_answer); empty: PBR off.",
    )
    weight: float = Field(0.01, ge=0, description="lambda, the weight of the PBR term.")
    cap: float | None = Field(0.02, gt=0, description="Cap on each PBR term (None: no cap).")
    cap_on: Literal["weighted", "term"] = Field(
        "weighted",
        description="Where the cap applies (the paper leaves it open): `weighted` min(lambda * u, cap) "
        "(OBJECTIVES.md), `term` lambda * min(u, cap).",
    )

    @model_validator(mode="after")
    def _check_rules(self) -> PbrSection:
        from trainer.branching.rules import rule_names

        unknown = [r for r in self.rules if r not in rule_names()]
        if unknown:
            raise ValueError(f"unknown PBR rule(s) {', '.join(unknown)}; known: {', '.join(rule_names())}")
        return self


class ObjectiveConfig(_Section):
    """Which advantage / loss runs, and its hyperparameters (any objective registered in trainer.objectives)."""

    name: str = Field(
        "atod",
        description="An objective registered in `trainer.objectives.registry` (built in: grpo, opd, atod, branchopd).",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Hyperparameters of the advantage function (e.g. kappa_init, tdur, anneal for atod).",
    )
    clip_eps: float = Field(0.2, gt=0, lt=1, description="PPO clip range epsilon.")
    reduction: str | None = Field(
        None,
        description="Loss reduction: token-mean, seq-mean-token-mean (mean over each trajectory's student tokens, "
        "then over trajectories), seq-mean-token-sum, or turn-mean-token-mean (each turn its own unit); "
        "None takes the objective's registered default (token-mean for opd, else seq-mean-token-mean).",
    )

    @model_validator(mode="after")
    def _check_params(self) -> ObjectiveConfig:
        from trainer.errors import TrainerError
        from trainer.objectives.loss import check_reduction
        from trainer.objectives.registry import build_config

        try:
            build_config(self.name, self.params)
            if self.reduction is not None:
                check_reduction(self.reduction)
        except TrainerError as exc:
            raise ValueError(exc.message) from exc
        return self


class OptimConfig(_Section):
    """Learner optimisation."""

    lr: float = Field(1e-6, gt=0, description="AdamW learning rate (papers: 1e-6; tiny CPU configs use ~1e-3).")
    warmup_steps: int = Field(
        0,
        ge=0,
        description="Learner steps (rollout batches) over which the learning rate rises linearly to `lr` (0: none, the "
        "papers' unstated default). AdamW's first updates move every weight by about the learning rate whatever its "
        "gradient's size: at ~1e-3 that wrecks a trained 64-wide model (docs/design/042).",
    )
    lr_schedule: LrSchedule = Field(
        "constant",
        description="After the warm-up: constant (the papers') or cosine, a half cosine from `lr` down to "
        "`min_lr_ratio` x `lr` at the run's last step (`steps`); the last policy then comes from small steps, not "
        "from wherever the last full-size update left it (docs/design/045).",
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="cosine: the last step's learning rate as a share of lr.")
    ema_decay: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="A moving average of the student's weights, updated after each learner step as ema = decay x ema "
        "+ (1 - decay) x weights (Polyak averaging; 0: off, the papers'). Checkpoints hold it as the model (what "
        "`trainer eval`, the quickstart and exports read) and the trained weights in their state (what rollouts "
        "use and a resume continues); the periodic `eval.every` evaluation plays it; one learner rank only "
        "(docs/design/045).",
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, gt=0, description="Gradient-norm clip.")
    micro_batch_tokens: int = Field(
        8192, ge=16, description="Token budget of one micro-batch; gradients accumulate over micro-batches."
    )
    micro_batch_width_multiple: int = Field(
        1,
        ge=1,
        description="Each micro-batch's width (its longest row) rounded up to a multiple of this many tokens (within "
        "the batch's padded width; the extra columns are padding, masked out): fewer distinct tensor shapes. On the "
        "CPU, oneDNN keeps kernels for every matmul shape it meets, about 10 MB per new SmolLM2 micro-batch width, "
        "held for the process's life, and the heap fragments around them (docs/design/039). 1: the longest row's.",
    )
    trim_heap_every: int = Field(
        0,
        ge=0,
        description="On the CPU: return the heap's free pages to the OS (glibc `malloc_trim`) at the start of each "
        "update and after every this many micro-batches. Freed activations and the engines' slept weights otherwise "
        "stay resident among long-lived blocks, raising the update's peak RSS (docs/design/039). 0: never.",
    )
    epochs: int = Field(1, ge=1, description="Passes over each rollout batch (1 = on-policy).")
    mini_batches: int = Field(
        1,
        ge=1,
        description="Optimizer updates per pass over a rollout batch: its rows cut into this many contiguous "
        "mini-batches (verl's `ppo_mini_batch_size` = batch / this; the advantages are the whole batch's). 1: one "
        "update per pass, the papers' unstated default; DivOPD's learner updates on 64 turn rows (docs/design/043).",
    )
    listed_keep: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Under `kl_over: replies`: the share of a batch's listed turns the reply-level KL trains on, those "
        "with the largest KL (the trained direction, times the turn's weight) between the rollout's choice and the "
        "teacher's, both known before the update (the rollout scored every listed reply to draw one). Near-agreeing "
        "turns add little gradient and cost a forward and backward each (docs/design/050). 1: every listed turn, the "
        "papers' setting. Not with `rl_over: replies` (its term needs every drawn turn).",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=0,
        description="Positions projected to the vocabulary at a time when computing log-probs (only supervised "
        "tokens are projected; fp32 temporaries of one chunk only, recomputed in backward); 0 = all at once.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute each decoder layer's activations in backward (HF gradient checkpointing)."
    )
    train_embeddings: bool = Field(
        True,
        description="Train the token embedding table (and the output projection when the model ties them). False: "
        "both frozen in the learner and the SFT, with no gradient or AdamW moments (SmolLM2's 28M of 135M "
        "parameters: 0.34 GB less at the update's peak; docs/design/057). Papers: every parameter trained.",
    )
    adamw: Literal["auto", "fused", "foreach", "loop"] = Field(
        "auto",
        description="torch AdamW implementation (the same update). auto: fused on the CPU (one pass per tensor, no "
        "temporaries; torch's default there is a loop over tensors allocating each one's), torch's default on GPUs "
        "and under FSDP (docs/design/033).",
    )
    recompute_logp_old: bool | None = Field(
        None,
        description="The PPO ratio's logp_old is the learner's own log-prob, not the rollout's (verl's default): taken "
        "from the update's forward (`logp_old_from_update`, one epoch) or recomputed before it. None: on when the "
        "rollout's numbers are not the learner's: backend.kind vllm, or hf with precision.cpu_bf16 in effect (bf16 "
        "rollout weights, autocast learner); off for an fp32 hf rollout (same model, same numbers).",
    )

    logp_old_from_update: bool = Field(
        True,
        description="Where logp_old is recomputed and epochs and mini_batches are 1 (one update per batch), the PPO "
        "ratio takes the update forward's own log-probs, detached (verl's dp_actor `on_policy`: the same values as a "
        "recompute at those parameters, ratio 1), and no separate recompute forward runs; the advantages then read "
        "the rollout's recorded log-probs (OBJECTIVES.md's logp_old; GRPO's do not read them). False: the separate "
        "recompute, which the advantages read too (docs/design/033).",
    )

    def recompute(self, backend_kind: str, bf16_rollout: bool = False) -> bool:
        """Whether to recompute logp_old for a rollout backend of kind `backend_kind` (`bf16_rollout`: an hf
        rollout in CPU bf16, whose log-probs differ from the learner's)."""
        if self.recompute_logp_old is not None:
            return self.recompute_logp_old
        return backend_kind != "hf" or bf16_rollout


class RayConfig(_Section):
    """Ray placement."""

    enabled: bool = Field(False, description="Run workers as Ray actors (False: in-process, same interface).")
    address: str | None = Field(
        None, description='Cluster address ("auto", "ray://head:10001", "head:6379"); None starts a local Ray.'
    )
    runtime_env: dict[str, Any] = Field(
        default_factory=dict,
        description="Ray runtime_env for every actor (e.g. working_dir, excludes, env_vars, py_modules) when the "
        "nodes do not already have this project installed; empty: none.",
    )
    num_rollout_workers: int = Field(1, ge=1, description="Rollout worker actors; tasks are split between them.")
    object_store_mb: int = Field(200, ge=75, description="Object store cap for a local Ray.")


class PlacementConfig(_Section):
    """GPUs per role under Ray (docs/gpu.md, docs/design/010-gpu-path.md). `learner_gpus: 0` asks for no GPU."""

    mode: Literal["colocated", "split"] = Field(
        "colocated",
        description="`colocated`: rollout engines and the teacher share the learner's GPUs (their engines sleep "
        "while the learner updates); `split`: each role gets its own GPUs.",
    )
    sleep_level: int = Field(
        2,
        ge=0,
        le=2,
        description="Colocated mode: vLLM sleep level of the rollout engines during the learner update (2: weights "
        "and KV cache freed, verl's choice; 1: weights to CPU; 0: no sleep). The teacher sleeps at level 1.",
    )
    learner_gpus: int = Field(
        0,
        ge=0,
        description="Learner ranks, one GPU each (FSDP2 over them); 0 = no GPUs (CPU). With vLLM's CPU build the "
        "placement group's bundles are CPU cores instead (docs/gpu.md).",
    )
    rollout_gpus: int = Field(1, ge=1, description="Split mode: GPUs per rollout engine (vLLM tensor parallel).")
    teacher_gpus: int = Field(1, ge=1, description="Split mode: GPUs of the teacher engine (vLLM tensor parallel).")
    strategy: Literal["PACK", "STRICT_PACK", "SPREAD"] = Field(
        "PACK", description="Ray placement-group strategy over the bundles (one bundle per GPU group)."
    )
    ready_timeout_s: float = Field(120.0, gt=0, description="Fail when the cluster cannot reserve the GPUs in time.")
    gpu_memory_gib: float = Field(
        139.0,
        gt=0,
        description="Memory of one GPU in GiB (an H200 reports about 139), for the config-load check that each GPU's "
        "vLLM engines (backend.gpu_memory_utilization each) plus its learner rank's states (16 bytes per parameter "
        "of models.student's config.json over the learner ranks) fit in one GPU.",
    )


NoProgressRule = Literal["unparsable", "inadmissible", "repeat_action", "repeat_observation"]
NO_PROGRESS_DEFAULT: tuple[NoProgressRule, ...] = ("unparsable", "inadmissible", "repeat_action", "repeat_observation")


class RecoveryConfig(_Section):
    """Teacher takeover of no-progress rollouts (DivOPD `+R`, `rollout.strategy: recovery`); off at evaluation."""

    patience: int = Field(
        3, ge=1, description="Turns without progress (repeated action/observation, invalid action) that trigger it."
    )
    takeover_turns: int = Field(2, ge=1, description="Most turns the teacher acts before handing back.")
    rewind: bool = Field(
        True, description="First restore the session to the snapshot of the last turn that made progress."
    )
    no_progress: list[NoProgressRule] = Field(
        default_factory=lambda: list(NO_PROGRESS_DEFAULT),
        description="What counts as a turn without progress (the paper names no rule): an unparsable action, one "
        "not in a concrete admissible list, or an action / observation repeated within the last `patience` turns.",
    )


class DivopdConfig(_Section):
    """Asynchronous producer/learner training with the DivOPD learner-side sampler (paper 001)."""

    enabled: bool = Field(
        False, description="Run asynchronously: producers fill a versioned buffer, the learner samples it."
    )
    reader: Literal["vanilla", "divopd", "divopd-base", "divopd-focus", "top-b", "gate-only", "arrival-pool"] = Field(
        "divopd",
        description="The paper's composers: `vanilla` (arrival order), `divopd` (Algorithm 1), `divopd-base` "
        "(Algorithm 1 without the within-rollout s(u) focus), `divopd-focus` (descending s(u) under the per-rollout "
        "cap); audit composers `top-b` (Table 11), `gate-only` and `arrival-pool` (Table 13). docs/divopd.md.",
    )
    base_order: Literal["random", "turn"] = Field(
        "random",
        description="DivOPD-base's order within a rollout (the paper only says it differs from s(u)): `random` "
        "(uniform, seeded) or `turn` (earliest first).",
    )
    batch_rows: int = Field(64, ge=1, description="B: turn rows per learner update.")
    pool_multiplier: int = Field(4, ge=1, description="c: the candidate pool holds at most c*B rows.")
    initial_cap: int = Field(4, ge=1, description="k: turns per rollout in the first sweep (grows by one per sweep).")
    max_staleness: int = Field(2, ge=0, description="delta: rows older than q - delta policy versions are dropped.")
    max_pending_age: int = Field(8, ge=0, description="W: pending rows are dropped once q - first_seen > W.")
    producers: int = Field(1, ge=1, description="Rollout producers (threads, or Ray actors when ray.enabled).")
    sync_every: int = Field(1, ge=1, description="Learner updates between weight pushes to the producers.")
    schedule: Literal["async", "lockstep"] = Field(
        "async",
        description="`async`: producers run freely beside the learner; `lockstep`: each producer plays one rollout "
        "batch per update (a fixed, reproducible arrival rate for stress tests).",
    )
    min_rows: int = Field(0, ge=0, description="Rows buffered before an update may start (0: batch_rows).")
    audit_every: int = Field(
        0,
        ge=0,
        description="Every N updates, the per-turn gradient audit of the candidate pool before the update (Tables 10 "
        "and 13: divopd/audit_projection, divopd/audit_cosine, divopd/focus_dropped_grad_norm_share; one backward per "
        "pool turn; the paper audits 8 updates); 0: off. One learner rank only.",
    )
    recovery: RecoveryConfig = Field(
        default_factory=RecoveryConfig,  # type: ignore[arg-type]
        description="Teacher takeover with `rollout.strategy: recovery`: patience, takeover_turns, rewind.",
    )


class EvalConfig(_Section):
    """Held-out evaluation."""

    temperature: float = Field(0.4, gt=0, description="Sampling temperature at evaluation (ATOD: 0.4).")
    num_tasks: int = Field(20, ge=1, description="Held-out tasks evaluated.")
    families_in_turn: list[str] = Field(
        default_factory=list,
        description="The held-out tasks taken in turn from each of these families (each one's first tasks, in this "
        "order), not the split's first `num_tasks`: a split listed family by family (Search-QA's test split, its "
        "seven datasets one after another) would otherwise give one family. []: the split's first tasks (of "
        "`env.families` when set).",
    )
    samples: int = Field(
        1,
        ge=1,
        description="Episodes per held-out task at each evaluation of `every` (sampling seeds differ; the success is "
        "the mean over every episode): more episodes, less noise between evaluations of one run.",
    )
    every: int = Field(
        0,
        ge=0,
        description="Every N training steps, `samples` episodes on each of the first num_tasks tasks of every held-out "
        "split with the current weights (the async driver: the learner's, on an evaluator of its own), logged as "
        "eval/* and plotted (0: only `trainer eval`).",
    )
    at_start: bool = Field(
        False,
        description="With `every`, also evaluate the starting weights before the first update, logged as step 0 "
        "(nAUC and the costs to target then start from the initial success; not on a resumed run).",
    )
    target_success: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Target held-out success tau: summary.json gives the updates, trained tokens and learner "
        "seconds to first reach it (the DivOPD paper's cost to tau; `trainer summary --baseline` the speedups).",
    )


LoggingBackend = Literal["tensorboard", "wandb", "mlflow"]


class LoggingConfig(_Section):
    """Where each step's metrics go besides `metrics.jsonl` (always written) and the PNG plot."""

    backends: list[LoggingBackend] = Field(
        default_factory=lambda: list[LoggingBackend](["tensorboard"]),
        description="tensorboard (output_dir/tensorboard), wandb (`pip install 'envhub[wandb]'`), mlflow "
        "(`pip install 'envhub[mlflow]'`); any subset, [] for metrics.jsonl only.",
    )
    rollouts: bool = Field(
        False,
        description="Append every training step's trajectories (prompt and reply text per turn, rewards, task ids) "
        "to output_dir/rollouts.jsonl, which `trainer export --run` turns into a Hugging Face data set (synchronous "
        "driver; off by default: a long run's text is large).",
    )
    project: str = Field("envhub", min_length=1, description="The wandb project and the MLflow experiment.")
    run_name: str = Field("", description="The wandb / MLflow run name (empty: output_dir's folder name).")
    wandb_mode: Literal["", "online", "offline"] = Field(
        "", description="wandb's mode (empty: wandb's own choice, WANDB_MODE); offline writes output_dir/wandb."
    )
    mlflow_tracking_uri: str = Field(
        "",
        description="MLflow tracking URI (empty: MLFLOW_TRACKING_URI, else a local store, "
        "sqlite:///<output_dir>/mlflow.db, with artifacts in output_dir/mlflow-artifacts).",
    )

    @model_validator(mode="after")
    def _unique(self) -> LoggingConfig:
        if len(set(self.backends)) != len(self.backends):
            raise ValueError(f"logging.backends lists a backend twice: {self.backends}")
        return self


class TrainerConfig(_Section):
    """A whole training run. Besides the sections below it takes the section of every registered rollout
    strategy that owns one (`Strategy.section`, listed by `python -m trainer.config`); other keys are refused."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    steps: int = Field(100, ge=0, description="Learner steps.")
    seed: int = Field(0, description="Seed of sampling, task order and model init.")
    output_dir: str = Field("runs/train", description="Checkpoints, metrics.jsonl, TensorBoard events, plot.")
    checkpoint_every: int = Field(10, ge=0, description="Save a checkpoint every N steps (0: only at the end).")
    checkpoint_keep: int = Field(
        0, ge=0, description="Keep only the newest N checkpoints in output_dir, deleting older ones (0: keep all)."
    )
    resume: bool = Field(True, description="Continue from the newest checkpoint in output_dir when present.")
    models: ModelsConfig = Field(default_factory=ModelsConfig)  # type: ignore[arg-type]
    backend: BackendConfig = Field(default_factory=BackendConfig)  # type: ignore[arg-type]
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig)  # type: ignore[arg-type]
    env: EnvConfig = Field(default_factory=EnvConfig)  # type: ignore[arg-type]
    prompt: PromptConfig = Field(default_factory=PromptConfig)  # type: ignore[arg-type]
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)  # type: ignore[arg-type]
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig)  # type: ignore[arg-type]
    optim: OptimConfig = Field(default_factory=OptimConfig)  # type: ignore[arg-type]
    ray: RayConfig = Field(default_factory=RayConfig)  # type: ignore[arg-type]
    placement: PlacementConfig = Field(default_factory=PlacementConfig)  # type: ignore[arg-type]
    divopd: DivopdConfig = Field(default_factory=DivopdConfig)  # type: ignore[arg-type]
    eval: EvalConfig = Field(default_factory=EvalConfig)  # type: ignore[arg-type]
    logging: LoggingConfig = Field(default_factory=LoggingConfig)  # type: ignore[arg-type]
    pbr: PbrSection = Field(default_factory=PbrSection)  # type: ignore[arg-type]

    def section(self, name: str) -> dict[str, Any]:
        """The strategy-owned section `name` as given in the config (empty when absent)."""
        return dict((self.model_extra or {}).get(name) or {})

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        self._check_strategy_sections()
        from trainer.objectives.registry import build_config, get_objective

        spec = get_objective(self.objective.name)
        if spec.needs_teacher and not self.models.teacher:
            raise ValueError(f"objective {spec.name!r} needs a teacher: set models.teacher to a local folder")
        if self.rollout.group_size < spec.min_group_size:
            raise ValueError(
                f"objective {spec.name!r} normalises rewards within a group: "
                f"set rollout.group_size >= {spec.min_group_size}"
            )
        if self.rollout.max_turns is not None and self.rollout.max_turns > self.env.max_turns:
            raise ValueError(
                f"rollout.max_turns ({self.rollout.max_turns}) limits training episodes within env.max_turns "
                f"({self.env.max_turns}): lower it or raise env.max_turns"
            )
        if self.divopd.enabled and self.logging.rollouts:
            raise ValueError(
                "logging.rollouts is recorded by the synchronous driver only: set it false with divopd.enabled"
            )
        if self.divopd.enabled and self.prompt.context != "history":
            raise ValueError("divopd trains on turn rows: set prompt.context to history")
        if self.divopd.enabled and not self.models.teacher:
            raise ValueError("divopd scores turns with the teacher: set models.teacher to a local folder")
        if self.placement.learner_gpus and not self.ray.enabled:
            raise ValueError("placement.learner_gpus reserves GPUs through Ray: set ray.enabled to true")
        if self.divopd.audit_every and self.placement.learner_gpus > 1:
            raise ValueError("divopd.audit_every runs on one learner rank: set placement.learner_gpus <= 1")
        from trainer.rollout.matching import CONSTRAIN

        params = build_config(spec.name, self.objective.params)
        for setting, on in (("kl_over", spec.scores_listed_replies(params)), ("rl_over", spec.rl_over_replies(params))):
            if on and self.rollout.action_match != "choice":
                raise ValueError(
                    f"objective {setting}: replies learns on the listed replies: set rollout.action_match: choice"
                )
            if on and self.placement.learner_gpus > 1:
                raise ValueError(
                    f"objective {setting}: replies trains on one learner rank: set placement.learner_gpus <= 1"
                )
        if self.rollout.action_match in CONSTRAIN and self.backend.kind != "hf":
            from trainer.backends.constraint import CONSTRAINED_NEEDS_HF

            raise ValueError(CONSTRAINED_NEEDS_HF)
        self._check_gpu_path()
        return self

    def vllm_on_cpu(self) -> bool:
        """vLLM engines on vLLM's CPU build (the installed vLLM decides: its device is not a setting): no sleep
        mode, no CUDA weight transfers, no GPU placement."""
        from trainer.backends.vllm import vllm_build_device

        return self.backend.kind == "vllm" and vllm_build_device() == "cpu"

    def weight_sync(self) -> str:
        """The weight-sync mode `backend.weight_sync: auto` resolves to (docs/gpu.md)."""
        if self.backend.weight_sync != "auto":
            return self.backend.weight_sync
        if self.backend.kind == "hf":
            return "state_dict"
        if not self.ray.enabled:
            return "inproc"
        if self.vllm_on_cpu():
            return "state_dict"
        return "ipc" if self.placement.mode == "colocated" else "nccl"

    def rollout_workers_per_target(self, targets: int) -> int:
        """Rollout workers per server target: `ray.num_rollout_workers` spread over `targets`, at least one each."""
        return max(1, self.ray.num_rollout_workers // max(targets, 1))

    def rollout_workers(self) -> int:
        """Rollout workers (each with its own generation engine) a run starts: per target over `env.targets`,
        or one per producer with `divopd.enabled`."""
        if self.divopd.enabled:
            return self.divopd.producers
        targets = len(self.env.targets)
        return self.rollout_workers_per_target(targets) * targets

    def _check_gpu_path(self) -> None:
        sync, backend, placement = self.weight_sync(), self.backend, self.placement
        if sync not in ("state_dict", "inproc") and backend.kind != "vllm":
            raise ValueError(f"backend.weight_sync {sync} pushes to vLLM engines: set backend.kind to vllm")
        if sync == "inproc" and self.ray.enabled:
            raise ValueError("backend.weight_sync inproc needs the engine in the learner's process: ray.enabled false")
        if sync == "ipc" and placement.mode != "colocated":
            raise ValueError("backend.weight_sync ipc shares GPU memory: it needs placement.mode colocated (use nccl)")
        if sync == "nccl" and (placement.mode != "split" or not self.ray.enabled):
            raise ValueError(
                "backend.weight_sync nccl broadcasts from the learner to engines on other GPUs: it needs "
                "ray.enabled and placement.mode split (use ipc when colocated)"
            )
        if backend.tensor_parallel_size > 1:
            if backend.kind != "vllm" or placement.mode != "split":
                raise ValueError("backend.tensor_parallel_size > 1 needs backend.kind vllm and placement.mode split")
            if not self.ray.enabled:
                raise ValueError(
                    "backend.tensor_parallel_size > 1 with ray.enabled false would push the weights through vLLM's "
                    "multiprocess engine client, where tensors arrive as lists: set ray.enabled true (placement.mode "
                    "split, weights over nccl) or backend.tensor_parallel_size 1"
                )
            if placement.learner_gpus and placement.rollout_gpus != backend.tensor_parallel_size:
                raise ValueError(
                    f"each rollout engine's bundle must hold its {backend.tensor_parallel_size} tensor-parallel GPUs: "
                    f"set placement.rollout_gpus to {backend.tensor_parallel_size}"
                )
        if backend.kind != "vllm":
            return
        if self.vllm_on_cpu():
            self._check_vllm_cpu(sync)
            return
        if self.ray.enabled and not placement.learner_gpus:
            raise ValueError(
                "backend.kind vllm under Ray needs placement.learner_gpus >= 1: without a placement group no actor "
                "is given a GPU, so every engine lands on GPU 0 (set placement.learner_gpus, and placement.mode "
                "colocated or split)"
            )
        self._check_one_engine_per_process()
        self._check_gpu_memory()

    def _check_vllm_cpu(self, sync: str) -> None:
        """vLLM's CPU build: weights load in-process (state_dict, inproc); engines need no GPU placement, and
        every engine still needs a process of its own."""
        if sync in ("ipc", "nccl"):
            raise ValueError(
                f"backend.weight_sync {sync} moves CUDA tensors; the installed vLLM is its CPU build, which loads "
                "weights in-process: set backend.weight_sync to auto, state_dict or inproc"
            )
        if self.backend.tensor_parallel_size > 1:
            raise ValueError("backend.tensor_parallel_size > 1 is for CUDA engines: set it to 1 on vLLM's CPU build")
        self._check_one_engine_per_process()

    def _check_one_engine_per_process(self) -> None:
        """vLLM keeps process-global distributed state and workspaces (and one sleep allocator per process):
        one engine per process, so with Ray off only one engine (one rollout worker, no teacher) may run."""
        if self.ray.enabled:
            return
        from trainer.objectives.registry import get_objective

        rollout, teacher = self.rollout_workers(), int(get_objective(self.objective.name).needs_teacher)
        if rollout + teacher > 1:
            raise ValueError(
                f"with ray.enabled false, {rollout + teacher} vLLM engines ({rollout} rollout, {teacher} teacher) "
                "would share this one process, and vLLM runs one engine per process (its distributed state, "
                "workspaces and sleep allocator are process-wide): set ray.enabled true (every engine is then its "
                "own actor process), or run one rollout worker with an objective that needs no teacher"
            )

    def _check_gpu_memory(self) -> None:
        """Every GPU's vLLM engines (each reserves `gpu_memory_utilization` of the whole GPU when it starts,
        before the learner exists) plus its learner ranks' states must fit in that GPU."""
        from trainer.objectives.registry import get_objective
        from trainer.sizing import learner_states_gib, read_shape
        from trainer.workers.placement import gpu_loads, plan_placement

        placement, utilization = self.placement, self.backend.gpu_memory_utilization
        shape = read_shape(self.models.student)
        learner_gib = learner_states_gib(shape, max(placement.learner_gpus, 1)) if shape else 0.0
        learner_share = learner_gib / placement.gpu_memory_gib
        plan = plan_placement(placement, self.rollout_workers(), get_objective(self.objective.name).needs_teacher)
        for gpu, (engines, learners) in enumerate(gpu_loads(plan)):
            load = engines * utilization + learners * learner_share
            if load <= 1.0:
                continue
            room = max(0.0, 1.0 - learners * learner_share)
            learner_text = (
                f" + {learners} learner rank(s)' states ({learner_gib:.1f} GiB of placement.gpu_memory_gib "
                f"{placement.gpu_memory_gib:g})"
                if learners and shape
                else ""
            )
            raise ValueError(
                f"GPU {gpu} would hold {engines} vLLM engine(s) x backend.gpu_memory_utilization {utilization:g}"
                f"{learner_text} = {load:.2f} of its memory (> 1): lower backend.gpu_memory_utilization to "
                f"{math.floor(room / max(engines, 1) * 100 + 1e-9) / 100:g} or less, or give the engines more GPUs "
                "(placement.learner_gpus, or placement.mode split)"
            )

    def _check_strategy_sections(self) -> None:
        from trainer.rollout.strategies import get_strategy, sections

        owned = sections()
        given = dict(self.model_extra or {})
        unknown = sorted(set(given) - set(owned))
        if unknown:
            known = [*type(self).model_fields, *owned]
            raise ValueError(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(known)}")
        for name, strategy in owned.items():
            if not isinstance(given.get(name, {}), Mapping):
                raise ValueError(f"section {name} must be a mapping of settings")
            try:
                strategy.settings_of(self)
            except (TrainerError, TypeError) as exc:
                raise ValueError(str(exc)) from exc
        missing = get_strategy(self.rollout.strategy).missing(self)
        if missing:
            raise ValueError(f"rollout.strategy {self.rollout.strategy!r} needs {'; '.join(missing)}")


def _apply_override(data: dict[str, Any], override: str) -> None:
    if "=" not in override:
        raise ConfigError(f"override {override!r} must look like section.field=value (e.g. optim.lr=1e-3)")
    dotted, raw = override.split("=", 1)
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: {key!r} is not a section")
    node[keys[-1]] = yaml.safe_load(raw)


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> TrainerConfig:
    """Read a YAML config (or the defaults when `path` is None) and apply `a.b=value` overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.is_file():
            shipped = Path(__file__).parent / "configs" / file.name
            if not shipped.is_file():
                raise ConfigError(f"config file {file} not found; shipped configs live in {shipped.parent}")
            file = shipped
        loaded = yaml.safe_load(file.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file} must hold a YAML mapping of sections")
        data = loaded
    for override in overrides:
        _apply_override(data, override)
    return config_from_dict(data)


def config_from_dict(data: Mapping[str, Any]) -> TrainerConfig:
    """Validate a plain mapping; errors name the field and the problem."""
    try:
        return TrainerConfig.model_validate(dict(data))
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()]
        raise ConfigError("invalid trainer config:\n" + "\n".join(lines)) from exc


def reference_markdown() -> str:
    """The config reference as a markdown table per section (used by docs/trainer.md)."""
    out: list[str] = []
    for section, info in TrainerConfig.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.append(f"\n### `{section}`: {(annotation.__doc__ or '').strip()}\n")
            out.append("| field | default | description |\n|---|---|---|")
            for name, field in annotation.model_fields.items():
                default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
                out.append(f"| `{name}` | `{default!r}` | {field.description or ''} |")
    top = [
        f"| `{n}` | `{f.default_factory() if f.default_factory else f.default!r}` | {f.description or ''} |"  # type: ignore[call-arg]
        for n, f in TrainerConfig.model_fields.items()
        if not (isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel))
    ]
    return (
        "\n".join(
            ["### top level\n", "| field | default | description |\n|---|---|---|", *top, *out, *_plugin_sections()]
        )
        + "\n"
    )


def _plugin_sections() -> list[str]:
    """The reference of each rollout strategy's own section (its settings dataclass: field, default)."""
    import dataclasses

    from trainer.rollout.strategies import sections

    out: list[str] = []
    for name, strategy in sorted(sections().items()):
        if strategy.settings is None:
            continue
        doc = (strategy.settings.__doc__ or "").strip()
        out.append(f"\n### `{name}` (rollout strategy `{strategy.name}`): {doc}\n")
        out.append("| field | default |\n|---|---|")
        for f in dataclasses.fields(strategy.settings):
            out.append(f"| `{f.name}` | `{f.default!r}` |")
    return out


if __name__ == "__main__":
    print(reference_markdown())
