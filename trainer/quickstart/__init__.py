"""`trainer quickstart`: a local server, models made (or reused), held-out evaluations, training, a report.

`run` orchestrates the phases (`quickstart()`), `plans` says how `--model tiny` / `smollm2` make
their student and teacher, `models` makes them (also used by `trainer make-models`/`sft` and
`trainer compare`), `learning` holds the learning criterion (a paired bootstrap over the held-out
tasks) and `report` writes `<out>/report.md`.
"""
