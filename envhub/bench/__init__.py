"""Benchmarks and studies, kept apart from the product packages.

* `envhub bench` (`run`, `rollout`, `latency`, `streams`): a server over gRPC against in-process, workers,
  restore depth, memory, rollout turns at scale, step latency under churn.
* `python -m envhub.bench.<env>_engine`: one environment's engine against its upstream package
  (`alfworld_engine`, `scienceworld_engine`, `searchqa_engine`, `webshop_engine`).
* Studies: `scienceworld_capacity` (simulators per JVM), `scienceworld_determinism` (which tasks replay).

Every one writes its result (json, and md where it has a table) to docs/results/ (`RESULTS`).
"""

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
"""docs/results/ of a source checkout: where benchmarks write by default."""
