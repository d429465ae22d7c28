"""The worker side of ``ProcrastinateScheduler``: running procrastinate workers until stopped.

``ServingMixin`` runs one procrastinate worker after another (in a thread of its own or in
the caller's, ``run_worker``) until ``shutdown()`` or a signal: a worker that loses the
database is logged in one line and replaced after a backoff pause, and as often as it
beats every live worker takes up the jobs of silent ones (``recover_stalled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
import psycopg
from procrastinate.exceptions import ConnectorException
from procrastinate.worker import Worker

from scheduling._errors import StoreError
from scheduling.adapters._common import SchedulerStateError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from procrastinate import App
    from procrastinate.app import WorkerOptions

    from scheduling.abc import Fire, FireMany

__all__ = [
    "FIRE_KEY",
    "FIRE_MANY_KEY",
    "SCHEDULER_KEY",
    "TASK_NAME",
    "ServingMixin",
    "broken",
    "one_line",
    "taken_over",
]

logger = logging.getLogger("scheduling.adapters.procrastinate")

_T = TypeVar("_T")

FIRE_KEY = "prana_fire"
"""Where the worker's ``additional_context`` holds the fire callback (and the scheduler)."""
FIRE_MANY_KEY = "prana_fire_many"
SCHEDULER_KEY = "prana_scheduler"

_OWN_DOING = (
    "SELECT id, queueing_lock FROM procrastinate_jobs WHERE status = 'doing'"
    " AND queue_name = %s AND task_name = %s AND worker_id = %s ORDER BY id"
)
"""The jobs a worker holds, as the database says (``recover_orphans``)."""

TASK_NAME = "prana_resume"
"""The name of the one procrastinate task every alarm is a job of."""

_RECONNECT_FIRST_PAUSE_SECONDS = 0.5
_RECONNECT_MAX_SECONDS = 30.0


def one_line(exc: BaseException) -> str:
    """An error (or, for a procrastinate wrapper, its driver cause) on one line."""
    cause = exc.__cause__ if isinstance(exc, ConnectorException) and exc.__cause__ else exc
    if isinstance(cause, psycopg.Error) and cause.diag.message_primary:
        return cause.diag.message_primary
    text = "; ".join(line.strip() for line in str(cause).splitlines() if line.strip())
    return text or type(cause).__name__


def broken(exc: BaseException, conn: psycopg.Connection[Any] | None) -> bool:
    """Whether ``exc`` came from a connection the server (or the network) ended."""
    cause = exc.__cause__ if isinstance(exc, ConnectorException) else exc
    return (
        isinstance(cause, psycopg.OperationalError)
        and conn is not None
        and (conn.broken or conn.closed)
    )


_WORKER_ROW_GONE = "procrastinate_jobs_worker_id_fkey"
"""The constraint a worker breaks when it takes a job after the others removed its row."""


def taken_over(exc: BaseException) -> bool:
    """Whether ``exc`` says the other workers removed this one's row (it was silent too long).

    Stalled-job recovery deletes the row of a worker silent longer than
    ``stalled_after_seconds`` (a frozen process); that worker learns it when it next takes
    a job, which then names a worker id that no longer exists.
    """
    cause = exc.__cause__ if isinstance(exc, ConnectorException) else exc
    return (
        isinstance(cause, psycopg.errors.ForeignKeyViolation)
        and cause.diag.constraint_name == _WORKER_ROW_GONE
    )


async def _wait_for_event(event: asyncio.Event, seconds: float) -> None:
    """Return when ``event`` is set or ``seconds`` have passed, whichever comes first."""
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiting}, timeout=seconds)
    finally:
        waiting.cancel()


@attrs.define
class _ServeState:
    """How the current procrastinate worker of a ``ProcrastinateScheduler`` is doing."""

    up: bool
    """A worker came up once: later failures are retried, not raised."""
    reached_database: bool = False
    """The current worker reached the database (so the next start waits only briefly)."""
    trouble: str | None = None
    """Why the current worker stopped on its own, if it said."""


