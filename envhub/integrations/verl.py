"""verl over envhub: `EnvhubAgentLoop`, a verl agent loop (registered as "envhub_agent") playing envhub episodes.

verl's `AgentLoopWorker` runs one `run()` coroutine per sample; each plays one episode with
`play_episode`, sampling turns from verl's LLM server (`server_manager.generate`) and stepping
envhub through one `StepBatcher` per worker process, so the concurrent episodes of a worker
share envhub rounds. The dataset row names the task (`extra_info.task_id`, or `task_id`), and
the episode's summed reward comes back as `reward_score`.

Config (Hydra overrides): `actor_rollout_ref.rollout.agent.agent_loop_config_path=<yaml>` with
`[{name: envhub_agent, _target_: envhub.integrations.verl.EnvhubAgentLoop}]`, rows with
`agent_name: envhub_agent`, and `+envhub.target=host:port +envhub.environment=alfworld`
(optional: `+envhub.max_turns`, `+envhub.seed`, `+envhub.max_steps`).

verl 0.9.1 pins transformers<5.11, below envhub's trainer stack; install it in its own
environment: `pip install torch==2.13.0 'envhub[verl]'` (`make venv-verl`).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from envhub.client import Sessions
from envhub.client.chat import ChatTokens
from envhub.integrations.agent_loop import play_episode
from envhub.integrations.batching import StepBatcher

_BATCHERS: dict[tuple[str, ...], StepBatcher] = {}


def _batcher(settings: Any) -> StepBatcher:
    """The worker process's batcher for these settings (one connection, shared by every agent loop)."""
    target = settings.get("target", "localhost:50051")
    targets = [target] if isinstance(target, str) else [str(t) for t in target]
    environment = str(settings.get("environment", "alfworld"))
    max_steps = int(settings.get("max_steps", 0))
    key = (*targets, environment, str(max_steps))
    if key not in _BATCHERS:
        _BATCHERS[key] = StepBatcher(Sessions.connect(targets, environment, max_steps=max_steps))
    return _BATCHERS[key]


@register("envhub_agent")
class EnvhubAgentLoop(AgentLoopBase):
    """One envhub episode per sample, multi-turn, environment tokens masked out of the response."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        settings = self.config.get("envhub", {})
        extra = kwargs.get("extra_info") or {}
        task_id = str(extra.get("task_id") or kwargs["task_id"])
        length = int(self.rollout_config.response_length)
        tokens = await play_episode(
            self.server_manager.generate,
            ChatTokens(self.tokenizer),
            _batcher(settings),
            task_id,
            sampling_params=sampling_params,
            seed=int(settings.get("seed", 0)),
            max_turns=int(settings.get("max_turns", 8)),
            response_length=length,
        )
        return AgentLoopOutput(
            prompt_ids=tokens.prompt_ids,
            response_ids=tokens.response_ids[:length],
            response_mask=tokens.response_mask[:length],
            response_logprobs=tokens.response_logprobs[:length],
            reward_score=tokens.reward,
            num_turns=tokens.num_turns,
            metrics={},
            extra_fields={"won": tokens.won, "task_id": task_id},
        )
