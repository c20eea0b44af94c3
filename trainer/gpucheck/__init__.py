"""`make gpu-check`: the GPU path checked on the lent H200 in one command (docs/gpu.md). `python -m
trainer.gpucheck` runs the stages (`*_check.py`, `throughput.py` with its `throughput_part.py` processes) as
process groups of their own (`procs`) after `wheels` brought what the machine's image lacks; `summary` writes
their records and one-screen summary. Imports nothing: the orchestrator runs before any carried wheel is
installed."""
