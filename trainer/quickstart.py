"""`trainer quickstart` and its building blocks (`make_models`, `sft_from_expert`), also used by the CLI.

The quickstart starts a local envhub server itself (`--env`; default ALFWorld, else ScienceWorld), collects expert
episodes through GetExpertActions, makes (or reuses) a tiny tokenizer + random student + teacher
under `runs/models`, fine-tunes the teacher on the expert turns and briefly warm-starts the student
on them (both cached: a random student emits no valid action, so RL alone would have nothing to
reinforce), evaluates, trains a few ATOD steps on CPU, evaluates again and writes
`runs/quickstart/report.md` with the plot.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from trainer.config import TrainerConfig, load_config
from trainer.driver import train
from trainer.eval import EvalResult, evaluate
from trainer.models.tiny import TinyModels, TinySpec, make_tiny_models
from trainer.prompts import PromptRenderer
from trainer.rollout.expert import ExpertEpisode, collect_expert, expert_texts, sft_examples
from trainer.rollout.local_server import LocalServer

SFT_MARKER = "sft.json"
EXPERT_TASKS = 400
"""Training tasks the expert plays for the tokenizer text and the SFT examples (~2,500 turns of pick-and-place)."""
SFT_STEPS = 1500
"""Teacher SFT steps: held-out per-turn exact match ~0.67, wins ~1/3 of held-out games (docs/trainer.md)."""
WARM_START_STEPS = 600
"""Student warm-start SFT steps: enough for valid actions and mixed outcomes, far below the teacher."""


ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "alfworld": (),
    "scienceworld": ("env.families=[]", "env.eval_split=dev"),
    "webshop": ("env.families=[]", "env.eval_split=test"),
}
"""Config overrides that fit quickstart.yaml (written for ALFWorld) to each environment `--env` takes."""


def pick_environment() -> str:
    """ALFWorld when its extra is installed, else ScienceWorld."""
    return "alfworld" if importlib.util.find_spec("alfworld") else "scienceworld"


def renderer_for(config: TrainerConfig, style: str | None = None) -> PromptRenderer:
    """The prompt renderer a config's rollouts use (optionally in another style)."""
    return PromptRenderer(
        config.env.name,
        style=style or config.prompt.style,
        context=config.prompt.context,
        history_length=config.prompt.history_length,
        show_admissible=config.prompt.show_admissible,
    )


def expert_episodes(config: TrainerConfig, target: str, num_tasks: int) -> list[ExpertEpisode]:
    """Expert episodes on the first `num_tasks` training tasks of `config` served at `target`."""
    from envhub.client import EnvhubClient, Sessions

    with EnvhubClient(target) as client:
        port = Sessions(client, config.env.name)
        task_ids = list(config.env.task_ids) or port.task_ids(config.env.train_split, config.env.families)
        return collect_expert(port, task_ids[:num_tasks], max_turns=config.env.max_turns, seed=config.seed)


def make_models(config: TrainerConfig, episodes: Sequence[ExpertEpisode], out_dir: str | Path) -> TinyModels:
    """Tokenizer on the episodes' text (both prompt styles) + random student (64x2) and teacher (128x2)."""
    texts = expert_texts(episodes, [renderer_for(config, "compact"), renderer_for(config, "atod")])
    return make_tiny_models(out_dir, texts, student=TinySpec(64, 2), teacher=TinySpec(128, 2), vocab_size=1024)


def sft_from_expert(
    config: TrainerConfig, episodes: Sequence[ExpertEpisode], model_dir: str | Path, *, steps: int, out_dir: str | Path
) -> dict[str, float]:
    """Fine-tune the model in `model_dir` on the expert turns and save it to `out_dir` (cached by a marker)."""
    from trainer.models.loading import load_model, load_tokenizer
    from trainer.sft import evaluate_exact_match, sft_train

    out = Path(out_dir)
    tokenizer = load_tokenizer(model_dir)
    examples = sft_examples(episodes, renderer_for(config), tokenizer, config.prompt.max_prompt_tokens)
    key = {"examples": len(examples), "steps": steps, "style": config.prompt.style, "source": str(model_dir)}
    marker = out / SFT_MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("key") == key:
        cached: dict[str, float] = json.loads(marker.read_text())["result"]
        return cached
    held_out = examples[-len(examples) // 5 :]
    train_set = examples[: -len(held_out)]
    model = load_model(model_dir)
    before = evaluate_exact_match(model, tokenizer, held_out)
    result = sft_train(model, tokenizer, train_set, steps=steps, lr=3e-3, batch_tokens=2048, seed=config.seed)
    result.update(exact_match_before=before, exact_match_after=evaluate_exact_match(model, tokenizer, held_out))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps({"key": key, "result": result}, indent=2) + "\n")
    return result


