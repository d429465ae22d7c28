"""The racing processes of ``test_races.py``: each opens its own store and runner, then, trial
after trial, waits at a barrier shared with the other racers and makes its one move.

Run in processes started with ``multiprocessing``'s spawn context, so this module must
import cleanly on its own. Every racer reports ``(trial, role, claim)`` on the results queue:
``"won"`` or ``"lost"`` for a move that says whether it saved (a delivery, a cancel),
``None`` for an alarm (the runner drops a lost alarm without saying), or ``"error: ..."``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

    from scheduling.abc import ExecutionStore

BARRIER_SECONDS = 60.0


def open_store(where: dict[str, str]) -> ExecutionStore:
    """The store ``where`` names: ``{"sqlite": path}`` or ``{"postgres": dsn, "schema": name}``."""
    if "sqlite" in where:
        from scheduling.stores.sqlite import SQLiteStore

        return SQLiteStore(where["sqlite"])
    from scheduling.stores.postgres import PostgresStore

    return PostgresStore(where["postgres"], schema=where["schema"])


def race(
    role: str,
    where: dict[str, str],
    actions: str,
    now: str,
    trials: list[tuple[int, str, str | None]],
    barrier: Barrier,
    results: Queue[tuple[int, str, Any]],
) -> None:
    """Play ``role`` in every trial: ``(trial, execution id, due time of its alarm or None)``.

    Roles: ``deliver`` (``Runner.deliver``), ``cancel`` (``Runner.cancel``), and
    ``alarm-*`` (the alarm of the execution armed and fired by a ``ManualScheduler``, the
    path a real scheduler's alarm takes). ``now`` is this racer's clock (ISO time).
    """
    from prana import ResumeError
    from prana.testing import ManualClock
    from scheduling import Runner, StaleVersionError
    from scheduling._cli import load_actions
    from scheduling.adapters.manual import ManualScheduler

    store = open_store(where)
    clock = ManualClock(datetime.fromisoformat(now))
    scheduler = ManualScheduler(clock)
    runner = Runner(load_actions(actions), store, scheduler, recover=False)
    runner.open()
    try:
        for trial, execution_id, due_at in trials:
            barrier.wait(BARRIER_SECONDS)
            claim: Any = None
            try:
                if role == "deliver":
                    runner.deliver(execution_id, {"by": "deliver"})
                    claim = "won"
                elif role == "cancel":
                    runner.cancel(execution_id, "the race")
                    claim = "won"
                else:
                    assert due_at is not None
                    scheduler.schedule(execution_id, datetime.fromisoformat(due_at))
                    scheduler.advance(timedelta(0))
            except (StaleVersionError, ResumeError):
                claim = "lost"
            except Exception as error:  # noqa: BLE001 - reported to the test, which fails
                claim = f"error: {type(error).__name__}: {error}"
            results.put((trial, role, claim))
    finally:
        runner.close()
        store.close()
