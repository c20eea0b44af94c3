"""The fastest alternative the per-call bench compares envhub with: a minimal WebSocket echo server.

One asyncio process (the `websockets` library, no framework), one connection per session,
each text message an action answered with the JSON the toy environment's step carries
(observation text, reward, done, step counter). It has no workers, no auth, no exactly-once
bookkeeping, no metrics: the floor of a Python server's cost per step. Run it as
`python -m envhub.bench.ws_echo PORT_FILE` (it binds port 0 and writes the port there).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from websockets.asyncio.server import ServerConnection, serve


async def _session(connection: ServerConnection) -> None:
    count = 0
    async for action in connection:
        count += 1
        observation = {"text": f"{action!s} {count}", "reward": 0.0, "done": False, "step_index": count}
        await connection.send(json.dumps(observation))


async def _main(port_file: str) -> None:
    async with serve(_session, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        Path(port_file).write_text(f"{port}\n", encoding="utf-8")
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