def quickstart(
    out_dir: str | Path = "runs/quickstart",
    models_dir: str | Path = "runs/models",
    *,
    expert_tasks: int = EXPERT_TASKS,
    sft_steps: int = SFT_STEPS,
    overrides: Sequence[str] = (),
    env: str | None = None,
) -> Path:
    """The README's main job on `env` (default: `pick_environment()`); returns the report path."""
    out = Path(out_dir)
    models = Path(models_dir)
    env = env or pick_environment()
    config = load_config(
        "quickstart.yaml",
        [
            f"env.name={env}",
            f"output_dir={out / 'train'}",
            f"models.student={models / 'student-warm'}",
            f"models.teacher={models / 'teacher-sft'}",
            *ENV_OVERRIDES[env],
            *overrides,
        ],
    )
    timings: dict[str, float] = {}
    with LocalServer(env) as server:
        t0 = time.perf_counter()
        episodes = expert_episodes(config, server.address, expert_tasks)
        timings["expert_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        tiny = make_models(config, episodes, models)
        sft = sft_from_expert(config, episodes, tiny.teacher, steps=sft_steps, out_dir=models / "teacher-sft")
        warm = sft_from_expert(config, episodes, tiny.student, steps=WARM_START_STEPS, out_dir=config.models.student)
        timings["models_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        before = evaluate(config, config.models.student, targets=[server.address])
        teacher = evaluate(config, config.models.teacher, targets=[server.address])
        run = train(config.model_copy(update={"env": config.env.model_copy(update={"targets": [server.address]})}))
        after = evaluate(config, run.checkpoint or config.models.student, targets=[server.address])
        timings["train_eval_s"] = time.perf_counter() - t0
    report = write_report(out, config, episodes, sft, warm, before, teacher, after, run.final_step, timings)
    print(f"quickstart report: {report}")
    return report


def write_report(
    out: Path,
    config: TrainerConfig,
    episodes: Sequence[ExpertEpisode],
    sft: dict[str, float],
    warm: dict[str, float],
    before: EvalResult,
    teacher: EvalResult,
    after: EvalResult,
    steps: int,
    timings: dict[str, float],
) -> Path:
    """runs/quickstart/report.md: what ran, held-out success before/after, the plot."""
    out.mkdir(parents=True, exist_ok=True)
    won = sum(e.won for e in episodes)
    rows = "\n".join(
        f"| {name} | {r.success_rate:.2f} | {r.mean_turns:.1f} | {r.invalid_turn_ratio:.2f} |"
        for name, r in (
            ("student (warm start)", before),
            ("teacher (SFT)", teacher),
            (f"student after {steps} {config.objective.name} steps", after),
        )
    )
    text = f"""# envhub trainer quickstart

Environment: **{config.env.name}** (local server started by the command), objective **{config.objective.name}**,
{steps} learner steps, G = {config.rollout.group_size}, {config.rollout.tasks_per_step} tasks per step,
max {config.env.max_turns} turns, prompt style `{config.prompt.style}`.

* Expert episodes collected through GetExpertActions: {len(episodes)} ({won} won).
* Teacher SFT on expert turns: loss {sft["first_loss"]:.3f} -> {sft["last_loss"]:.3f};
  held-out per-turn exact match {sft["exact_match_before"]:.2f} -> {sft["exact_match_after"]:.2f}.
* Student warm start on the same turns: loss {warm["first_loss"]:.3f} -> {warm["last_loss"]:.3f};
  held-out per-turn exact match {warm["exact_match_before"]:.2f} -> {warm["exact_match_after"]:.2f}.
* Wall time: {", ".join(f"{k} {v:.0f} s" for k, v in timings.items())}.

Held-out evaluation ({config.env.eval_split}, {after.tasks} tasks, temperature {config.eval.temperature}):

| policy | success rate | mean turns | invalid turns |
|---|---|---|---|
{rows}

Tiny models on a few CPU minutes: the numbers above are measured, not targets; a few learner
steps move them a little (tests/trainer/learning shows GRPO's effect over 16 steps).
Diagnostics per step are in `train/metrics.jsonl` and TensorBoard (`train/tensorboard`).

![training](train/training.png)

```json
{json.dumps({"before": asdict(before), "teacher": asdict(teacher), "after": asdict(after)}, indent=2)}
```
"""
    path = out / "report.md"
    path.write_text(text)
    return path
