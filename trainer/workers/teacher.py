"""The teacher role: the frozen teacher scores the student's sampled tokens."""

from __future__ import annotations

from trainer.backends.hf import HFBackend
from trainer.backends.vllm import VLLMBackend
from trainer.config import TrainerConfig
from trainer.objectives.registry import build_config, get_objective
from trainer.precision import model_dtype
from trainer.rollout import Trajectory
from trainer.workers.factory import resolve_device, sleeps, teacher_parallel_size, vllm_engine_kwargs


class TeacherWorker:
    """The frozen teacher: scores on vLLM in bf16 (prompt log-probs of the student's exact tokens)
    with `backend.kind: vllm`, on transformers with `hf` (CPU, tests); refuses another tokenizer."""

    def __init__(self, config: TrainerConfig) -> None:
        from trainer.models.loading import check_same_tokenizer, load_tokenizer

        if not config.models.teacher:
            raise ValueError("this objective needs a teacher: set models.teacher")
        check_same_tokenizer(load_tokenizer(config.models.student), load_tokenizer(config.models.teacher))
        self.backend: VLLMBackend | HFBackend
        if config.backend.kind == "vllm":
            self.backend = VLLMBackend(
                config.models.teacher,
                **vllm_engine_kwargs(config),
                sleep_mode=sleeps(config),
                tensor_parallel_size=teacher_parallel_size(config.placement),
            )
        else:
            device = resolve_device(config.backend.device)
            self._dtype, self._device = model_dtype(config.precision.cpu_bf16, device), device
            self.backend = HFBackend.from_pretrained(
                config.models.teacher,
                device=device,
                dtype=self._dtype,
                batch_size=config.backend.teacher_batch_rows,
                width_multiple=config.backend.score_width_multiple,
            )
        self._path = config.models.teacher
        objective = get_objective(config.objective.name)
        params = build_config(config.objective.name, config.objective.params)
        self._listed = objective.scores_listed_replies(params)
        """Score every listed reply of the turns drawn among them too (`kl_over: replies`)."""
        self._top_k = objective.teacher_top_k(params)
        """The teacher's most likely tokens returned at each scored token (`token_kl: forward`; 0: none)."""

    def ready(self) -> bool:
        """Answers once the worker (and its engine) is built."""
        return True

    def sleep(self) -> None:
        """Colocated mode, through the learner's update: vLLM offloads the frozen weights to CPU and frees the KV
        cache (level 1); the hf backend (CPU) frees its weights (level 2: the update's peak memory is the process's,
        docs/design/036-smollm2-that-learns.md), and `wake_up` reads them again from the model folder."""
        self.backend.sleep(2 if isinstance(self.backend, HFBackend) else 1)

    def wake_up(self) -> None:
        """Bring the weights and KV cache back (the hf backend: the frozen weights read again from disk)."""
        if isinstance(self.backend, HFBackend) and self.backend.weights_freed:
            from trainer.models.loading import load_model, read_weights_into

            # in place, one tensor at a time (docs/design/039); a sharded checkpoint loads a whole model first
            if not self.backend.reload_weights(lambda model: read_weights_into(model, self._path)):
                self.backend.update_weights(load_model(self._path, dtype=self._dtype, device=self._device).state_dict())
        self.backend.wake_up(None)

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        """The trajectories with teacher log-probs on every student turn, and the tokens scored."""
        from trainer.batching import attach_teacher_logprobs

        scored = attach_teacher_logprobs(trajectories, self.backend, listed=self._listed, top_k=self._top_k)
        return trajectories, scored
