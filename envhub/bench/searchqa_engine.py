"""Search-QA benchmark: retrieval queries/s, episode steps/s and memory per session, in one run.

    python -m envhub.bench.searchqa_engine            # writes docs/results/searchqa-bench.{json,md}
    python -m envhub.bench.searchqa_engine --quick

* Queries/s of the embedded BM25 retriever over the generated corpus and over a corpus twice
  its size (the same passages under new ids, ~100k), against the same index behind our HTTP
  retrieval server (the remote path, measured in the same run: the ratio is its cost).
* Episode steps/s: gold episodes of the test split in-process (`Session`) and over gRPC
  (a server subprocess with one worker).
* Memory: the server process tree's RSS with 1,000 live sessions in its one worker, against
  the same server idle.

Medians of repeated timings (the machine is shared).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envhub.bench import RESULTS
from envhub.bench.procs import ServerProcess
from envhub.client import EnvhubClient
from envhub.core.session import Session
from envhub.envs.searchqa.corpus import write_jsonl
from envhub.envs.searchqa.data import ensure_default_data
from envhub.envs.searchqa.kind import SearchQAKind
from envhub.envs.searchqa.remote import RemoteRetriever, RetrieverServer
from envhub.envs.searchqa.retriever import CORPUS_FILE, Bm25Retriever, build_index


def _rate(call: Callable[[], int], repeat: int) -> float:
    """Median items/s of `call` (which returns how many items it did) over `repeat` runs."""
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        count = call()
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates)


def _queries(kind: SearchQAKind) -> list[str]:
    return [q for questions in kind.source.splits.values() for question in questions for q in question.gold_searches]


def _doubled_index(folder: Path, out: Path) -> Bm25Retriever:
    rows = [json.loads(line) for line in (folder / CORPUS_FILE).read_text(encoding="utf-8").splitlines()]
    twice = rows + [{"id": f"copy-{row['id']}", "contents": row["contents"]} for row in rows]
    write_jsonl(out / "twice.jsonl", twice)
    return Bm25Retriever(build_index(out / "twice.jsonl", out / "index"))


def retrieval(kind: SearchQAKind, folder: Path, queries: list[str], repeat: int) -> dict[str, Any]:
    embedded = Bm25Retriever(folder)

    def one_by_one(retriever: Any) -> Callable[[], int]:
        return lambda: sum(1 for query in queries if retriever.search([query], 3) is not None)

    out: dict[str, Any] = {"queries": len(queries), "passages": len(embedded)}
    with RetrieverServer(embedded, port=0) as server:
        remote = RemoteRetriever(server.url)
        out["embedded_qps"] = _rate(one_by_one(embedded), repeat)
        out["remote_qps"] = _rate(one_by_one(remote), repeat)
        out["remote_batched_qps"] = _rate(lambda: len(remote.search(queries, 3)), repeat)
    with tempfile.TemporaryDirectory() as scratch:
        doubled = _doubled_index(folder, Path(scratch))
        out["doubled_passages"] = len(doubled)
        out["doubled_embedded_qps"] = _rate(one_by_one(doubled), repeat)
    out["ms_per_query"] = 1000 / out["embedded_qps"]
    out["ms_per_query_doubled"] = 1000 / out["doubled_embedded_qps"]
    out["remote_to_embedded"] = out["remote_qps"] / out["embedded_qps"]
    return out


def _gold_episode(step: Callable[[str], Any], expert: list[str]) -> int:
    for action in expert:
        step(action)
    return len(expert)


def episodes(kind: SearchQAKind, count: int, repeat: int) -> dict[str, float]:
    specs = list(kind.tasks("test"))[:count]

    def in_process() -> int:
        steps = 0
        for spec in specs:
            session = Session.start(kind, spec)
            steps += _gold_episode(session.step, session.expert_actions())
            session.close()
        return steps

    with ServerProcess("searchqa", workers=1) as server, EnvhubClient(server.target) as client:

        def over_grpc() -> int:
            steps = 0
            for spec in specs:
                sid = client.create_session("searchqa", spec.task_id).session_id
                steps += _gold_episode(functools.partial(client.step, sid), client.expert_actions(sid))
                client.close_session(sid)
            return steps

        local, remote = _rate(in_process, repeat), _rate(over_grpc, repeat)
    return {"episodes": len(specs), "in_process_steps_per_s": local, "grpc_steps_per_s": remote}


def memory(kind: SearchQAKind, sessions: int) -> dict[str, float]:
    specs = kind.tasks("test")
    with (
        ServerProcess("searchqa", workers=1, max_sessions=sessions + 8) as server,
        EnvhubClient(server.target) as client,
    ):
        warm = client.create_session("searchqa", specs[0].task_id).session_id
        client.step(warm, client.expert_actions(warm)[0])  # the index is mapped and touched
        idle = server.rss_mb()
        opened = []
        for index in range(sessions):
            sid = client.create_session("searchqa", specs[index % len(specs)].task_id).session_id
            client.step(sid, client.expert_actions(sid)[0])
            opened.append(sid)
        loaded = server.rss_mb()
        for sid in [*opened, warm]:
            client.close_session(sid)
    return {
        "sessions": sessions,
        "idle_tree_rss_mb": idle,
        "tree_rss_mb": loaded,
        "marginal_kb_per_session": 1024 * (loaded - idle) / sessions,
    }


def run(quick: bool, out: Path) -> dict[str, Any]:
    folder = ensure_default_data()
    kind = SearchQAKind(folder)
    repeat = 3 if quick else 5
    results: dict[str, Any] = {"load_average_at_start": os.getloadavg()[0], "data": str(folder)}
    queries = _queries(kind)[: 300 if quick else 2000]
    print("retrieval...", flush=True)
    results["retrieval"] = retrieval(kind, folder, queries, repeat)
    print(json.dumps(results["retrieval"]), "\nepisodes...", flush=True)
    results["episodes"] = episodes(kind, 50 if quick else 200, repeat)
    print(json.dumps(results["episodes"]), "\nmemory...", flush=True)
    results["memory"] = memory(kind, 1000)
    print(json.dumps(results["memory"]), flush=True)
    _write(out, results)
    return results


def _write(out: Path, results: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "searchqa-bench.json").write_text(json.dumps(results, indent=2) + "\n")
    r, e, m = results["retrieval"], results["episodes"], results["memory"]
    lines = [
        "# Search-QA bench",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| embedded BM25, {r['passages']:,} passages | {r['embedded_qps']:.0f} queries/s "
        f"({r['ms_per_query']:.2f} ms/query) |",
        f"| embedded BM25, {r['doubled_passages']:,} passages | {r['doubled_embedded_qps']:.0f} queries/s "
        f"({r['ms_per_query_doubled']:.2f} ms/query) |",
        f"| remote (our HTTP server, same index), one query per call | {r['remote_qps']:.0f} queries/s "
        f"(ratio to embedded {r['remote_to_embedded']:.3f}) |",
        f"| remote, all {r['queries']} queries in one call | {r['remote_batched_qps']:.0f} queries/s |",
        f"| gold episodes ({e['episodes']}), in-process | {e['in_process_steps_per_s']:.0f} steps/s |",
        f"| gold episodes, over gRPC (1 worker) | {e['grpc_steps_per_s']:.0f} steps/s "
        f"(ratio {e['grpc_steps_per_s'] / e['in_process_steps_per_s']:.3f}) |",
        f"| server tree RSS idle / with {m['sessions']} sessions | {m['idle_tree_rss_mb']:.0f} MB / "
        f"{m['tree_rss_mb']:.0f} MB |",
        f"| marginal memory per session | {m['marginal_kb_per_session']:.1f} KB |",
        "",
        f"Medians on a shared {os.cpu_count()}-core machine (1-minute load average "
        f"{results['load_average_at_start']:.1f} at the start); "
        "regenerate with `python -m envhub.bench.searchqa_engine`.",
    ]
    (out / "searchqa-bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer queries, episodes and repetitions")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    run(args.quick, args.out)


if __name__ == "__main__":
    main()
