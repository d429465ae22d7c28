"""A scheduler written from "Writing your own store or scheduler" alone: one timer thread.

It keeps one alarm per execution id, fires the earliest due one when the wall clock
reaches it (a late one at once), logs an error raised by ``fire`` and goes on, and drops
pending alarms on ``shutdown`` (the store re-arms them). ``tests`` in this folder run the
conformance kit, ``scheduling.testing.SchedulerConformance``, over it.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduling.abc import Fire

__all__ = ["TimerScheduler"]

log = logging.getLogger(__name__)


class TimerScheduler:
    """A ``Scheduler`` whose alarms fire from one background thread."""

    def __init__(self) -> None:
        self._alarms: dict[str, datetime] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self, fire: Fire) -> None:
        """Start firing due alarms with ``fire(execution_id)``."""
        with self._cond:
            self._stopping = False
        self._thread = threading.Thread(target=self._run, args=(fire,), daemon=True)
        self._thread.start()

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        """Arm (or move) the one alarm of ``execution_id``."""
        with self._cond:
            self._alarms[execution_id] = due_at
            self._cond.notify_all()

    def cancel(self, execution_id: str) -> None:
        """Remove the alarm of ``execution_id``, if any."""
        with self._cond:
            self._alarms.pop(execution_id, None)
            self._cond.notify_all()

    def shutdown(self) -> None:
        """Stop the thread and drop pending alarms."""
        with self._cond:
            self._stopping = True
            self._alarms.clear()
            self._cond.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _next_due(self) -> str | None:
        """Wait (holding the condition) for the earliest alarm to come due; None to stop."""
        while not self._stopping:
            if self._alarms:
                execution_id, due_at = min(self._alarms.items(), key=lambda item: item[1])
                wait = (due_at - datetime.now(timezone.utc)).total_seconds()
                if wait <= 0:
                    del self._alarms[execution_id]
                    return execution_id
                self._cond.wait(wait)
            else:
                self._cond.wait()
        return None

    def _run(self, fire: Fire) -> None:
        while True:
            with self._cond:
                execution_id = self._next_due()
            if execution_id is None:
                return
            try:
                fire(execution_id)
            except Exception:
                log.exception("firing the alarm of %r failed", execution_id)
