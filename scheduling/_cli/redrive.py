"""``prana redrive``: take a failed execution (a dead letter) up again.

``prana list --status failed`` lists the dead letters; ``prana redrive ID`` runs the failed
node again with its input rebuilt fresh (``--node KEY`` starts from a node that leads to
it, ``--reset-attempts`` gives the node its retry policy afresh), then the rest of the
workflow, in this process: it waits out retries like ``prana run``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prana import ExecutionStatus
from scheduling._cli._common import (
    add_lease,
    add_logging,
    check_seconds,
    check_stored_actions,
    finish,
    load_actions,
    make_runner,
    open_store,
    resolve_id,
)

if TYPE_CHECKING:
    import argparse

    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``redrive`` to the parser."""
    redrive = add(
        "redrive",
        "run a failed execution again from its failed node (list them: list --status failed)",
    )
    redrive.add_argument("id", help="the execution id, or a unique prefix of it")
    redrive.add_argument(
        "--node", metavar="KEY", help="start from this node (one that leads to the failed node)"
    )
    redrive.add_argument(
        "--reset-attempts",
        action="store_true",
        help="restart the node's attempt count and retry budget (default: they carry on)",
    )
    redrive.add_argument("--actions", help="module (or .py file) registering your actions")
    add_lease(redrive)
    add_logging(redrive, console=True)
    redrive.set_defaults(handler=_cmd_redrive)


def _cmd_redrive(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    check_seconds("--lease", args.lease)
    registry = load_actions(args.actions)
    store = open_store(args, must_exist=True)
    view = ConsoleView()
    try:
        execution_id = resolve_id(store, args.id)
        check_stored_actions(
            store, execution_id, registry, args.actions, when=ExecutionStatus.FAILED
        )
        with make_runner(registry, store, view, lease_seconds=args.lease) as runner, view.live():
            runner.redrive(execution_id, args.node, reset_attempts=args.reset_attempts)
            return finish(runner, execution_id, view)
    finally:
        store.close()
