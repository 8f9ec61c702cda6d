"""Failed credentials, counted per client: a client that sent `LIMIT` wrong tokens, failed logins or
refused writes within `WINDOW_S` is answered 429 + Retry-After for `BLOCK_S` on every request that
carries a credential (a token, a login, a write; `LIMIT` 0: never), so tokens cannot be guessed at speed. A success does
not reset the count (a guesser with one valid token gains nothing).

The count lives in this process' memory (several servers each keep their own: the limit is per server),
bounded to `MAX_CLIENTS` clients (the oldest forgotten first). The client is the address the server
sees (behind a proxy: the proxy's, unless the server trusts its forwarded-for header).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque

LIMIT = 10  # failures allowed in a window (`--max-failures`): a person mistyping a token a few times is never blocked
WINDOW_S = 60.0
BLOCK_S = 60.0  # a guesser gets at most LIMIT tries a minute: 2^256 tokens stay out of reach
MAX_CLIENTS = 10_000  # clients remembered at once (memory bound under a flood of addresses)


class Throttle:
    """Failures per client; `blocked` says for how long a client is refused."""

    def __init__(self, limit: int = LIMIT, window_s: float = WINDOW_S, block_s: float = BLOCK_S,
                 clock: object = time.monotonic) -> None:
        self.limit, self.window_s, self.block_s = limit, window_s, block_s
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def _now(self) -> float:
        return float(self.clock())  # type: ignore[operator]

    def blocked(self, client: str) -> int:
        """Seconds this client is still refused (0: not blocked)."""
        if self.limit <= 0:
            return 0
        with self._lock:
            until = self._until.get(client)
            if until is None:
                return 0
            left = until - self._now()
            if left <= 0:
                del self._until[client]
                return 0
            return max(1, math.ceil(left))

    def failed(self, client: str) -> bool:
        """Counts a failure; True when it blocks the client (from now on, for `block_s`)."""
        if self.limit <= 0:
            return False
        now = self._now()
        with self._lock:
            seen = self._failures.pop(client, None) or deque()
            self._failures[client] = seen  # the newest at the end: the oldest are forgotten first
            seen.append(now)
            while seen and seen[0] <= now - self.window_s:
                seen.popleft()
            while len(self._failures) > MAX_CLIENTS:
                old, _ = self._failures.popitem(last=False)
                self._until.pop(old, None)
            if len(seen) >= self.limit and client not in self._until:
                self._until[client] = now + self.block_s
                seen.clear()
                return True
            return False
