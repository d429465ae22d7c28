"""Test doubles shared by several test modules."""

from __future__ import annotations

import threading
from typing import Any


class Flaky:
    """An action that fails its first ``fails`` calls, then returns which attempt succeeded.

    Thread-safe (scheduler threads may call it), and ``calls`` counts every call.
    """

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, params: Any, ctx: Any) -> Any:
        with self._lock:
            self.calls += 1
            if self.calls <= self.fails:
                raise ConnectionError(f"flaky failure {self.calls}")
        return {"ok": True, "attempt": ctx.attempt}
