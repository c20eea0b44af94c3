"""Run a server on its own event loop in a daemon thread (tests, `envhub play`, `envhub bench`)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from dataclasses import replace
from types import TracebackType
from typing import Any

from envhub.server.app import EnvhubServer, create_server
from envhub.server.config import ServerConfig
from envhub.server.loops import loop_factory


class BackgroundServer:
    """A server started in a background thread; use as a context manager or call `stop()`."""

    def __init__(self, config: ServerConfig, *, tracer_provider: Any | None = None) -> None:
        self._loop = loop_factory(config.event_loop)()
        self._thread = threading.Thread(target=self._loop.run_forever, name="envhub-server", daemon=True)
        self._thread.start()
        try:
            self.server, self.port = self.run(create_server(config, tracer_provider=tracer_provider))
        except BaseException:
            self._close_loop()
            raise
        self.target = f"{'localhost' if config.host in ('0.0.0.0', '[::]') else config.host}:{self.port}"

    @classmethod
    def local(cls, *environments: str, tracer_provider: Any | None = None, **settings: Any) -> BackgroundServer:
        """A server on a free localhost port with `settings` overriding `ServerConfig` defaults."""
        config = replace(ServerConfig(), environments=environments or ("scienceworld",), port=0, host="localhost")
        return cls(replace(config, **settings), tracer_provider=tracer_provider)

    def run(self, coroutine: Any) -> Any:
        """Run a coroutine on the server's loop and wait for its result."""
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result()

    @property
    def replica_id(self) -> str:
        return self.server.replica_id

    def stop(self, drain: bool = False) -> None:
        """Stop the server (gracefully with `drain`) and its workers, then the thread."""
        if self._loop.is_closed():
            return
        self.run(self.server.drain() if drain else self.server.stop())
        self._close_loop()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["BackgroundServer", "EnvhubServer"]
