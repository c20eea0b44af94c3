"""`envhub retriever build|serve`: make a BM25 index, and serve one over the Search-R1 HTTP API.

    envhub retriever build                          # the generated Search-QA data set (corpus, index, questions)
    envhub retriever build --corpus c.jsonl --out idx   # an index over your Search-R1 corpus
    envhub retriever serve --index idx --port 8000  # POST /retrieve {"queries": [...], "topk": 3}

Heavy imports happen inside the commands, so `envhub --help` stays light.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `retriever` and its subcommands on the `envhub` parser."""
    p = sub.add_parser("retriever", help="Search-QA retrieval: build a BM25 index, serve the Search-R1 API")
    commands = p.add_subparsers(dest="retriever_command", required=True)
    build = commands.add_parser("build", help="build the generated Search-QA data, or an index over --corpus")
    build.add_argument("--corpus", type=Path, default=None, help="a Search-R1 corpus jsonl (id, contents)")
    build.add_argument("--out", type=Path, default=None, help="output folder (default: the Search-QA data cache)")
    serve = commands.add_parser("serve", help="serve POST /retrieve over an index")
    serve.add_argument("--index", type=Path, default=None, help="index folder (default: the generated data's)")
    serve.add_argument("--host", default="localhost")
    serve.add_argument("--port", type=int, default=8000)


def run(args: argparse.Namespace) -> int:
    """Run the chosen `retriever` subcommand."""
    from envhub.envs.searchqa.build import build_dataset
    from envhub.envs.searchqa.data import default_data_dir, ensure_default_data
    from envhub.envs.searchqa.remote import RetrieverServer
    from envhub.envs.searchqa.retriever import build_index, open_index

    if args.retriever_command == "build":
        if args.corpus is not None:
            out = args.out or Path(str(args.corpus) + ".index")
            build_index(args.corpus, out)
            print(f"index of {args.corpus} written to {out}")
        else:
            out = args.out or default_data_dir()
            print(json.dumps(build_dataset(out), indent=2))
            print(f"Search-QA data written to {out}")
        return 0
    index = args.index or ensure_default_data()
    server = RetrieverServer(open_index(index), args.host, args.port)
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"serving {index} at {server.url}/retrieve", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
