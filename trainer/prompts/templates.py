"""Prompt templates: ATOD paper 000, Appendix B.4, plus a ScienceWorld analogue and a compact variant.

The B.4 texts are verbatim; the extracted paper lost its line breaks, so a newline is put back
where two sentences touch ("{task_description}.Prior" -> ".\\nPrior"). Placeholders keep the
paper's names.
"""

from __future__ import annotations

ALFWORLD = (
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}.\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} "
    "observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}\n"
    "Your admissible actions of the current situation are: [[{admissible_actions}]].\n"
    "Now it's your turn to take an action. You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think></think> tags. Once you've finished your reasoning, "
    "you should choose an admissible action for current step and present it within <action></action> tags."
)

WEBSHOP = (
    "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
    "Your task is to: {task_description}.\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} "
    "observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}.\n"
    "Your admissible actions of the current situation are: [{admissible_actions}].\n"
    "Now it's your turn to take one action for the current step. You should first reason step-by-step about the "
    "current situation, then think carefully which admissible action best advances the shopping goal. This "
    "reasoning process MUST be enclosed within <think></think> tags. Once you've finished your reasoning, you "
    "should choose an admissible action for current step and present it within <action></action> tags."
)

SEARCHQA = (
    "You are an expert agent tasked with answering the given question step-by-step.\n"
    "Your question: {task_description}.\n"
    "Prior to this step, you have already taken {step_count} step(s). Below is the interaction history where "
    "<search></search> wrapped your past search queries and <information></information> wrapped the "
    "corresponding search results returned by the external search engine. History:{action_history}\n"
    "Now it's your turn to respond for the current step. You should first conduct a reasoning process. This "
    "process MUST be enclosed within <think></think> tags. After completing your reasoning, choose only one of "
    "the following actions (do not perform both):\n"
    "1.If you find you lack some knowledge, you MUST call a search engine to get more external information "
    "using format: <search> your query </search>.\n"
    "2.If you have enough knowledge to answer the question confidently, provide your final answer within "
    "<answer></answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>."
)

SCIENCEWORLD = (
    "You are an expert agent operating in the ScienceWorld text-based science simulator. "
    "Your task is to: {task_description}.\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} "
    "observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}\n"
    "Your admissible actions of the current situation are: [[{admissible_actions}]].\n"
    "Now it's your turn to take an action. You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think></think> tags. Once you've finished your reasoning, "
    "you should choose an admissible action for current step and present it within <action></action> tags."
)

COMPACT = (
    "Task: {task_description}\n"
    "Step {current_step}.{action_history}\n"
    "Observation: {current_observation}\n"
    "Actions: {admissible_actions}\n"
    "Reply with <action>one action</action>."
)
"""Short variant for tiny models (context of a few hundred tokens): the same fields, no instructions prose."""

FULL_FOLLOW_UP = (
    "Observation at step {current_step}: {current_observation}\n"
    "Your admissible actions are: [{admissible_actions}].\n"
    "Choose an admissible action and present it within <action></action> tags."
)
"""The user message of turns after the first in `full` context mode (the history is the chat itself)."""

COMPACT_FOLLOW_UP = "Observation: {current_observation}\nActions: {admissible_actions}"

ATOD_TEMPLATES: dict[str, str] = {
    "alfworld": ALFWORLD,
    "webshop": WEBSHOP,
    "searchqa": SEARCHQA,
    "scienceworld": SCIENCEWORLD,
}
