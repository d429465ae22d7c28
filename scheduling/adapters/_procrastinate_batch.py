"""A procrastinate job that goes on firing other due alarms: one job, many resumes.

Theory of operation. procrastinate costs about the same per job whatever the job does
(fetching it, recording its end, the hand-offs between its event loop and the task's
thread): with hundreds of alarms due at once, that cost, not the resumes, sets the pace.
So the task of a job takes other due jobs of its queue itself, the way procrastinate's
own fetch takes one (``status = 'doing'`` under the same worker id, skipping a row another
worker holds and a job whose execution has one ``doing`` already: the ``lock``), and
deletes them once fired, as procrastinate deletes a job that succeeded. The end of some
and the taking of the next are one transaction, without waiting for the disk (like the
worker's own bookkeeping, ``_ASYNC_COMMIT``). Two ways:

- ``fire_batches`` (the scheduler was started with ``start_batched``: a ``Runner``): one
  statement takes up to ``batch - 1`` due jobs, and the job's own alarm and theirs go to
  the runner in one ``fire_many`` call, which resumes them as one batch; then the next
  ``batch`` due ones, until none is due. A burst costs a few round trips per batch.
- ``fire_and_go_on`` (``start(fire)``): the job fires its own alarm, then takes and fires
  due ones one at a time, up to ``batch`` alarms in all.

Every job in flight does so, so a burst is drained by as many threads as the workers'
``concurrency``.

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
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from scheduling.abc import Fire, FireMany
    from scheduling.adapters.procrastinate import ProcrastinateScheduler

__all__ = ["fire_and_go_on", "fire_batches", "missing_alarms"]

logger = logging.getLogger("scheduling.adapters.procrastinate")

_TAKE = (
    "WITH candidate AS ("
    " SELECT job.id FROM procrastinate_jobs AS job"
    " WHERE job.status = 'todo' AND job.queue_name = %(queue)s AND job.task_name = %(task)s"
    " AND (job.scheduled_at IS NULL OR job.scheduled_at <= now())"
    " AND (job.lock IS NULL OR job.lock NOT IN (SELECT other.lock FROM procrastinate_jobs"
    "  AS other WHERE other.status = 'doing' AND other.lock IS NOT NULL))"
    " ORDER BY job.priority DESC, job.id LIMIT %(limit)s"
    " FOR UPDATE OF job SKIP LOCKED)"
    " UPDATE procrastinate_jobs AS job SET status = 'doing', worker_id = %(worker)s"
    " FROM candidate WHERE job.id = candidate.id"
    " RETURNING job.id, job.args"
)
"""The next due jobs of the queue's task (up to ``limit``), taken as procrastinate's fetch
takes one. Two jobs of one execution are never both ``todo`` (one ``queueing_lock``), so
the jobs taken together are of distinct executions.

