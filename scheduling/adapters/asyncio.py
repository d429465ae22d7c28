"""A dependency-free scheduler on an asyncio event loop (``loop.call_at``).

Due times are aware datetimes; the loop counts in its own monotonic ``loop.time()``. Each
alarm is converted when it is armed, from the difference between the clock's now and
``loop.time()``, so a later jump of the wall clock does not move alarms already armed.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from scheduling.adapters._common import SchedulerStateError, require_aware

if TYPE_CHECKING:
    from collections.abc import Callable

    from scheduling.abc import Fire

__all__ = ["AsyncioScheduler", "SchedulerStateError"]

logger = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class AsyncioScheduler:
    """Fires alarms from an asyncio event loop; an awaitable returned by ``fire`` runs as a task.

    ``start`` takes the running loop when none was given. Alarms armed before ``start`` wait
    and are armed by it. ``schedule``, ``cancel`` and ``shutdown`` may be called from other
    threads: they are handed to the loop with ``call_soon_threadsafe``. A callback that
    raises (or a task that fails) is logged and never stops the loop or other alarms.
    ``shutdown`` cancels the alarms still pending; callbacks already running finish.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._given_loop = loop
        self._loop: asyncio.AbstractEventLoop | None = loop
        self._clock = clock if clock is not None else _utcnow
        self._fire: Fire | None = None
        self._generation = 0
        self._waiting: dict[str, datetime] = {}  # armed before start
        self._handles: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Future[Any]] = set()

    def follow(self, clock: Callable[[], datetime]) -> None:
        """Read due times by ``clock`` (the runner's; ``scheduling.abc.FollowingScheduler``)."""
        self._clock = clock

    def start(self, fire: Fire) -> None:
        """Begin firing through ``fire``; call it in the running loop unless ``loop=`` was given."""
        if self._fire is not None:
            raise SchedulerStateError("AsyncioScheduler.start: already started; shutdown() first")
        loop = self._given_loop
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise SchedulerStateError(
                    "AsyncioScheduler.start: no running event loop; call start() from code running "
                    "in the loop (inside `async def main()`), or pass AsyncioScheduler(loop=...)"
                ) from None
        self._loop = loop
        self._fire = fire
        waiting, self._waiting = self._waiting, {}
        for execution_id, due_at in waiting.items():
            self._dispatch(self._arm, self._generation, execution_id, due_at)

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        """Arm (or re-arm) the one alarm of ``execution_id`` for ``due_at``."""
        require_aware(due_at, f"AsyncioScheduler.schedule({execution_id!r})")
        if self._fire is None:
            self._waiting[execution_id] = due_at
            return
        self._dispatch(self._arm, self._generation, execution_id, due_at)

    def cancel(self, execution_id: str) -> None:
        """Disarm the alarm of ``execution_id``; unknown ids are ignored."""
        self._waiting.pop(execution_id, None)
        if self._fire is not None:
            self._dispatch(self._disarm, self._generation, execution_id)

    def shutdown(self) -> None:
        """Stop firing and cancel every pending alarm; ``start`` may be called again later."""
        self._waiting.clear()
        if self._fire is None:
            return
        self._fire = None
        self._generation += 1
        handles, self._handles = self._handles, {}
        loop = self._loop
        if loop is not None and not loop.is_closed():
            self._dispatch(_cancel_all, handles)
        self._loop = self._given_loop

    def _dispatch(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` now on the loop's thread (or if the loop is idle), else hand it over."""
        loop = self._loop
        assert loop is not None
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or not loop.is_running():
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    def _arm(self, generation: int, execution_id: str, due_at: datetime) -> None:
        if generation != self._generation:
            return  # handed over before a shutdown
        loop = self._loop
        assert loop is not None
        old = self._handles.pop(execution_id, None)
        if old is not None:
            old.cancel()
        when = loop.time() + (due_at - self._clock()).total_seconds()
        self._handles[execution_id] = loop.call_at(when, self._run, generation, execution_id)

    def _disarm(self, generation: int, execution_id: str) -> None:
        if generation != self._generation:
            return
        handle = self._handles.pop(execution_id, None)
        if handle is not None:
            handle.cancel()

    def _run(self, generation: int, execution_id: str) -> None:
        """The timer callback: call ``fire`` and keep any awaitable it returns alive as a task."""
        fire = self._fire
        if generation != self._generation or fire is None:
            return
        self._handles.pop(execution_id, None)
        try:
            result = fire(execution_id)
        except Exception:
            logger.exception("firing the alarm of execution %r failed", execution_id)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result, loop=self._loop)
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._task_done, execution_id))

    def _task_done(self, execution_id: str, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            logger.error("the resume of execution %r failed", execution_id, exc_info=error)


def _cancel_all(handles: dict[str, asyncio.TimerHandle]) -> None:
    for handle in handles.values():
        handle.cancel()
