"""`python -m envhub.tools.health`, the images' HEALTHCHECK, against a real server and a dead port."""

from __future__ import annotations

import socket

from envhub.server.background import BackgroundServer
from envhub.tools import health


def test_serving_exits_zero_draining_and_unreachable_one() -> None:
    with BackgroundServer.local("scienceworld") as server:
        assert health.main([server.target]) == 0
        assert health.check(server.target, "envhub.v1.EnvHub") == "SERVING"
        assert health.check(server.target, "no.such.Service") == "NOT_FOUND"
        server.run(server.server.health.enter_graceful_shutdown())  # what a drain does first
        assert health.check(server.target) == "NOT_SERVING"
        assert health.main([server.target]) == 1
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert health.main([f"127.0.0.1:{port}", "--timeout", "2"]) == 1
