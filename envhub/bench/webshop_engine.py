"""Speed, memory and search benchmark of the WebShop kind, in one process.

    python -m envhub.bench.webshop_engine            # writes docs/results/webshop-bench.{json,md}
    python -m envhub.bench.webshop_engine --quick    # a 20k-product search catalogue, fewer repetitions

* Step latency of a click and of a search on the default catalogue (3,000 products); the
  baseline of the ratio is the click, the cheapest step.
* Oracle episodes: steps/s with the admissible actions and the expert hint asked at every step
  (what an agent loop with teacher takeover asks), and the oracle's success rate.
* Restore at the end of an oracle episode: native (plain data) against reset + verified replay.
* Memory: RSS and traced Python allocations per live session with 1,000 sessions in this
  process, each on an item page after a search.
* Search latency on the default catalogue and on a large generated one (100,000 products), with
  the large index's build time.

Medians of repeated timings, since the machine is shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envhub.bench import RESULTS
from envhub.core.session import Session
from envhub.envs.webshop.catalog import Catalog
from envhub.envs.webshop.generator import generate
from envhub.envs.webshop.kind import GENERATED_SPLITS, WebShopKind
from envhub.envs.webshop.search import SearchIndex


def _ms(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
        "n": len(ordered),
    }


def _timed(call: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def step_latency(kind: WebShopKind, repeats: int) -> dict[str, Any]:
    session = Session.start(kind, kind.tasks("test")[0], max_steps=10**9)
    session.step("search[wireless earbuds]")
    clicks = _timed(lambda: (session.step("click[next >]"), session.step("click[< prev]")), repeats // 2)
    session.step("click[back to search]")
    searches = []
    for _ in range(repeats):
        searches += _timed(lambda: session.step("search[women's running shoes non slip]"), 1)
        session.step("click[back to search]")
    click, search = _ms([c / 2 for c in clicks]), _ms(searches)
    return {"click": click, "search": search, "search_to_click_p50": search["p50_ms"] / click["p50_ms"]}


def oracle_episodes(kind: WebShopKind, split: str, count: int) -> dict[str, Any]:
    steps = wins = 0
    rewards = []
    started = time.perf_counter()
    for task in kind.tasks(split)[:count]:
        session = Session.start(kind, task)
        while not session.done:
            session.admissible_actions()
            step = session.step(session.expert_actions()[0])
        steps += session.step_index
        wins += step.result.won
        rewards.append(step.result.reward)
    elapsed = time.perf_counter() - started
    return {
        "split": split,
        "episodes": count,
        "success_rate": wins / count,
        "mean_reward": statistics.fmean(rewards),
        "mean_steps": steps / count,
        "steps_per_s": steps / elapsed,
    }


def restore_cost(kind: WebShopKind, repeats: int) -> dict[str, Any]:
    session = Session.start(kind, kind.tasks("test")[5])
    while True:
        action = session.expert_actions()[0]
        if action == "click[buy now]":
            break
        session.step(action)
    state = session.state()
    replay_state = dataclasses.replace(state, native_state="")
    native = _ms(_timed(lambda: Session.restore(kind, state), repeats))
    replay = _ms(_timed(lambda: Session.restore(kind, replay_state), repeats))
    return {"depth": state.step_index, "native": native, "replay": replay,
            "replay_to_native_p50": replay["p50_ms"] / native["p50_ms"]}  # fmt: skip


def memory(kind: WebShopKind, sessions: int) -> dict[str, Any]:
    tasks = kind.tasks("train")
    before = _rss_mb()
    tracemalloc.start()
    live = []
    for index in range(sessions):
        session = Session.start(kind, tasks[index % len(tasks)])
        session.step(session.expert_actions()[0])  # a search: 50 results held
        session.step("click[" + session.admissible_actions()[2][len("click[") : -1] + "]")  # the first product
        live.append(session)
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after = _rss_mb()
    return {
        "sessions": sessions,
        "rss_mb_per_session": (after - before) / sessions,
        "traced_kb_per_session": traced / sessions / 1024,
        "process_rss_mb": after,
    }


def search_scaling(default: WebShopKind, products: int, repeats: int) -> dict[str, Any]:
    queries = [goal.instruction for goal in default.catalog.goals["test"]][:repeats]
    small = _ms(_timed_each(default.shop.index.search, queries))
    started = time.perf_counter()
    catalog = Catalog.from_documents(*generate(products, seed=1), splits=GENERATED_SPLITS)
    made = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        index = SearchIndex(catalog, Path(folder) / "index")
        built = time.perf_counter() - started
        large = _ms(_timed_each(index.search, queries))
    return {
        "small_products": len(default.catalog.products),
        "small": small,
        "large_products": products,
        "large": large,
        "large_catalogue_s": made,
        "large_index_build_s": built,
        "large_to_small_p50": large["p50_ms"] / small["p50_ms"],
    }


def _timed_each(search: Callable[[str], object], queries: Sequence[str]) -> list[float]:
    for query in queries[:5]:
        search(query)  # warm the memory map
    return [sample for query in queries for sample in _timed(lambda q=query: search(q), 1)]  # type: ignore[misc]


def run(quick: bool) -> dict[str, Any]:
    kind = WebShopKind()
    repeats = 100 if quick else 400
    results: dict[str, Any] = {"load_average_at_start": os.getloadavg()[0], "quick": quick}
    print("step latency...", flush=True)
    results["step"] = step_latency(kind, repeats)
    print("oracle episodes...", flush=True)
    results["oracle"] = [oracle_episodes(kind, "test", 128), oracle_episodes(kind, "train", 128 if quick else 1024)]
    print("restore...", flush=True)
    results["restore"] = restore_cost(kind, repeats)
    print("memory...", flush=True)
    results["memory"] = memory(kind, 1000)
    print("search scaling...", flush=True)
    results["search"] = search_scaling(kind, 20_000 if quick else 100_000, 128)
    return results


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "webshop-bench.json").write_text(json.dumps(results, indent=2) + "\n")
    step, restore, mem, search = results["step"], results["restore"], results["memory"], results["search"]
    lines = [
        "# WebShop kind benchmark",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| click step p50 / p99 | {step['click']['p50_ms']:.3f} / {step['click']['p99_ms']:.3f} ms |",
        f"| search step p50 / p99 ({search['small_products']} products) | {step['search']['p50_ms']:.3f} / "
        f"{step['search']['p99_ms']:.3f} ms (x{step['search_to_click_p50']:.1f} a click) |",
        *(
            f"| oracle, {o['split']} ({o['episodes']} goals): success / mean reward / steps / steps/s | "
            f"{o['success_rate']:.3f} / {o['mean_reward']:.3f} / {o['mean_steps']:.2f} / {o['steps_per_s']:.0f} |"
            for o in results["oracle"]
        ),
        f"| restore at depth {restore['depth']}: native / replay p50 | {restore['native']['p50_ms']:.3f} / "
        f"{restore['replay']['p50_ms']:.3f} ms (replay x{restore['replay_to_native_p50']:.1f}) |",
        f"| memory per session, {mem['sessions']} live sessions: RSS / traced | {mem['rss_mb_per_session'] * 1024:.1f}"
        f" KB / {mem['traced_kb_per_session']:.1f} KB (process {mem['process_rss_mb']:.0f} MB) |",
        f"| search p50 / p99, {search['small_products']} products | {search['small']['p50_ms']:.3f} / "
        f"{search['small']['p99_ms']:.3f} ms |",
        f"| search p50 / p99, {search['large_products']} products | {search['large']['p50_ms']:.3f} / "
        f"{search['large']['p99_ms']:.3f} ms (x{search['large_to_small_p50']:.1f}) |",
        f"| {search['large_products']} products: catalogue / index build | {search['large_catalogue_s']:.1f} s / "
        f"{search['large_index_build_s']:.1f} s |",
        "",
        f"In one process on a shared {os.cpu_count()}-core machine (1-minute load average "
        f"{results['load_average_at_start']:.1f} at the start); search queries are the test goals' instructions. "
        "Regenerate with `python -m envhub.bench.webshop_engine`.",
    ]
    (out / "webshop-bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Benchmark the WebShop kind in one process.")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    write(run(args.quick), args.out)


if __name__ == "__main__":
    main()
