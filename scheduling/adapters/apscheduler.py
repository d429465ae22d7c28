"""The default scheduler: APScheduler 3.11 (not 4.x, still an alpha with open double-run bugs).

One ``date`` job per due resume, with the stable id ``prana:<execution_id>``, so arming
again replaces (``replace_existing=True``). ``misfire_grace_time=None``: APScheduler's
default grace of one second silently drops a one-off job that runs late (a busy process,
a restart), and an alarm must never be dropped. ``coalesce=True`` and a high
``max_instances`` follow from the same rule: a callback that re-arms its own execution
for "now" must fire again, not be skipped because the previous run is still running.

A job holds only plain strings: the execution id and the adapter's ``name``. The job
function is module-level, so a persistent job store can reference it by name; it finds
the fire callback in a process-wide registry keyed by the adapter's ``name``.

Batches (``scheduling.abc.BatchingScheduler``, how a ``Runner`` starts it): started with
``start_batched`` and no ``jobstore=``, the adapter keeps the armed ids itself, in one
bucket per due instant, and APScheduler holds one job per instant (``prana-at:<instant>``)
instead of one per execution; the job hands its whole bucket to ``fire_many``. Arming an
id moves it between buckets, cancelling removes it (and the job of a bucket left empty).
So 10,000 alarms due at one instant are one job, not 10,000 jobs in the thread pool.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler

from prana import InvalidSettingsError
from scheduling.adapters._common import SchedulerStateError, require_aware

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from scheduling.abc import Fire, FireMany

__all__ = [
    "BUCKET_ID_PREFIX",
    "JOB_ID_PREFIX",
    "APSchedulerAdapter",
    "SchedulerStateError",
    "job_id",
    "stop_scheduler",
]

logger = logging.getLogger(__name__)

JOB_ID_PREFIX = "prana:"
"""Every job this adapter adds for one execution has the id ``JOB_ID_PREFIX + execution_id``."""

BUCKET_ID_PREFIX = "prana-at:"
"""A batched adapter's job for one due instant has the id ``BUCKET_ID_PREFIX + instant``."""

_JOBSTORE_ALIAS = "prana"
"""The alias a ``jobstore=`` given to the adapter is added under."""

_MAX_INSTANCES = 1_000_000
"""Effectively unlimited: a second fire of one id while the first runs must not be dropped."""

_FIRES: dict[str, Fire] = {}
_BUCKETS: dict[str, _Buckets] = {}
_FIRES_LOCK = threading.Lock()


class _Buckets:
    """A batched adapter's armed ids, one bucket (kept in arming order) per due instant."""

    __slots__ = ("by_instant", "fire_many", "lock", "where")

    def __init__(self, fire_many: FireMany) -> None:
        self.fire_many = fire_many
        self.lock = threading.Lock()
        self.by_instant: dict[str, dict[str, None]] = {}
        self.where: dict[str, str] = {}

    def take(self, instant: str) -> list[str]:
        """Empty the bucket of ``instant``: its ids now count as fired."""
        with self.lock:
            bucket = self.by_instant.pop(instant, None)
            if bucket is None:
                return []
            where = self.where
            for execution_id in bucket:
                del where[execution_id]
            return list(bucket)


def job_id(execution_id: str) -> str:
    """The APScheduler job id of the alarm of ``execution_id``."""
    return JOB_ID_PREFIX + execution_id


def _lookup(adapter: str, execution_id: str) -> Fire | None:
    fire = _FIRES.get(adapter)
    if fire is None:
        logger.warning(
            "the alarm of execution %r fired but no started APSchedulerAdapter is named %r; "
            "dropped (a runner re-arms every due execution from its store when it starts)",
            execution_id,
            adapter,
        )
    return fire


async def _await(awaitable: Awaitable[object]) -> object:
    return await awaitable


def _fire_job(execution_id: str, adapter: str) -> None:
    """The job of background mode, run in APScheduler's thread pool.

    An awaitable returned by the callback is run to completion on a fresh event loop in
    this worker thread.
    """
    fire = _lookup(adapter, execution_id)
    if fire is None:
        return
    _run_in_job(fire, execution_id)


def _run_in_job(callback: Callable[[Any], object], argument: object) -> None:
    """Call an alarm callback as a background job (``_IN_JOB`` set while it runs); an
    awaitable it returns is run to completion on a fresh event loop in this thread."""
    _IN_JOB.active = True
    try:
        result = callback(argument)
        if inspect.isawaitable(result):
            asyncio.run(_await(result))
    finally:
        _IN_JOB.active = False