class _Worker(Worker):
    """procrastinate's worker, restarted when it cannot record the end of a job.

    A job whose end could not be written (the connection went away at that moment) would
    stay ``doing`` under a worker that still beats, holding its execution's lock for as
    long as the worker lives. Stopping the worker instead (``ProcrastinateScheduler``
    starts a new one) unregisters it, and the job is then taken up like any job of a
    silent worker.
    """

    def __init__(self, *, state: _ServeState, **options: Any) -> None:
        super().__init__(**options)
        self.prana_state = state

    async def _persist_job_status(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super()._persist_job_status(*args, **kwargs)
        except ConnectorException as error:
            self.prana_state.trouble = (
                f"could not record the end of a job ({one_line(error)}): the job fires again"
            )
            self.stop()  # type: ignore[no-untyped-call]


class ServingMixin:
    """Runs the procrastinate worker of a ``ProcrastinateScheduler`` (its base class)."""

    app: App
    name: str
    queue: str
    run_in_thread: bool
    concurrency: int
    listen: bool
    poll_interval: float
    shutdown_timeout: float
    stalled_after_seconds: float
    worker_options: dict[str, Any]
    stopped_by: signal.Signals | None
    _fire: Fire | None
    _fire_many: FireMany | None
    _lock: threading.Lock
    _loop: asyncio.AbstractEventLoop | None
    _worker: Worker | None
    _wake: asyncio.Event | None
    _stopping: threading.Event

    _batch_held: set[int]

    def recover_stalled(self) -> int:
        """Take up the jobs that silent workers left ``doing`` (the scheduler defines it)."""
        raise NotImplementedError

    def _run(self, what: str, body: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """``body`` on a connection of the scheduler's pool (the scheduler defines it)."""
        raise NotImplementedError

    def _on(self, conn: psycopg.Connection[Any], *, own: bool = False) -> Any:
        """A savepoint that sees the scheduler's tables (the scheduler defines it)."""
        raise NotImplementedError

    def _take_up(self, conn: psycopg.Connection[Any], jobs: Sequence[Any]) -> int:
        """Put jobs back to ``todo`` or drop them (the scheduler defines it)."""
        raise NotImplementedError

    def own_doing(self, worker_id: int) -> set[int]:
        """The jobs of this queue ``doing`` under ``worker_id`` in the database."""

        def read(conn: psycopg.Connection[Any]) -> set[int]:
            rows = conn.execute(_OWN_DOING, (self.queue, TASK_NAME, worker_id)).fetchall()
            return {int(row[0]) for row in rows}

        return self._run("reading this worker's jobs", read)

    def recover_orphans(self, worker_id: int, job_ids: set[int]) -> int:
        """Take up ``job_ids``: jobs ``doing`` under this live worker that it does not run.

        A crash of the server can take back the commit that ended a job (the worker's
        bookkeeping commits without waiting for the disk) while the step's save, which
        waits, survives: the job is ``doing`` again under a worker that reconnected and
        beats, so ``recover_stalled`` never takes it, and it holds its execution's lock
        (the next alarm is never fetched) for as long as that worker lives. The worker
        knows which jobs it runs (``_recover_while`` finds the others): each goes
        back to ``todo`` or is dropped, as a stalled job is. How many.
        """
        if not job_ids:
            return 0

        def recover(conn: psycopg.Connection[Any]) -> int:
            with self._on(conn, own=True):
                rows = conn.execute(_OWN_DOING, (self.queue, TASK_NAME, worker_id)).fetchall()
            return self._take_up(conn, [row for row in rows if int(row[0]) in job_ids])

        taken = self._run("recovering this worker's orphaned jobs", recover)
        if taken:
            logger.warning(
                "took up %d alarm(s) left running under this worker though it does not run "
                "them (their end was lost, e.g. in a crash of the database); they fire again",
                taken,
            )
        return taken

    def run_worker(self, on_ready: Callable[[], None] | None = None) -> signal.Signals | None:
        """Run the worker in the calling thread until SIGINT, SIGTERM or ``shutdown()``.

        Needs ``run_in_thread=False`` and ``start(fire)`` first (``with runner:`` does it).
        Signal handlers are installed only in the main thread; ``shutdown()`` from another
        thread also stops it. ``on_ready`` is called in this thread once they are: say
        "running" there, not before the call, or a SIGTERM sent on that word may find
        Python's default handler and end the process without a graceful stop. Alarms
        running when it stops finish first (up to ``shutdown_timeout``). Returns the
        signal that stopped it (also ``stopped_by``), or ``None`` after ``shutdown()``.
        Losing the database does not end it: it logs one line and starts over with backoff.
        """
        fire = self._fire
        if fire is None:
            raise SchedulerStateError(
                "ProcrastinateScheduler.run_worker: call start(fire) first "
                "(entering `with runner:` does)"
            )
        if self.run_in_thread:
            raise SchedulerStateError(
                "ProcrastinateScheduler.run_worker: this scheduler already runs its worker in a "
                "thread; create it with run_in_thread=False to run the worker here"
            )
        self.stopped_by = None
        main = threading.current_thread() is threading.main_thread()
        asyncio.run(self._serve(fire, None, install_signal_handlers=main, on_ready=on_ready))
        return self.stopped_by

    def _serve_in_thread(
        self, fire: Fire, ready: threading.Event, failure: list[BaseException]
    ) -> None:
        try:
            asyncio.run(self._serve(fire, ready, install_signal_handlers=False))
        except BaseException as error:  # reported to start(), or logged once running
            if ready.is_set():
                logger.exception("the procrastinate worker %s stopped", self.name)
            else:
                failure.append(error)
        finally:
            ready.set()

    def _stop_in_loop(self) -> None:
        """Stop the worker and any backoff pause; runs on the worker's event loop."""
        self._stopping.set()
        if self._wake is not None:
            self._wake.set()
        worker = self._worker
        if worker is not None:
            worker.stop()  # type: ignore[no-untyped-call]

    def _on_signal(self, signum: signal.Signals) -> None:
        if self.stopped_by is None:
            self.stopped_by = signum
        logger.debug("the procrastinate worker %s stops (%s)", self.name, signum.name)
        self._stop_in_loop()

    async def _serve(
        self,
        fire: Fire,
        ready: threading.Event | None,
        *,
        install_signal_handlers: bool,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        """Run procrastinate workers one after another until stopped.

        A failure before the first worker is up is raised (``start`` reports it); any later
        one (the database went away) is logged in one line, and a new worker starts after
        a pause: 0.5 s after a worker that reached the database, then doubling up to
        ``_RECONNECT_MAX_SECONDS`` while none does. A worker the others took for dead
        (``taken_over``) says so and starts over at once.
        """
        loop = asyncio.get_running_loop()
        # procrastinate runs each sync job in the loop's default executor, whose size
        # (min(32, cores + 4)) would otherwise cap ``concurrency`` without a word.
        loop.set_default_executor(
            ThreadPoolExecutor(
                max(self.concurrency + 2, min(32, (os.cpu_count() or 1) + 4)),
                thread_name_prefix=f"prana-jobs-{self.name}",
            )
        )
        self._wake = asyncio.Event()
        with self._lock:
            self._loop = loop
        signals = (signal.SIGINT, signal.SIGTERM) if install_signal_handlers else ()
        for signum in signals:
            loop.add_signal_handler(signum, self._on_signal, signum)
        if on_ready is not None:
            on_ready()
        state = _ServeState(up=ready is None)
        pause = _RECONNECT_FIRST_PAUSE_SECONDS
        try:
            while not self._stopping.is_set():
                state.reached_database = False
                state.trouble = None
                try:
                    await self._serve_once(fire, ready, state)
                except Exception as error:
                    if not state.up:
                        raise
                    if taken_over(error):
                        logger.warning(
                            "the procrastinate worker %s was silent longer than its lease "
                            "(stalled_after_seconds, --lease) of %g s and the others took its "
                            "alarms over; it registers again",
                            self.name,
                            self.stalled_after_seconds,
                        )
                        pause = _RECONNECT_FIRST_PAUSE_SECONDS
                        continue  # the database is fine: no pause
                    state.trouble = state.trouble or f"lost the database ({one_line(error)})"
                if self._stopping.is_set():
                    break
                if state.reached_database:
                    pause = _RECONNECT_FIRST_PAUSE_SECONDS
                logger.warning(
                    "the procrastinate worker %s %s; starting over in %.1fs",
                    self.name,
                    state.trouble or "stopped (the database is likely unreachable)",
                    pause,
                )
                await _wait_for_event(self._wake, pause)
                pause = min(2 * pause, _RECONNECT_MAX_SECONDS)
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)
            with self._lock:
                self._loop = None
            self._wake = None

    async def _serve_once(
        self, fire: Fire, ready: threading.Event | None, state: _ServeState
    ) -> None:
        """One procrastinate worker, from opening the app's connections until it stops."""
        options = cast(
            "WorkerOptions",
            {
                "queues": [self.queue],
                "name": self.name,
                "concurrency": self.concurrency,
                "listen_notify": self.listen,
                "fetch_job_polling_interval": self.poll_interval,
                "abort_job_polling_interval": max(self.poll_interval, 5.0),
                "shutdown_graceful_timeout": self.shutdown_timeout,
                "delete_jobs": "successful",
                "update_heartbeat_interval": self.stalled_after_seconds / 3,
                "stalled_worker_timeout": self.stalled_after_seconds,
                **self.worker_options,
                "install_signal_handlers": False,  # ours stop the backoff pause too
                "additional_context": {
                    **self.worker_options.get("additional_context", {}),
                    FIRE_KEY: fire,
                    FIRE_MANY_KEY: self._fire_many,
                    SCHEDULER_KEY: self,
                },
            },
        )
        async with self.app.open_async():
            self.app.perform_import_paths()  # type: ignore[no-untyped-call]
            worker = _Worker(app=self.app, state=state, **options)
            running = worker.run()  # type: ignore[no-untyped-call]
            run = asyncio.create_task(running, name=f"procrastinate worker {self.name}")
            await asyncio.sleep(0)  # run() has begun and reset its stop flag: stop() now holds
            with self._lock:
                self._worker = worker
            if self._stopping.is_set():
                worker.stop()  # type: ignore[no-untyped-call]
            recovering = asyncio.create_task(
                self._recover_while(run, state, worker), name=f"prana recovery {self.name}"
            )
            if ready is not None:
                ready.set()
            state.up = True
            try:
                await run
            finally:
                with self._lock:
                    self._worker = None
                recovering.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await recovering

    def _running(self, worker: Worker) -> set[int]:
        """The jobs ``worker`` runs now: procrastinate's own, and those its batches took.

        Read on the worker's event loop, where procrastinate changes its running set."""
        running = {context.job.id for context in worker._running_jobs.values()}
        with self._lock:
            running.update(self._batch_held)
        return {job_id for job_id in running if job_id is not None}

    async def _recover_while(
        self, run: asyncio.Task[Any], state: _ServeState, worker: Worker
    ) -> None:
        """Take up stalled jobs, and this worker's orphans, as often as it beats, until
        ``run`` ends.

        An orphan is a job ``doing`` under this worker in the database that it does not run
        (``recover_orphans`` says how one comes about). A job is taken (or ended) in the
        database a moment before the worker notes it, so only a job found orphaned by two
        rounds in a row is taken up: the same job cannot be in that moment twice.

        A failed round is logged and the next beat tries again: nothing but the worker's
        end stops this loop, or a live worker would never again take up a dead one's jobs.
        Rounds run in a thread of their own: procrastinate runs sync jobs in the loop's
        default executor, and long alarms there must not hold up taking a dead worker's.
        """
        every = self.stalled_after_seconds / 3
        loop = asyncio.get_running_loop()
        thread = ThreadPoolExecutor(1, thread_name_prefix=f"prana-recovery-{self.name}")
        suspects: set[int] = set()
        try:
            while not run.done():
                try:
                    await loop.run_in_executor(thread, self.recover_stalled)
                    worker_id = worker.worker_id
                    if worker_id is not None:
                        found = await loop.run_in_executor(thread, self.own_doing, worker_id)
                        orphans = found - self._running(worker)
                        confirmed, suspects = orphans & suspects, orphans - suspects
                        if confirmed:
                            await loop.run_in_executor(
                                thread, self.recover_orphans, worker_id, confirmed
                            )
                except StoreError as error:
                    logger.warning("the procrastinate worker %s: %s", self.name, error)
                except Exception:
                    logger.exception(
                        "the procrastinate worker %s: recovering stalled jobs failed; it "
                        "tries again at its next beat",
                        self.name,
                    )
                else:
                    state.reached_database = True
                await asyncio.wait({run}, timeout=every)
        finally:
            thread.shutdown(wait=False)  # a round under way ends on its own
