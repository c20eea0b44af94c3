"""A client for the Search-R1 retrieval server API, and our own server with the same API.

    POST /retrieve  {"queries": [...], "topk": 3, "return_scores": true}
    -> {"result": [[{"document": {"id": ..., "contents": ...}, "score": ...}, ...], ...]}

(`return_scores: false` gives the documents alone.) `RemoteRetriever` retries failed calls
with a back-off and then raises UNAVAILABLE (reason RETRIEVER_UNAVAILABLE); a request the server
refuses (HTTP 4xx) is INVALID_ARGUMENT (RETRIEVER_REFUSED) at once. The session layer passes
either to the client without ending the session. `serve_retriever` answers the same API
over any `Retriever` with the standard library's threading HTTP server.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from envhub.core import errors
from envhub.envs.searchqa.retriever import Hit, Retriever

MAX_REQUEST_BYTES = 1 << 20
MAX_QUERIES = 512
MAX_TOPK = 100


class RemoteRetriever:
    """Searches through a Search-R1 compatible `/retrieve` endpoint."""

    def __init__(self, url: str, *, timeout_s: float = 10.0, retries: int = 2, backoff_s: float = 0.2) -> None:
        self.url = url.rstrip("/") + ("" if url.rstrip("/").endswith("/retrieve") else "/retrieve")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s

    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        """Search in calls of at most `MAX_QUERIES` queries."""
        return [
            hits
            for start in range(0, len(queries), MAX_QUERIES)
            for hits in self._call(queries[start : start + MAX_QUERIES], topk)
        ]

    def _call(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        body = json.dumps({"queries": list(queries), "topk": topk, "return_scores": True}).encode()
        payload = self._post(body)
        try:
            result = payload["result"]
            return [
                [
                    Hit(str(item["document"]["id"]), str(item["document"]["contents"]), float(item["score"]))
                    for item in row
                ]
                for row in result
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.unavailable(
                f"retriever at {self.url} answered in an unknown format ({exc!r})", "RETRIEVER_BAD_RESPONSE"
            ) from exc

    def _post(self, body: bytes) -> Any:
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}"
                if exc.code < 500:  # the request is wrong: retrying will not help
                    raise errors.invalid_argument(
                        f"the retriever at {self.url} refused the search: {last}", "RETRIEVER_REFUSED", url=self.url
                    ) from exc
            except (OSError, ValueError) as exc:  # refused, timed out, reset, not JSON
                last = repr(exc)
        raise errors.unavailable(
            f"the retriever at {self.url} is unavailable after {self.retries + 1} tries: {last}",
            "RETRIEVER_UNAVAILABLE",
            url=self.url,
        )


def _documents(hits: list[Hit], with_scores: bool) -> list[Any]:
    docs = [{"id": hit.id, "contents": hit.contents} for hit in hits]
    if not with_scores:
        return docs
    return [{"document": doc, "score": hit.score} for doc, hit in zip(docs, hits, strict=True)]


def _parse_request(raw: bytes) -> tuple[list[str], int, bool]:
    request = json.loads(raw)
    queries, topk = request.get("queries"), request.get("topk", 3)
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries) or len(queries) > MAX_QUERIES:
        raise ValueError(f"'queries' must be a list of at most {MAX_QUERIES} strings")
    if not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"'topk' must be an integer from 1 to {MAX_TOPK}")
    return queries, topk, bool(request.get("return_scores", False))


class RetrieverServer:
    """`POST /retrieve` over a `Retriever`, in a background thread; `GET /health` answers ok."""

    def __init__(self, retriever: Retriever, host: str = "localhost", port: int = 8000) -> None:
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet by default
                return

            def _answer(self, status: int, payload: object) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._answer(200, {"status": "ok"})
                else:
                    self._answer(404, {"error": f"no such path {self.path}"})

            def do_POST(self) -> None:
                if self.path != "/retrieve":
                    self._answer(404, {"error": f"no such path {self.path}"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_REQUEST_BYTES:
                    self._answer(413, {"error": f"the body must be 1 to {MAX_REQUEST_BYTES} bytes"})
                    return
                try:
                    queries, topk, with_scores = _parse_request(self.rfile.read(length))
                except (ValueError, AttributeError) as exc:
                    self._answer(400, {"error": f"bad request: {exc}"})
                    return
                with lock:  # one search at a time: the index is not made for concurrent scoring
                    results = retriever.search(queries, topk)
                self._answer(200, {"result": [_documents(hits, with_scores) for hits in results]})

        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        self.host, self.port = host, int(self._http.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._http.serve_forever, name="envhub-retriever", daemon=True)

    def start(self) -> RetrieverServer:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted, then close the socket."""
        try:
            self._http.serve_forever()
        finally:
            self._http.server_close()

    def stop(self) -> None:
        """Stop the background thread started by `start` and close the socket."""
        if self._thread.is_alive():
            self._http.shutdown()
            self._thread.join()
        self._http.server_close()

    def __enter__(self) -> RetrieverServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