def _take(instant: str, adapter: str) -> tuple[FireMany, list[str]] | None:
    buckets = _BUCKETS.get(adapter)
    if buckets is None:
        logger.warning(
            "the alarms due at %s fired but no started APSchedulerAdapter is named %r; "
            "dropped (a runner re-arms every due execution from its store when it starts)",
            instant,
            adapter,
        )
        return None
    ids = buckets.take(instant)
    return (buckets.fire_many, ids) if ids else None


def _fire_bucket(instant: str, adapter: str) -> None:
    """The job of a batched adapter's due instant (background mode): fire its bucket at once."""
    taken = _take(instant, adapter)
    if taken is None:
        return
    fire_many, ids = taken
    _run_in_job(fire_many, ids)


async def _fire_bucket_async(instant: str, adapter: str) -> None:
    """The job of a batched adapter's due instant (asyncio mode)."""
    taken = _take(instant, adapter)
    if taken is None:
        return
    fire_many, ids = taken
    result = fire_many(ids)
    if inspect.isawaitable(result):
        await result


async def _fire_job_async(execution_id: str, adapter: str) -> None:
    """The job of asyncio mode, run on the scheduler's event loop; awaits an awaitable result."""
    fire = _lookup(adapter, execution_id)
    if fire is None:
        return
    result = fire(execution_id)
    if inspect.isawaitable(result):
        await result


_IN_JOB = threading.local()
"""``active`` is true in a thread pool worker while it fires an alarm (shutdown cannot wait)."""


def stop_scheduler(scheduler: BaseScheduler, *, wait: bool = False) -> None:
    """Shut an APScheduler 3 scheduler down without killing its thread mid-pass.

    ``shutdown`` marks the scheduler stopped without taking the job store lock; a job pass
    running at that moment then fails to remove the one-off job it just submitted
    (``JobLookupError``) and the scheduler thread dies with it. Pausing first, then
    waiting for the lock (``get_jobs`` takes it), lets that pass finish cleanly.
    """
    scheduler.pause()
    scheduler.get_jobs()
    scheduler.shutdown(wait=wait)


