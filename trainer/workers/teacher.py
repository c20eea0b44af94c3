"""The teacher role: the frozen teacher scores the student's sampled tokens."""

from __future__ import annotations

from trainer.backends.hf import HFBackend
from trainer.backends.vllm import VLLMBackend
from trainer.config import TrainerConfig
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
            dtype = model_dtype(config.precision.cpu_bf16, device)
            self.backend = HFBackend.from_pretrained(config.models.teacher, device=device, dtype=dtype)

    def ready(self) -> bool:
        """Answers once the worker (and its engine) is built."""
        return True

    def sleep(self) -> None:
        """Colocated mode: offload the frozen weights to CPU and free the KV cache (vLLM level 1)."""
        self.backend.sleep(1)

    def wake_up(self) -> None:
        """Bring the weights and KV cache back."""
        self.backend.wake_up(None)

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        """The trajectories with teacher log-probs on every student turn, and the tokens scored."""
        from trainer.batching import attach_teacher_logprobs

        scored = attach_teacher_logprobs(trajectories, self.backend)
        return trajectories, scored
