"""A small built-in text sample for the tokenizer when no environment text is given.

`trainer quickstart` trains the tokenizer on text collected through the servers; this sample only
keeps `trainer make-models` usable offline without any server (merges then fit the agent format,
not an environment's vocabulary).
"""

from __future__ import annotations

SEED_TEXTS: tuple[str, ...] = (
    "You are an expert agent operating in the ALFRED Embodied Environment. "
    "Your task is to: put a clean apple in fridge.",
    "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and the "
    "corresponding actions you took:",
    "You are now at step 4 and your current observation is: You arrive at countertop 1. On the countertop 1, you see "
    "a apple 1, a bread 2, and a knife 1.",
    "Your admissible actions of the current situation are: [go to fridge 1, take apple 1 from countertop 1, look, "
    "inventory, examine countertop 1].",
    "Now it's your turn to take an action. You should first reason step-by-step about the current situation. This "
    "reasoning process MUST be enclosed within <think></think> tags. Once you've finished your reasoning, you should "
    "choose an admissible action for current step and present it within <action></action> tags.",
    "<think>I need a clean apple. The apple is on the countertop, so I take it first.</think>"
    "<action>take apple 1 from countertop 1</action>",
    "<think>The fridge is closed.</think><action>open fridge 1</action>",
    "You are an expert agent tasked with answering the given question step-by-step. Your question: who wrote the "
    "novel? <search> novel author </search> <information>The novel was written in 1851.</information> "
    "<answer>Herman Melville</answer>",
    "You are an expert autonomous agent operating in the WebShop e-commerce environment. Your task is to: find a red "
    "cotton shirt under 30 dollars. search[red cotton shirt] click[buy now]",
    "This room is called the kitchen. In it, you see: a stove, which is turned off. a sink. a fridge. a thermometer. "
    "You also see: A door to the hallway (that is open). Your task is to boil water. focus on substance in pot. "
    "move to the hallway. pick up thermometer. activate stove. use thermometer on water.",
)
