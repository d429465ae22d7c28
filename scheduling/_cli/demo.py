"""``prana demo``: the bundled flaky-API demo, retried with backoff."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from prana import Registry
from scheduling._cli._common import EXIT_OK, db_path, make_runner, open_store, postgres_dsn

if TYPE_CHECKING:
    import argparse

    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``demo`` to the parser."""
    demo = add(
        "demo",
        "run the bundled demo: a flaky API retried with backoff",
        # Unlike the other commands, the demo writes nowhere unless told to.
        db_help="SQLite database to keep the executions in (default: $PRANA_DB, else in "
        "memory only, nothing written)",
    )
    demo.set_defaults(handler=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from scheduling import _demo
    from scheduling._console import ConsoleView
    from scheduling.stores.memory import MemoryStore

    registry = Registry()
    _demo.register(registry)
    keep = args.db or os.environ.get("PRANA_DB") or postgres_dsn(args)
    store: Any = open_store(args, must_exist=False) if keep else MemoryStore()
    view = ConsoleView()
    print("prana demo: three calls to a flaky API, retried with exponential backoff")
    try:
        with make_runner(registry, store, view) as runner, view.live():
            ids = [runner.start(_demo.workflow(), data) for data in _demo.DEMO_INPUTS]
            finals = [runner.wait(execution_id, timeout=60) for execution_id in ids]
    finally:
        store.close()
    print(view.summary())
    for execution in finals:
        print(f"execution {execution.id}: {execution.status.value}")
    if not keep:
        print("(kept in memory only: nothing was written; pass --db FILE to keep the executions)")
    elif postgres_dsn(args) is not None:
        print("executions kept in PostgreSQL: see them with prana list --postgres DSN")
    else:
        path = db_path(args)
        print(f"executions kept in {path}: see them with prana list --db {path}")
    return EXIT_OK
