"""The teacher role: the frozen teacher scores the student's sampled tokens."""

from __future__ import annotations

from trainer.backends.base import ScoringBackend
from trainer.config import TrainerConfig
from trainer.rollout import Trajectory
from trainer.workers.factory import resolve_device


class TeacherWorker:
    """The frozen teacher: scores on vLLM in bf16 (prompt log-probs of the student's exact tokens)
    with `backend.kind: vllm`, on transformers with `hf` (CPU, tests); refuses another tokenizer."""

    def __init__(self, config: TrainerConfig) -> None:
        from trainer.models.loading import check_same_tokenizer, load_tokenizer

        if not config.models.teacher:
            raise ValueError("this objective needs a teacher: set models.teacher")
        check_same_tokenizer(load_tokenizer(config.models.student), load_tokenizer(config.models.teacher))
        self.backend: ScoringBackend
        if config.backend.kind == "vllm":
            from trainer.backends.vllm import VLLMBackend

            self.backend = VLLMBackend(
                config.models.teacher, gpu_memory_utilization=config.backend.gpu_memory_utilization
            )
        else:
            from trainer.backends.hf import HFBackend

            self.backend = HFBackend.from_pretrained(
                config.models.teacher, device=resolve_device(config.backend.device)
            )

    def score(self, trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
        """The trajectories with teacher log-probs on every student turn, and the tokens scored."""
        from trainer.batching import attach_teacher_logprobs

        scored = attach_teacher_logprobs(trajectories, self.backend)
        return trajectories, scored
