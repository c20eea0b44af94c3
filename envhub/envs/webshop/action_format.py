"""WebShop's action format: the ATOD prompt, one action inside `<action></action>`.

The text is ATOD's (paper 000, Appendix B.4) verbatim; the extracted paper lost its line breaks, so a
newline is put back where two sentences touch ("{task_description}.Prior" -> ".\\nPrior").
"""

from envhub.client.formats import ActionFormat

TEMPLATE = (
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

FORMAT = ActionFormat(TEMPLATE)
