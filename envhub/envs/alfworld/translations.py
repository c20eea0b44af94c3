"""fast-downward translations kept on disk, so each game is translated once, not once per process.

Loading a game translates its PDDL problem to SAS twice (plain and optimised for planning),
most of a load's cost. The preparation helper that generates a game translates it while it
checks the game with the planner; the worker that then serves it used to translate it again.
`TranslationStore` keeps each translation's SAS text in a folder, named by a hash of
everything the translation depends on (translator version, options, domain, problem), so any
process of any server sharing the folder reads it instead. The translator's other result,
the parsed PDDL task, is rebuilt: it is the task the translator parses and normalises before
translating (its parsing alone, without the translation), still most of a load read from the
store, so a load's two translations share one parse (`memo`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import sys
import tempfile
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

_TRANSLATOR = f"fast-downward-textworld-{package_version('fast_downward_textworld')}"


def parse_task(domain: str, problem: str) -> Any:
    """The parsed, normalised PDDL task, as `fast_downward.pddl2sas` returns it beside the SAS text."""
    saved = sys.argv
    sys.argv = ["translate.py", "domain", "task"]  # the translator's options module parses sys.argv on import
    try:
        from fast_downward.translate import normalize
        from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions
    finally:
        sys.argv = saved
    with contextlib.redirect_stdout(io.StringIO()):
        task = parsing_functions.parse_task(
            lisp_parser.parse_nested_list(domain.split("\n")), lisp_parser.parse_nested_list(problem.split("\n"))
        )
        normalize.normalize(task)
    return task


class TranslationStore:
    """SAS texts in a folder, one gzip file per (translator, options, domain, problem)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, domain: str, problem: str, optimize: bool) -> Path:
        digest = hashlib.sha256("\0".join((_TRANSLATOR, str(optimize), domain, problem)).encode()).hexdigest()
        return self.folder / digest[:2] / f"{digest}.sas.gz"

    def get(self, domain: str, problem: str, optimize: bool) -> str | None:
        """The stored SAS text, or None."""
        path = self._path(domain, problem, optimize)
        try:
            return gzip.decompress(path.read_bytes()).decode("utf-8")
        except (FileNotFoundError, gzip.BadGzipFile, EOFError):
            return None

    def put(self, domain: str, problem: str, optimize: bool, sas: str) -> None:
        """Store a SAS text (atomically: readers see no file or the whole file)."""
        path = self._path(domain, problem, optimize)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(gzip.compress(sas.encode("utf-8"), compresslevel=6))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
