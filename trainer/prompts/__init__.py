"""Prompt rendering (the environment's action format, `envhub.client.formats`, or the compact style) and chat
encoding."""

from trainer.prompts.chat import encode_user_turn
from trainer.prompts.render import PastStep, PromptRenderer, PromptState

__all__ = [
    "PastStep",
    "PromptRenderer",
    "PromptState",
    "encode_user_turn",
]
