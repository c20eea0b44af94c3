"""Studies and benchmarks of the trainer, kept apart from the product code they measure.

* `bench`: `trainer bench` (learner overhead, batched rollout turns/s).
* `compare/`: `trainer compare` (several objectives and ablations under one budget, one report).
* `divopd_stress`: DivOPD's producer-load stress run (paper 001 Table 2, qualitatively).
* `branchopd_savings`: BranchOPD's student-token saving against independent rollouts (paper 002 Table 11).

Nothing in the product packages imports from here; the CLI does, lazily.
"""
