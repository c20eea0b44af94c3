"""Play one task by hand in a terminal (`envhub play`)."""

from __future__ import annotations

from collections.abc import Callable

from envhub.client import types
from envhub.client.sync import EnvhubClient
from envhub.core.errors import EnvhubError

HELP = """commands: /actions  admissible actions    /expert  the expert's next action(s)
          /snapshot  keep a snapshot      /restore [n]  go back to snapshot n (default: the last)
          /help  this text                /quit  leave
anything else is sent as an action"""


class Player:
    """A terminal session: reads commands, prints observations."""

    def __init__(self, client: EnvhubClient, start: types.SessionStart, output: Callable[[str], None] = print) -> None:
        self._client = client
        self._session = start.session_id
        self._view = start.view
        self._snapshots: list[types.Snapshot] = []
        self._print = output
        self._print(f"task {start.task.task_id}: {start.view.task_description}")
        self._show(start.view)

    def _show(self, view: types.EnvView) -> None:
        self._view = view
        self._print(view.text)
        ending = "  [episode over]" if view.done else ""
        self._print(f"-- step {view.step_index}, score {view.score:g}, reward {view.reward:g}{ending}")

    def handle(self, line: str) -> bool:
        """Handle one input line; False when the player quits."""
        command, _, argument = line.strip().partition(" ")
        try:
            if command == "/quit":
                self._client.close_session(self._session)
                return False
            if command == "/help":
                self._print(HELP)
            elif command == "/actions":
                self._print("\n".join(sorted(self._view.admissible or ())))
            elif command == "/expert":
                self._print("\n".join(self._client.expert_actions(self._session)) or "(the expert has nothing)")
            elif command == "/snapshot":
                self._snapshots.append(self._client.snapshot(self._session))
                self._print(f"snapshot {len(self._snapshots) - 1} at step {self._snapshots[-1].step_index}")
            elif command == "/restore":
                self._restore(int(argument) if argument else len(self._snapshots) - 1)
            elif line.strip():
                self._show(self._client.step(self._session, line.strip(), admissible=True))
        except EnvhubError as error:
            self._print(f"error: {error}")
        except (ValueError, IndexError):
            self._print(f"no snapshot {argument!r}; you have {len(self._snapshots)}")
        return True

    def _restore(self, number: int) -> None:
        if number < 0:
            raise IndexError(number)
        start = self._client.restore(self._snapshots[number], admissible=True)
        self._client.close_session(self._session)
        self._session = start.session_id
        self._show(start.view)


def play(client: EnvhubClient, start: types.SessionStart) -> None:
    """Read lines from the terminal until /quit or end of input."""
    player = Player(client, start)
    print(HELP)
    while True:
        try:
            line = input("> ")
        except EOFError:
            player.handle("/quit")
            return
        if not player.handle(line):
            return
