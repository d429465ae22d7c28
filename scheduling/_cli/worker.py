"""``prana worker``: resume due executions until stopped, alone or as one of several.

SIGTERM stops a worker gracefully (alarms firing finish first), prints one line and exits
with 0; Ctrl-C (SIGINT) does the same and exits with 130. Losing the database is logged in
one line and the worker carries on. Logs go to stderr, one line per record.

A worker cannot know at start which workflows it will meet (other processes start new
ones while it runs), so ``--actions`` is checked when an execution comes due: one it
cannot run (its actions or conditions are not registered here) stays suspended for a
worker that can, and the worker says so on stderr, once per workflow version, naming the
node types it lacks and ``--actions``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from datetime import timezone
from typing import TYPE_CHECKING

from prana import ExecutionStatus
from scheduling._cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    PROCRASTINATE_NEEDS_POSTGRES,
    WORKER_POLL_SECONDS,
    CLIError,
    add_lease,
    add_logging,
    add_max_interruptions,
    check_max_interruptions,
    check_seconds,
    load_actions,
    make_runner,
    open_store,
    postgres_dsn,
    postgres_schema,
    where,
)
from scheduling._errors import StoreError
from scheduling._health import StoreHealth

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prana import Registry
    from scheduling._cli._common import AddCommand
    from scheduling._console import ConsoleView
    from scheduling._runner import Runner
    from scheduling.abc import ExecutionStore


def register(add: AddCommand) -> None:
    """Add ``worker`` to the parser."""
    worker = add("worker", "resume due executions until Ctrl-C")
    worker.add_argument(
        "--actions",
        help="module (or .py file) registering your actions; an execution needing actions "
        "the worker lacks stays suspended, said once per workflow version on stderr",
    )
    worker.add_argument("--once", action="store_true", help="resume what is due now, then exit")
    worker.add_argument(
        "--poll",
        type=float,
        default=WORKER_POLL_SECONDS,
        help="seconds between checks for work left due by other processes (default 1)",
    )
    add_lease(
        worker,
        "seconds a worker may stay silent (killed, cut off) before the others take up the "
        "executions and (procrastinate) the alarms it was running (default 30)",
    )
    add_max_interruptions(worker)
    worker.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        help=f"procrastinate: alarms one worker fires at once (default {CONCURRENCY})",
    )
    worker.add_argument(
        "--batch",
        type=int,
        default=BATCH,
        help=f"procrastinate: alarms resumed as one batch, a job's own and others due; the job "
        f"goes on batch after batch while alarms are due (default {BATCH}; 1: one per job)",
    )
    worker.add_argument(
        "--async-commits",
        action="store_true",
        help="procrastinate: a batch's commits do not wait for PostgreSQL's disk (faster; "
        "a crash of the PostgreSQL server may take back its last moment of transitions, "
        "which then run again)",
    )
    worker.add_argument(
        "--fetch-poll",
        type=float,
        default=FETCH_POLL_SECONDS,
        help="procrastinate: seconds between looks for alarms that came due (default "
        f"{FETCH_POLL_SECONDS:g}; an alarm fires at most this late when the worker is idle)",
    )
    worker.add_argument(
        "--scheduler",
        choices=("apscheduler", "procrastinate"),
        default="apscheduler",
        help="procrastinate: several workers share alarms in PostgreSQL (needs --postgres)",
    )
    add_logging(worker, console=True)
    worker.set_defaults(handler=_cmd_worker)


CONCURRENCY = 8
"""Alarms a procrastinate worker fires at once: each waits mostly on the database (its
save's commit), so several in flight let the server flush their commits together."""
BATCH = 32
"""Alarms one procrastinate job fires: its own, then due ones it takes itself, so a burst
does not pay procrastinate's per-job round trips and hand-offs for every execution."""
FETCH_POLL_SECONDS = 0.05
"""procrastinate notifies a worker when a job is deferred, never when a scheduled one
comes due: a worker looks for due jobs this often (one cheap query when idle)."""
_ONCE_LIMIT = 1000
"""The most due executions ``--once`` resumes (the rest wait for the next run)."""
_LEFT_AS_STORED = (
    "could not be resumed, left as stored (said above; prana show ID, prana cancel ID)"
)
"""How ``--once`` reports due executions it found but could not resume (each is logged)."""
_STOPPED = "worker stopped ({}): suspended executions stay in the store for the next worker"


def _cmd_worker(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    check_seconds("--poll", args.poll)
    check_seconds("--lease", args.lease)
    check_seconds("--fetch-poll", args.fetch_poll)
    check_max_interruptions(args.max_interruptions)
    if not 1 <= args.concurrency <= 1000:
        raise CLIError(f"--concurrency {args.concurrency}: use a whole number from 1 to 1000")
    if not 1 <= args.batch <= 10_000:
        raise CLIError(f"--batch {args.batch}: use a whole number from 1 to 10000")
    if args.scheduler == "procrastinate" and postgres_dsn(args) is None:
        raise CLIError(PROCRASTINATE_NEEDS_POSTGRES)
    if args.async_commits and args.scheduler != "procrastinate":
        raise CLIError(
            "--async-commits applies to --scheduler procrastinate on PostgreSQL (a batch's "
            "commits); drop it, or add --scheduler procrastinate"
        )
    registry = load_actions(args.actions)
    store = open_store(args, must_exist=False)
    view = _console_view(ConsoleView)
    try:
        runner = make_runner(
            registry,
            store,
            view,
            recover=True,
            lease_seconds=args.lease,
            max_interruptions=args.max_interruptions,
        )
        if args.once:
            due = {eid for eid, _ in store.find_due(runner.clock(), limit=_ONCE_LIMIT)}
            handled = runner.run_due(limit=_ONCE_LIMIT)
            left = len(due - set(handled))
            print(
                f"resumed {len(handled)} due execution(s)"
                + (f"; {left} {_LEFT_AS_STORED}" if left else "")
                + _leased_note(store, runner)
            )
            return EXIT_FAILED if left else EXIT_OK
        if args.scheduler == "procrastinate":
            return _procrastinate_worker(args, registry, store, view)
        stop = threading.Event()
        with _stop_on_sigterm(stop) as signalled, runner, view.live():
            print(f"worker on {where(args)}: resuming due executions (Ctrl-C to stop)")
            rearm_until(runner, stop, args.poll)
        print(_STOPPED.format(signalled[0].name))
        return EXIT_OK
    finally:
        store.close()


def _console_view(make: type[ConsoleView]) -> ConsoleView:
    """The worker's view: rich on a terminal, plain lines (the same text) anywhere else.

    Off a terminal rich prints no colours and no live status, yet still renders every line
    (about 0.4 ms each, and a burst of retries prints two per execution: as much as the
    resume itself); writing the text, flushed line by line, is what it amounts to there.
    """
    if sys.stdout.isatty():
        return make()

    def write(text: str) -> None:
        out = sys.stdout  # looked up each time: main() may have wrapped it
        out.write(text + "\n")
        out.flush()

    return make(write)


def _leased_note(store: ExecutionStore, runner: Runner) -> str:
    """Say which running executions --once left alone because their lease has not ended.

    A `prana run` killed mid-action leaves its execution `running` until its lease ends;
    without this a worker run right after the crash said only "resumed 0", and nothing
    told the operator to come back once the lease is over.
    """
    now = runner.clock()
    leased = [
        row.due_at
        for row in store.list(ExecutionStatus.RUNNING, limit=1000)
        if row.due_at is not None and row.due_at > now
    ]
    if not leased:
        return ""
    until = min(leased).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return (
        f"; {len(leased)} running under a lease, the first ending {until} UTC (if its "
        "process died, a worker takes it up once the lease has ended)"
    )


@contextlib.contextmanager
def _stop_on_sigterm(stop: threading.Event) -> Iterator[list[signal.Signals]]:
    """While inside, SIGTERM sets ``stop`` (and is recorded in the list yielded)."""
    signalled: list[signal.Signals] = []

    def on_sigterm(signum: int, frame: object) -> None:
        del frame
        signalled.append(signal.Signals(signum))
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield signalled
    finally:
        signal.signal(signal.SIGTERM, previous)


def _procrastinate_worker(
    args: argparse.Namespace, registry: Registry, store: ExecutionStore, view: ConsoleView
) -> int:
    """One of several workers: alarms live in PostgreSQL (procrastinate), each fires once."""
    dsn = postgres_dsn(args)
    if dsn is None:
        raise CLIError(PROCRASTINATE_NEEDS_POSTGRES)
    from scheduling.adapters.procrastinate import ProcrastinateScheduler
    from scheduling.stores.postgres import PostgresStore

    if isinstance(store, PostgresStore) and store.max_connections < args.concurrency + 2:
        # Each alarm firing holds a connection for its batch's store group (GroupingStore),
        # and the re-arm loop needs one: a pool smaller than that would make them queue.
        store.close()
        store.max_connections = args.concurrency + 2
    if isinstance(store, PostgresStore) and args.async_commits:
        store.group_commits = "async"
    scheduler = ProcrastinateScheduler(
        dsn,
        schema=postgres_schema(args),
        run_in_thread=False,
        stalled_after_seconds=args.lease,
        concurrency=args.concurrency,
        batch=args.batch,
        poll_interval=args.fetch_poll,
        listen=True,
        max_connections=max(4, args.concurrency),
        prefetch=store.prefetch if isinstance(store, PostgresStore) else None,
    )
    stop = threading.Event()
    with (
        make_runner(
            registry,
            store,
            view,
            scheduler,
            recover=True,
            lease_seconds=args.lease,
            max_interruptions=args.max_interruptions,
        ) as runner,
        view.live(),
    ):
        # Work another process left due without an alarm (a `prana run` killed in backoff)
        # is re-armed every --poll seconds, as the APScheduler worker does.
        rearm = threading.Thread(
            target=rearm_until, args=(runner, stop, args.poll), name="prana-rearm", daemon=True
        )
        rearm.start()
        try:
            # The line is said once SIGTERM stops the worker gracefully: a supervisor may
            # stop it the moment it reads it.
            stopped_by = scheduler.run_worker(on_ready=_say_running)
        finally:
            stop.set()
            rearm.join(timeout=5)
    if stopped_by is signal.SIGINT:
        raise KeyboardInterrupt  # main() prints its one line and exits with 130
    print(_STOPPED.format(stopped_by.name if stopped_by is not None else "shut down"))
    return EXIT_OK


def _say_running() -> None:
    print(
        "worker on PostgreSQL (procrastinate): resuming due executions (Ctrl-C to stop)",
        flush=True,
    )


def rearm_until(runner: Runner, stop: threading.Event, every: float) -> None:
    """Re-arm due executions every ``every`` seconds until ``stop`` is set.

    A store error (the database went away) is logged once, the rounds failing after it
    counted, and said once more with the count when a round works again; anything else is
    logged with its traceback (a bug), and the loop goes on.
    """
    logger = logging.getLogger("scheduling.worker")
    health = StoreHealth(
        logger,
        f"re-arming due executions failed: %s; trying again every {every:g}s (further "
        "failures are counted, not logged)",
        "re-arming due executions works again, after %d failed %s",
        "rounds",
    )
    while not stop.wait(every):
        try:
            runner.rearm_due()
        except StoreError as error:
            health.failed(error)
        except Exception:
            logger.exception("re-arming due executions failed")
        else:
            health.worked()
