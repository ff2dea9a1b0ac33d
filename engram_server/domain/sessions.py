"""Which sessions each agent had, and when each started: how GetContext finds "the caller's last
session" without scanning memories.

Per agent (the empty agent id is the anonymous agent) the ledger keeps its last
:data:`MAX_SESSIONS` sessions, each with the time it was first seen: a session is seen when it
asks for a context pack (GetContext with a session_id) or writes a memory (AddMemory /
AddMemories with a session_id). The ledger is a state document of the store, written only when a
session is seen for the first time, so it survives restarts and, on a Qdrant server, is shared by
every Engram process using it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

from engram_server.ports import Store

MAX_SESSIONS: Final = 32
#: Agents whose ledger is kept in memory, most recently used (the others are read again from the
#: store when asked): a client naming a million agent ids must not grow the process.
MAX_CACHED_AGENTS: Final = 4096


@dataclass(frozen=True, slots=True)
class SessionSeen:
    session_id: str
    started_at: float


def _key(agent_id: str) -> str:
    return "sessions." + hashlib.sha256(agent_id.encode()).hexdigest()[:40]


class SessionLedger:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._cache: OrderedDict[str, list[SessionSeen]] = OrderedDict()
        self._lock = asyncio.Lock()

    async def _load(self, agent_id: str) -> list[SessionSeen]:
        hit = self._cache.get(agent_id)
        if hit is not None:
            self._cache.move_to_end(agent_id)
            return hit
        doc: dict[str, Any] | None = await self._store.get_state(_key(agent_id))
        seen = [
            SessionSeen(str(sid), float(at))
            for sid, at in (doc or {}).get("sessions", [])
            if isinstance(sid, str) and isinstance(at, (int, float))
        ]
        self._remember(agent_id, seen)
        return seen

    def _remember(self, agent_id: str, sessions: list[SessionSeen]) -> None:
        self._cache[agent_id] = sessions
        self._cache.move_to_end(agent_id)
        while len(self._cache) > MAX_CACHED_AGENTS:
            self._cache.popitem(last=False)

    async def last_before(self, agent_id: str, current: str) -> SessionSeen | None:
        """The agent's most recently started session other than ``current``."""
        for s in reversed(await self._load(agent_id)):
            if s.session_id != current:
                return s
        return None

    async def seen(self, agent_id: str, session_id: str, at: float) -> None:
        """Note that ``session_id`` of ``agent_id`` was active at ``at`` (recorded once: its start)."""
        if not session_id:
            return
        known = self._cache.get(agent_id)
        if known is not None and any(s.session_id == session_id for s in known):
            return
        async with self._lock:
            sessions = await self._load(agent_id)
            if any(s.session_id == session_id for s in sessions):
                return
            sessions = sorted(
                [*sessions, SessionSeen(session_id, at)], key=lambda s: (s.started_at, s.session_id)
            )
            sessions = sessions[-MAX_SESSIONS:]
            await self._store.put_state(
                _key(agent_id), {"sessions": [[s.session_id, s.started_at] for s in sessions]}
            )
            self._remember(agent_id, sessions)
