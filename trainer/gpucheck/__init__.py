"""`make gpu-check`: the GPU path checked on the lent H200 in one command (docs/gpu.md). `python -m
trainer.gpucheck` runs the stages (`*_check.py`, `throughput.py`) as processes of their own after `wheels`
brought what the machine's image lacks; `summary` writes their one-screen summary. Imports nothing: the
orchestrator runs before any carried wheel is installed."""
