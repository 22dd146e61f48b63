"""Adaptive concurrency: an AIMD window over the HTTP attempts of one benchmark.

A fixed window (`max_concurrent`) is the default and the right choice against a server that
queues. Against one that answers 429 when it is busy (a rate-limited API, a proxy in front of a
saturated vLLM), a fixed window keeps sending attempts that are refused and burns the retry budget.
`adaptive: true` on the service swaps the fixed semaphore for `AdaptiveSlots`:

- multiplicative decrease: a 429 halves the limit (floor 1), at most once per round trip — a 429
  to an attempt that started before the last cut says nothing new, so a burst of 429s from one
  window costs one halving, not one per refusal (TCP's rule);
- additive increase: each successful attempt adds 1/limit, i.e. about +1 per window of successes;
- cap: never above `max_concurrent`; it starts there, so an unlimited server sees no difference.

It has the `acquire()`/`release()` surface of `asyncio.Semaphore` (the client holds a slot only
while an attempt is on the wire) plus `feedback()`, which the client calls after every attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque

__all__ = ["AdaptiveSlots", "make_slots"]


class AdaptiveSlots:
    """An AIMD concurrency limit with a semaphore's interface; waiters are served in FIFO order."""

    def __init__(self, cap: int, *, floor: int = 1, decrease: float = 0.5) -> None:
        self.cap = max(1, int(cap))
        self.floor = min(max(1, int(floor)), self.cap)
        self.decrease = decrease
        self.limit = float(self.cap)
        self.in_use = 0
        self.n_cuts = 0  # how many multiplicative decreases happened
        self.n_rate_limited = 0  # 429 attempts seen
        self.min_limit = float(self.cap)  # the lowest the limit went (for the log and tests)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._last_cut = -math.inf

    def __repr__(self) -> str:
        return f"AdaptiveSlots(limit={self.limit:.1f}, cap={self.cap}, in_use={self.in_use}, waiting={len(self._waiters)})"

    @property
    def allowed(self) -> int:
        """Attempts that may be in flight now."""
        return max(self.floor, int(self.limit))

    async def acquire(self) -> bool:
        if self.in_use < self.allowed and not self._waiters:
            self.in_use += 1
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted just before the cancel: hand it on
                self.in_use -= 1
                self._wake()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise
        return True

    def release(self) -> None:
        self.in_use -= 1
        self._wake()

    def feedback(self, started: float, rate_limited: bool) -> None:
        """The outcome of one attempt that began at loop time `started`."""
        if rate_limited:
            self.n_rate_limited += 1
            if started >= self._last_cut:
                self.limit = max(float(self.floor), self.limit * self.decrease)
                self.min_limit = min(self.min_limit, self.limit)
                self._last_cut = asyncio.get_running_loop().time()
                self.n_cuts += 1
            return
        if self.limit < self.cap:
            self.limit = min(float(self.cap), self.limit + 1.0 / self.limit)
            self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_use < self.allowed:
            fut = self._waiters.popleft()
            if not fut.done():
                self.in_use += 1
                fut.set_result(None)


def make_slots(max_concurrent: int, adaptive: bool) -> asyncio.Semaphore | AdaptiveSlots:
    """The concurrency slots of one benchmark: fixed (the default) or AIMD."""
    return AdaptiveSlots(max_concurrent) if adaptive else asyncio.Semaphore(max_concurrent)
