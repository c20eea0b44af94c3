"""Prompt rendering (the environment's action format, `envhub.client.formats`, or the compact style) and chat
encoding."""

from trainer.prompts.chat import encode_follow_up, encode_user_turn, has_chat_template
from trainer.prompts.render import PastStep, PromptRenderer, PromptState

__all__ = [
    "PastStep",
    "PromptRenderer",
    "PromptState",
    "encode_follow_up",
    "encode_user_turn",
    "has_chat_template",
]
