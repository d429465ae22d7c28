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

- ``_fire_batches`` (the scheduler was started with ``start_batched``: a ``Runner``): one
  statement takes up to ``batch - 1`` due jobs, and the job's own alarm and theirs go to
  the runner in one ``fire_many`` call, which resumes them as one batch; then the next
  ``batch`` due ones, until none is due. A burst costs a few round trips per batch.
- ``_fire_and_go_on`` (``start(fire)``): the job fires its own alarm, then takes and fires
  due ones one at a time, up to ``batch`` alarms in all.

Both are methods of ``ProcrastinateScheduler``;
this module holds their statements and the pieces that need no scheduler. Every job in
flight does so, so a burst is drained by as many threads as the workers'
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
import inspect
import logging
from typing import TYPE_CHECKING, Any

from scheduling._errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from scheduling.abc import Fire, FireMany

__all__ = [
    "ARMED_MANY",
    "FINISH",
    "HAND_BACK",
    "TAKE",
    "execution_id_of",
    "fire_many_logged",
    "fire_one",
    "prefetch_logged",
]

logger = logging.getLogger("scheduling.adapters.procrastinate")

TAKE = (
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

FINISH = "DELETE FROM procrastinate_jobs WHERE id = ANY(%s) AND status = 'doing' AND worker_id = %s"
"""The end of jobs taken: deleted, as procrastinate deletes a job that succeeded."""

HAND_BACK = (
    "UPDATE procrastinate_jobs SET status = 'todo', worker_id = NULL"
    " WHERE id = ANY(%s) AND status = 'doing' AND worker_id = %s"
)
"""Jobs taken whose alarms a batch did not start, due again for any worker's free slot."""


def prefetch_logged(prefetch: Callable[[Sequence[str]], object], ids: list[str]) -> None:
    """Call the scheduler's ``prefetch``; a failure is logged (the loads read each row)."""
    try:
        prefetch(ids)
    except Exception:
        logger.exception("prefetching a batch of %d alarms failed; each is read alone", len(ids))


def fire_many_logged(fire_many: FireMany, ids: list[str]) -> None:
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


def execution_id_of(job_id: int, args: Any) -> str | None:
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


async def _await(awaitable: Any) -> object:
    return await awaitable


ARMED_MANY = (
    "SELECT queueing_lock, status::text, scheduled_at FROM procrastinate_jobs"
    " WHERE queueing_lock = ANY(%s) AND status IN ('todo', 'doing')"
)
"""The jobs queued or firing of several executions, for ``missing_alarms``."""
