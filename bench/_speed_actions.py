"""Actions of the speed bench, also loaded by its ``prana worker --actions`` processes.

``bench.fails_once`` fails its first attempt and succeeds on the retry, so every
execution of the bench's retry workflow makes exactly two transitions through a store:
the start (suspended on the retry) and the resume (completed). Each call appends one
line ``pid execution_id attempt`` to the file named by ``$PRANA_BENCH_EFFECTS`` (when
set), so the bench counts side effects per execution and reports duplicates
(at-least-once) apart from double transitions (read from the store).
"""

from __future__ import annotations

import os
from typing import Any

from prana import ActionContext, Registry

_EFFECTS = os.environ.get("PRANA_BENCH_EFFECTS")
_PID = os.getpid()


def fails_once(params: Any, ctx: ActionContext) -> Any:
    """Fail the first attempt, succeed on the retry; log the call as a side effect."""
    if _EFFECTS is not None:
        # One write() per line with O_APPEND: lines from several processes never interleave.
        fd = os.open(_EFFECTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{_PID} {ctx.execution_id} {ctx.attempt}\n".encode())
        finally:
            os.close(fd)
    if ctx.attempt == 1:
        raise ConnectionError("first attempt fails")
    return ctx.attempt


def register(registry: Registry) -> None:
    """Register the bench's actions (``prana worker --actions bench/_speed_actions.py``)."""
    registry.register("bench.fails_once", fails_once)