The locks of the jobs ``doing`` are read once per statement (``NOT IN``: one hashed set),
not once per candidate: a ``NOT EXISTS`` there was planned, on a table never analyzed (a
fresh schema, autovacuum off), as a scan of every ``doing`` entry of the lock index per
candidate, so each take of a burst cost the candidates times the jobs in flight."""

_FINISH = (
    "DELETE FROM procrastinate_jobs WHERE id = ANY(%s) AND status = 'doing' AND worker_id = %s"
)
"""The end of jobs taken: deleted, as procrastinate deletes a job that succeeded."""


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
            taken = _finish_and_take(scheduler, [] if done is None else [done], worker_id, 1)
        except (psycopg.Error, ConnectorException) as error:
            _give_up(scheduler, f"could not take the next due job ({error})")
            return
        if not taken:
            return
        done, next_id = taken[0]
        if next_id is None:
            continue
        try:
            fire_one(fire, next_id)
        except BaseException:  # even a KeyboardInterrupt: the job is ended (re-armed later)
            logger.exception("the alarm of execution %r failed; it stays as stored", next_id)
    if done is not None:
        _finish(scheduler, [done], worker_id)


def fire_batches(
    scheduler: ProcrastinateScheduler,
    fire_many: FireMany,
    execution_id: str,
    worker_id: int | None,
) -> None:
    """Fire ``execution_id`` with the due jobs taken with it, ``scheduler.batch`` at most per
    ``fire_many`` call; then the next due ones the same way, until none is due.

    One statement takes a whole batch, and one transaction ends it and takes the next: a
    burst costs a few round trips per batch, not per alarm. The runner resumes each batch
    in one call (``scheduling.abc.BatchingScheduler``); the jobs taken are ``doing`` under
    this worker until their batch has fired, so a crash leaves them to ``recover_stalled``.
    """
    if worker_id is None:
        _fire_many_logged(fire_many, [execution_id])
        return
    done: list[int] = []
    ids = [execution_id]
    while True:
        try:
            taken = _finish_and_take(scheduler, done, worker_id, scheduler.batch - len(ids))
        except (psycopg.Error, ConnectorException) as error:
            _give_up(scheduler, f"could not take the next due jobs ({error})")
            return
        done = [job_id for job_id, _ in taken]
        ids += [next_id for _, next_id in taken if next_id is not None]
        if not ids:
            break  # ``done``: jobs naming no execution (or none), ended below
        prefetch = scheduler.prefetch
        if prefetch is not None:
            _prefetch_logged(prefetch, ids)
        try:
            _fire_many_logged(fire_many, ids)
        finally:
            if prefetch is not None:
                _prefetch_logged(prefetch, [])
        ids = []
        if not done or scheduler._stopping.is_set():
            break
    if done:
        _finish(scheduler, done, worker_id)


def _prefetch_logged(prefetch: Callable[[Sequence[str]], object], ids: list[str]) -> None:
    """Call the scheduler's ``prefetch``; a failure is logged (the loads read each row)."""
    try:
        prefetch(ids)
    except Exception:
        logger.exception("prefetching a batch of %d alarms failed; each is read alone", len(ids))


def _fire_many_logged(fire_many: FireMany, ids: list[str]) -> None:
    """``fire_many`` one batch; what it raises is logged (its alarms stay due in the store).

    Even a ``BaseException`` (an action's ``KeyboardInterrupt`` or ``SystemExit``, in this
    worker thread): raised on, it left the batch's jobs ``doing`` under a worker still
    beating, so the alarms not yet fired were never fired again while it lived. Caught,
    the jobs are ended and the store's due executions re-armed, as for any failed batch.
    """
    try:
        result = fire_many(ids)
        if inspect.isawaitable(result):
            asyncio.run(_await(result))
    except BaseException:
        logger.exception(
            "a batch of %d alarms failed; they stay due in the store and are re-armed from there",
            len(ids),
        )


def _finish(scheduler: ProcrastinateScheduler, done: list[int], worker_id: int) -> None:
    """Delete the jobs ``done`` (their alarms fired); on failure, the worker starts over."""
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
    scheduler: ProcrastinateScheduler, done: list[int], worker_id: int, limit: int
) -> list[tuple[int, str | None]]:
    """Delete the jobs ``done`` and take up to ``limit`` due ones, in one transaction.

    A job taken whose arguments hold no execution id (written by hand or by another
    program) comes back with ``None``: logged, never fired, ended with the others (it
    raised a ``KeyError`` that failed the job taking it and stranded the rest ``doing``).
    """
    from scheduling.adapters.procrastinate import TASK_NAME

    if limit < 1:
        if done:
            _finish(scheduler, done, worker_id)
        return []
    params = {"queue": scheduler.queue, "task": TASK_NAME, "worker": worker_id, "limit": limit}
    with scheduler._connection() as conn, conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")  # bookkeeping: see the module
        if done:
            conn.execute(_FINISH, (done, worker_id))
        rows = conn.execute(_TAKE, params).fetchall()
    return [(int(row[0]), _execution_id(int(row[0]), row[1])) for row in rows]


def _execution_id(job_id: int, args: Any) -> str | None:
    """The execution id a job's arguments name, or ``None`` (logged) if they name none."""
    execution_id = args.get("execution_id") if isinstance(args, dict) else None
    if isinstance(execution_id, str):
        return execution_id
    logger.warning(
        "job %d of the queue names no execution (arguments %.200r); it is dropped",
        job_id,
        args,
    )
    return None


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
