"""A procrastinate job that goes on firing other due alarms: one job, many resumes.

Theory of operation. procrastinate costs about the same per job whatever the job does
(fetching it, recording its end, the hand-offs between its event loop and the task's
thread): with hundreds of alarms due at once, that cost, not the resumes, sets the pace.
So the task of a job, once it fired its own alarm, takes the next due job of its queue
itself and fires that one too, up to ``batch - 1`` more, until none is due: each taken
the way procrastinate's own fetch takes one (``status = 'doing'`` under the same worker id,
skipping a row another worker holds and a job whose execution has one ``doing`` already:
the ``lock``), and deleted once fired, as procrastinate deletes a job that succeeded. The
end of one and the taking of the next are one transaction, without waiting for the disk
(like the worker's own bookkeeping, ``_ASYNC_COMMIT``). Every job in flight keeps doing
so, so a burst is drained by as many threads as the workers' ``concurrency``.

Durability: a job taken so is an ordinary ``doing`` job of this worker. If the process
dies, ``recover_stalled`` takes it up as any job of a silent worker (it fires again; the
store's compare-and-set makes a repeated fire a no-op). If the database cannot be reached
to take or to delete (so it is unknown whether a job is left ``doing`` under a worker that
still beats), the worker is stopped and started over, as when it cannot record the end of
its own job: the jobs of a stopped worker are taken up as stalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from typing import TYPE_CHECKING, Any

import psycopg
from procrastinate.exceptions import ConnectorException

from scheduling._errors import StoreError
from scheduling.adapters._common import require_aware

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from scheduling.abc import Fire
    from scheduling.adapters.procrastinate import ProcrastinateScheduler

__all__ = ["fire_and_go_on", "missing_alarms"]

logger = logging.getLogger("scheduling.adapters.procrastinate")

_TAKE = (
    "WITH candidate AS ("
    " SELECT job.id FROM procrastinate_jobs AS job"
    " WHERE job.status = 'todo' AND job.queue_name = %(queue)s AND job.task_name = %(task)s"
    " AND (job.scheduled_at IS NULL OR job.scheduled_at <= now())"
    " AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs AS other"
    "  WHERE other.lock = job.lock AND other.status = 'doing')"
    " ORDER BY job.priority DESC, job.id LIMIT 1"
    " FOR UPDATE OF job SKIP LOCKED)"
    " UPDATE procrastinate_jobs AS job SET status = 'doing', worker_id = %(worker)s"
    " FROM candidate WHERE job.id = candidate.id"
    " RETURNING job.id, job.args"
)
"""The next due job of the queue's task, taken as procrastinate's fetch takes one."""

_FINISH = "DELETE FROM procrastinate_jobs WHERE id = %s AND status = 'doing' AND worker_id = %s"
"""The end of a job taken: deleted, as procrastinate deletes a job that succeeded."""


def fire_and_go_on(
    scheduler: ProcrastinateScheduler, fire: Fire, execution_id: str, worker_id: int | None
) -> None:
    """Fire ``execution_id``, then due jobs taken one by one, up to ``scheduler.batch`` in all."""
    fire_one(fire, execution_id)
    if worker_id is None:
        return
    done: int | None = None
    for _ in range(scheduler.batch - 1):
        if scheduler._stopping.is_set():
            break
        try:
            taken = _finish_and_take(scheduler, done, worker_id)
        except (psycopg.Error, ConnectorException) as error:
            _give_up(scheduler, f"could not take the next due job ({error})")
            return
        if taken is None:
            return
        done, next_id = taken
        try:
            fire_one(fire, next_id)
        except Exception:
            logger.exception("the alarm of execution %r failed; it stays as stored", next_id)
    if done is not None:
        try:
            with scheduler._connection() as conn:
                conn.execute(_FINISH, (done, worker_id))
        except (psycopg.Error, ConnectorException) as error:
            _give_up(scheduler, f"could not record the end of a job ({error})")


def fire_one(fire: Fire, execution_id: str) -> None:
    """``fire`` one alarm; a ``StoreError`` is one line (it stays due in the store)."""
    try:
        result = fire(execution_id)
        if inspect.isawaitable(result):
            asyncio.run(_await(result))
    except StoreError as error:
        logger.warning(
            "the alarm of execution %r could not be handled: %s; it stays due in the store "
            "and is re-armed from there",
            execution_id,
            error,
        )


def _finish_and_take(
    scheduler: ProcrastinateScheduler, done: int | None, worker_id: int
) -> tuple[int, str] | None:
    """Delete job ``done`` (if any) and take the next due one, in one transaction."""
    from scheduling.adapters.procrastinate import TASK_NAME

    params = {"queue": scheduler.queue, "task": TASK_NAME, "worker": worker_id}
    with scheduler._connection() as conn, conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")  # bookkeeping: see the module
        if done is not None:
            conn.execute(_FINISH, (done, worker_id))
        row = conn.execute(_TAKE, params).fetchone()
    if row is None:
        return None
    return int(row[0]), str(row[1]["execution_id"])


def _give_up(scheduler: ProcrastinateScheduler, trouble: str) -> None:
    """Stop the worker (it starts over): its ``doing`` jobs are then taken up as stalled."""
    with scheduler._lock:
        worker, loop = scheduler._worker, scheduler._loop
    if worker is None or loop is None:
        return

    def stop() -> None:
        state = getattr(worker, "prana_state", None)
        if state is not None:
            state.trouble = f"{trouble}: the jobs fire again"
        worker.stop()  # type: ignore[no-untyped-call]

    with contextlib.suppress(RuntimeError):  # the loop already ended
        loop.call_soon_threadsafe(stop)


async def _await(awaitable: Any) -> object:
    return await awaitable


_ARMED_MANY = (
    "SELECT queueing_lock, status::text, scheduled_at FROM procrastinate_jobs"
    " WHERE queueing_lock = ANY(%s) AND status IN ('todo', 'doing')"
)
"""The jobs queued or firing of several executions, for ``missing_alarms``."""


def missing_alarms(
    scheduler: ProcrastinateScheduler, alarms: Sequence[tuple[str, datetime]]
) -> list[tuple[str, datetime]]:
    """The alarms with no job queued for their due time, nor firing for it or a later one."""
    wanted: dict[str, tuple[str, datetime]] = {}
    for execution_id, due_at in alarms:
        require_aware(due_at, f"ProcrastinateScheduler.schedule_many({execution_id!r})")
        wanted[scheduler.lock_key(execution_id)] = (execution_id, due_at)
    if not wanted:
        return []

    def armed(conn: psycopg.Connection[Any]) -> list[Any]:
        return conn.execute(_ARMED_MANY, (list(wanted),)).fetchall()

    for key, status, scheduled_at in scheduler._run("reading the queued alarms", armed):
        alarm = wanted.get(key)
        if alarm is not None and (
            scheduled_at == alarm[1] or (status == "doing" and scheduled_at >= alarm[1])
        ):
            del wanted[key]
    return list(wanted.values())
