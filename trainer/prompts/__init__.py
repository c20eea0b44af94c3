"""Prompt templates (ATOD Appendix B.4), history rendering, chat encoding and action parsing."""

from trainer.prompts.chat import encode_user_turn
from trainer.prompts.parse import INVALID_ACTION_OBSERVATION, parse_action
from trainer.prompts.render import PastStep, PromptRenderer, PromptState

__all__ = [
    "INVALID_ACTION_OBSERVATION",
    "PastStep",
    "PromptRenderer",
    "PromptState",
    "encode_user_turn",
    "parse_action",
]
