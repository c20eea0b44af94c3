"""Workers by role and the worker group that drives them over a local or a Ray executor.

| module | job |
|---|---|
| `rollout.py` | `RolloutWorker`: envhub client + generation backend, plays task groups |
| `teacher.py` | `TeacherWorker`: the frozen teacher scores sampled tokens |
| `learner.py` | `LearnerWorker`: model, optimizer, checkpoints; `latest_checkpoint` |
| `executor.py` | `Executor` protocol, `LocalExecutor`, `RayExecutor`, `init_ray` |
| `group.py` | `WorkerGroup`: the single controller the driver calls |
| `factory.py` | device, backend, env port, renderer and rollout settings from a config |
"""

from trainer.workers.executor import Executor, LocalExecutor, RayExecutor, init_ray, make_executor
from trainer.workers.factory import make_generation_backend, resolve_device
from trainer.workers.group import WorkerGroup, merge_rollouts, split_tasks
from trainer.workers.learner import LearnerWorker, latest_checkpoint
from trainer.workers.rollout import RolloutWorker
from trainer.workers.teacher import TeacherWorker

__all__ = [
    "Executor",
    "LearnerWorker",
    "LocalExecutor",
    "RayExecutor",
    "RolloutWorker",
    "TeacherWorker",
    "WorkerGroup",
    "init_ray",
    "latest_checkpoint",
    "make_executor",
    "make_generation_backend",
    "merge_rollouts",
    "resolve_device",
    "split_tasks",
]
