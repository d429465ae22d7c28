"""``prana deliver`` and ``prana cancel``: move one waiting execution on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prana import ExecutionStatus
from scheduling._cli._common import (
    EXIT_OK,
    add_lease,
    add_logging,
    check_seconds,
    check_stored_actions,
    finish,
    load_actions,
    make_runner,
    open_store,
    parse_json,
    resolve_id,
)

if TYPE_CHECKING:
    import argparse

    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``deliver`` and ``cancel`` to the parser."""
    deliver = add("deliver", "deliver resume data to an execution waiting on a webhook")
    deliver.add_argument("id", help="the execution id, or a unique prefix of it")
    deliver.add_argument("--data", required=True, help="the resume data, as JSON")
    deliver.add_argument("--actions", help="module (or .py file) registering your actions")
    add_logging(deliver, console=True)
    add_lease(deliver)
    deliver.set_defaults(handler=_cmd_deliver)

    cancel = add("cancel", "cancel a suspended execution")
    cancel.add_argument("id", help="the execution id, or a unique prefix of it")
    cancel.add_argument("--reason", help="why (kept in the record)")
    cancel.add_argument(
        "--actions", help="module registering your actions (to resume a cancelled child's parent)"
    )
    cancel.set_defaults(handler=_cmd_cancel)


def _cmd_deliver(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    check_seconds("--lease", args.lease)
    data = parse_json(args.data, "--data")
    registry = load_actions(args.actions)
    store = open_store(args, must_exist=True)
    view = ConsoleView()
    try:
        execution_id = resolve_id(store, args.id)
        check_stored_actions(
            store, execution_id, registry, args.actions, when=ExecutionStatus.SUSPENDED
        )
        with make_runner(registry, store, view, lease_seconds=args.lease) as runner, view.live():
            runner.deliver(execution_id, data)
            return finish(runner, execution_id, view)
    finally:
        store.close()


def _cmd_cancel(args: argparse.Namespace) -> int:
    store = open_store(args, must_exist=True)
    try:
        # The scheduler is never started: a worker's pending alarm finds it cancelled.
        registry = load_actions(args.actions)
        execution_id = resolve_id(store, args.id)
        execution = make_runner(registry, store, None).cancel(execution_id, args.reason)
    finally:
        store.close()
    print(f"execution {execution.id}: {execution.status.value}")
    return EXIT_OK
