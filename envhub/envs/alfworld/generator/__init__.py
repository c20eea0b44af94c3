"""The offline ALFWorld task generator: games for ALFWorld's six task types in THOR floor plans.

`build.generate` makes one game as a deterministic function of (split, index, seed) and keeps it
only when ALFWorld's planner expert solves it; `python -m envhub.envs.alfworld.generator` makes them
in bulk into the task-set cache (see `envhub.envs.alfworld.taskset.GeneratedTaskSet`).
"""
