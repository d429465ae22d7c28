"""``prana worker``: resume due executions until stopped, alone or as one of several."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from scheduling._cli._common import (
    EXIT_OK,
    PROCRASTINATE_NEEDS_POSTGRES,
    WORKER_POLL_SECONDS,
    CLIError,
    load_actions,
    make_runner,
    open_store,
    postgres_dsn,
    postgres_schema,
    where,
)

if TYPE_CHECKING:
    import argparse

    from prana import Registry
    from scheduling._cli._common import AddCommand
    from scheduling._console import ConsoleView
    from scheduling._runner import Runner
    from scheduling.abc import ExecutionStore


def register(add: AddCommand) -> None:
    """Add ``worker`` to the parser."""
    worker = add("worker", "resume due executions until Ctrl-C")
    worker.add_argument("--actions", help="module (or .py file) registering your actions")
    worker.add_argument("--once", action="store_true", help="resume what is due now, then exit")
    worker.add_argument(
        "--poll",
        type=float,
        default=WORKER_POLL_SECONDS,
        help="seconds between checks for work left due by other processes (default 1)",
    )
    worker.add_argument(
        "--scheduler",
        choices=("apscheduler", "procrastinate"),
        default="apscheduler",
        help="procrastinate: several workers share alarms in PostgreSQL (needs --postgres)",
    )
    worker.set_defaults(handler=_cmd_worker)


def _cmd_worker(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    if args.scheduler == "procrastinate" and postgres_dsn(args) is None:
        raise CLIError(PROCRASTINATE_NEEDS_POSTGRES)
    registry = load_actions(args.actions)
    store = open_store(args, must_exist=False)
    view = ConsoleView()
    try:
        runner = make_runner(registry, store, view, recover=True)
        if args.once:
            handled = runner.run_due()
            print(f"resumed {len(handled)} due execution(s)")
            return EXIT_OK
        if args.scheduler == "procrastinate":
            return _procrastinate_worker(args, registry, store, view)
        stop = threading.Event()
        with runner, view.live():
            print(f"worker on {where(args)}: resuming due executions (Ctrl-C to stop)")
            while not stop.wait(args.poll):
                runner.rearm_due()
    finally:
        store.close()
    return EXIT_OK  # pragma: no cover - the loop only ends by Ctrl-C


def _procrastinate_worker(
    args: argparse.Namespace, registry: Registry, store: ExecutionStore, view: ConsoleView
) -> int:
    """One of several workers: alarms live in PostgreSQL (procrastinate), each fires once."""
    dsn = postgres_dsn(args)
    if dsn is None:
        raise CLIError(PROCRASTINATE_NEEDS_POSTGRES)
    from scheduling.adapters.procrastinate import ProcrastinateScheduler

    scheduler = ProcrastinateScheduler(dsn, schema=postgres_schema(args), run_in_thread=False)
    stop = threading.Event()
    with make_runner(registry, store, view, scheduler, recover=True) as runner, view.live():
        # Work another process left due without an alarm (a `prana run` killed in backoff)
        # is re-armed every --poll seconds, as the APScheduler worker does.
        rearm = threading.Thread(
            target=rearm_until, args=(runner, stop, args.poll), name="prana-rearm", daemon=True
        )
        rearm.start()
        print("worker on PostgreSQL (procrastinate): resuming due executions (Ctrl-C to stop)")
        try:
            scheduler.run_worker()
        finally:
            stop.set()
            rearm.join(timeout=5)
    return EXIT_OK


def rearm_until(runner: Runner, stop: threading.Event, every: float) -> None:
    """Re-arm due executions every ``every`` seconds until ``stop`` is set; log failures."""
    while not stop.wait(every):
        try:
            runner.rearm_due()
        except Exception:
            logging.getLogger("prana").exception("re-arming due executions failed")