class APSchedulerAdapter:
    """The ``Scheduler`` protocol over an APScheduler 3.11 scheduler.

    By default it creates (and owns) a ``BackgroundScheduler`` in UTC; ``mode="asyncio"``
    creates an ``AsyncIOScheduler`` instead, whose ``start`` must then run inside the
    event loop. Pass ``scheduler=`` to use a scheduler you configured yourself, and
    ``jobstore=`` (e.g. an ``SQLAlchemyJobStore``) to keep the jobs in a persistent store,
    added under the alias ``"prana"``. ``name`` keys the process-wide registry the jobs use
    to find the fire callback; give a stable one with a persistent store so that jobs
    written by an earlier process reach this adapter (the default is unique per instance).
    """

    def __init__(
        self,
        scheduler: BaseScheduler | None = None,
        *,
        mode: Literal["background", "asyncio"] = "background",
        jobstore: Any = None,
        name: str | None = None,
    ) -> None:
        if mode not in ("background", "asyncio"):
            raise InvalidSettingsError(
                f"APSchedulerAdapter(mode={mode!r}): use 'background' (a thread) or 'asyncio' "
                "(the running event loop)"
            )
        if scheduler is not None and not isinstance(scheduler, BaseScheduler):
            raise InvalidSettingsError(
                f"APSchedulerAdapter(scheduler={scheduler!r}): pass an APScheduler 3.x scheduler "
                "such as BackgroundScheduler(timezone=timezone.utc), or None for the default"
            )
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidSettingsError(
                f"APSchedulerAdapter(name={name!r}): use a non-empty string, or None"
            )
        self._mode = mode
        self._clock: Callable[[], datetime] | None = None
        self._jobstore = jobstore
        self._owns_scheduler = scheduler is None
        self._scheduler: BaseScheduler = scheduler if scheduler is not None else self._create()
        if scheduler is not None and jobstore is not None:
            scheduler.add_jobstore(jobstore, alias=_JOBSTORE_ALIAS)
        self._alias = "default" if jobstore is None else _JOBSTORE_ALIAS
        self._job_func = (
            _fire_job_async if isinstance(self._scheduler, AsyncIOScheduler) else _fire_job
        )
        self.name = name if name is not None else f"adapter-{uuid.uuid4().hex}"
        self._started = False
        self._started_scheduler = False
        self._stopped_scheduler = False
        self._buckets: _Buckets | None = None
        """The armed ids by due instant, while started batched (without ``jobstore=``)."""
        self._singles = False
        """Whether a job per execution may be queued (armed before a batched start)."""

    @property
    def scheduler(self) -> BaseScheduler:
        """The underlying APScheduler scheduler (to add listeners or inspect jobs)."""
        return self._scheduler

    def _create(self) -> BaseScheduler:
        scheduler: BaseScheduler
        if self._mode == "asyncio":
            scheduler = AsyncIOScheduler(timezone=timezone.utc)
        else:
            scheduler = BackgroundScheduler(timezone=timezone.utc)
        if self._jobstore is not None:
            scheduler.add_jobstore(self._jobstore, alias=_JOBSTORE_ALIAS)
        return scheduler

    def start(self, fire: Fire) -> None:
        """Register ``fire`` under this adapter's name and start the scheduler if it is stopped."""
        self._start(fire, None)

    def start_batched(self, fire: Fire, fire_many: FireMany) -> None:
        """``start``; without ``jobstore=``, alarms due at one instant fire as one batch.

        (A persistent ``jobstore=`` keeps one job per execution: its jobs must make sense to
        the next process, and a bucket lives in this one.)
        """
        self._start(fire, fire_many if self._jobstore is None else None)

    def _start(self, fire: Fire, fire_many: FireMany | None) -> None:
        with _FIRES_LOCK:
            if self._started:
                raise SchedulerStateError(
                    "APSchedulerAdapter.start: already started; call shutdown() first"
                )
            if self.name in _FIRES:
                raise SchedulerStateError(
                    f"APSchedulerAdapter.start: another started adapter is named {self.name!r}; "
                    "shut it down first or give this one a different name="
                )
            _FIRES[self.name] = fire
            if fire_many is not None:
                self._buckets = _BUCKETS[self.name] = _Buckets(fire_many)
            self._started = True
        try:
            if self._stopped_scheduler and not self._owns_scheduler:
                raise SchedulerStateError(
                    "APSchedulerAdapter.start: this adapter shut down the scheduler you passed, "
                    "and APScheduler 3 cannot restart one; pass a new scheduler to a new adapter, "
                    "or pass none and let the adapter own (and renew) its scheduler"
                )
            if self._stopped_scheduler:
                # A shut-down APScheduler cannot restart (its thread pool is closed), and an
                # AsyncIOScheduler's shutdown may still be queued on the loop: use a new one.
                self._scheduler = self._create()
                self._stopped_scheduler = False
            if not self._scheduler.running:
                self._scheduler.start()
                self._started_scheduler = True
        except SchedulerStateError:
            self._unregister()
            raise
        except RuntimeError as error:
            self._unregister()
            if isinstance(self._scheduler, AsyncIOScheduler):
                raise SchedulerStateError(
                    "APSchedulerAdapter(mode='asyncio').start: no running event loop; call "
                    "start() from code running in the loop (e.g. inside `async def main()`)"
                ) from error
            raise

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        """Add (or replace) the ``date`` job of ``execution_id`` for ``due_at``."""
        require_aware(due_at, f"APSchedulerAdapter.schedule({execution_id!r})")
        buckets = self._buckets
        if buckets is not None:
            self._schedule_in_bucket(buckets, execution_id, due_at)
            return
        self._singles = True
        if not self._scheduler.running:
            # A stopped APScheduler queues jobs and does not dedupe the queue: keep one.
            self.cancel(execution_id)
        self._add_job(
            self._job_func,
            due_at,
            (execution_id, self.name),
            job_id(execution_id),
            f"prana resume {execution_id}",
        )

    def hand_back(self, execution_ids: Sequence[str]) -> None:
        """Fire these alarms of a batch again now, one job each: the pool's free threads
        take them at once (``BatchingScheduler``)."""
        now = self._clock() if self._clock is not None else datetime.now(timezone.utc)
        self._singles = True
        for execution_id in execution_ids:
            self._add_job(
                self._job_func,
                now,
                (execution_id, self.name),
                job_id(execution_id),
                f"prana resume {execution_id}",
            )

    def follow(self, clock: Callable[[], datetime]) -> None:
        """Read due times by ``clock`` (the runner's; ``scheduling.abc.FollowingScheduler``).

        APScheduler fires by this process's wall clock: each alarm is handed to it at the
        wall time at which ``clock`` will reach its due time, so a wall clock minutes off
        the runner's (a ``PostgresStore``'s server time) fires nothing early nor late.
        """
        if not callable(clock):
            raise InvalidSettingsError(
                f"APSchedulerAdapter.follow({clock!r}): pass a callable returning an aware datetime"
            )
        self._clock = clock

    def _add_job(
        self,
        func: Callable[..., object],
        due_at: datetime,
        args: tuple[str, str],
        ident: str,
        name: str,
    ) -> None:
        """Add (or replace) one date job: every alarm job fires once, however late, never
        skipped as misfired nor run twice at once."""
        clock = self._clock
        if clock is not None:  # the wall time at which the runner's clock reaches due_at
            due_at = due_at + (datetime.now(timezone.utc) - clock())
        self._scheduler.add_job(
            func,
            trigger="date",
            run_date=due_at,
            args=args,
            id=ident,
            name=name,
            jobstore=self._alias,
            replace_existing=True,
            coalesce=True,
            misfire_grace_time=None,
            max_instances=_MAX_INSTANCES,
        )

    def _schedule_in_bucket(self, buckets: _Buckets, execution_id: str, due_at: datetime) -> None:
        """Move ``execution_id`` into the bucket of ``due_at``; add the job of a new bucket."""
        instant = due_at.astimezone(timezone.utc).isoformat()
        if self._singles:
            self._cancel_single(execution_id)
        with buckets.lock:
            before = buckets.where.get(execution_id)
            if before == instant:  # armed again: it goes last, as in a queue of armings
                bucket = buckets.by_instant[instant]
                del bucket[execution_id]
                bucket[execution_id] = None
                return
            if before is not None:
                self._leave_bucket(buckets, execution_id, before)
            buckets.where[execution_id] = instant
            same = buckets.by_instant.get(instant)
            if same is not None:
                same[execution_id] = None
                return
            buckets.by_instant[instant] = {execution_id: None}
            self._add_job(
                _fire_bucket_async if self._job_func is _fire_job_async else _fire_bucket,
                due_at,
                (instant, self.name),
                BUCKET_ID_PREFIX + instant,
                f"prana resume at {instant}",
            )

    def _leave_bucket(self, buckets: _Buckets, execution_id: str, instant: str) -> None:
        """Take ``execution_id`` out of its bucket (the caller holds the buckets' lock)."""
        del buckets.where[execution_id]
        bucket = buckets.by_instant[instant]
        del bucket[execution_id]
        if not bucket:
            del buckets.by_instant[instant]
            self._remove_one(BUCKET_ID_PREFIX + instant)

    def cancel(self, execution_id: str) -> None:
        """Remove the job of ``execution_id``; a job already gone (fired or unknown) is ignored."""
        buckets = self._buckets
        if buckets is not None:
            with buckets.lock:
                instant = buckets.where.get(execution_id)
                if instant is not None:
                    self._leave_bucket(buckets, execution_id, instant)
            if not self._singles:
                return
        self._cancel_single(execution_id)

    def _cancel_single(self, execution_id: str) -> None:
        while self._remove_one(job_id(execution_id)):
            pass  # a stopped APScheduler may hold several queued jobs with one id

    def _remove_one(self, job: str) -> bool:
        try:
            self._scheduler.remove_job(job, jobstore=self._alias)
        except JobLookupError:
            return False
        return True

    def shutdown(self) -> None:
        """Stop firing and shut the scheduler down; alarms firing now finish first.

        Waiting for them is what lets a runner close its store right after (a worker's
        graceful stop); an alarm that calls ``shutdown`` itself is not waited for, and
        neither are the jobs of the asyncio mode (they run on the caller's loop). Pending
        jobs are removed, except in a persistent ``jobstore=``, where keeping them is the
        point (a runner re-arms from its store anyway, replacing them).
        """
        self._unregister()
        if self._jobstore is None:
            for job in self._scheduler.get_jobs(jobstore=self._alias):
                if job.id.startswith(JOB_ID_PREFIX):
                    self._cancel_single(job.id[len(JOB_ID_PREFIX) :])
                elif job.id.startswith(BUCKET_ID_PREFIX):
                    self._remove_one(job.id)
        if self._started_scheduler and self._scheduler.running:
            wait = not isinstance(self._scheduler, AsyncIOScheduler) and not getattr(
                _IN_JOB, "active", False
            )
            stop_scheduler(self._scheduler, wait=wait)
            self._stopped_scheduler = True
        self._started_scheduler = False

    def _unregister(self) -> None:
        with _FIRES_LOCK:
            if self._started:
                _FIRES.pop(self.name, None)
                if self._buckets is not None:
                    _BUCKETS.pop(self.name, None)
                    self._buckets = None
                self._started = False
