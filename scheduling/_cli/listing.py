"""``prana list`` and ``prana show``: read executions from the store."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from prana import ExecutionStatus
from scheduling._cli._common import EXIT_OK, CLIError, open_store

if TYPE_CHECKING:
    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``list`` and ``show`` to the parser."""
    listing = add("list", "list executions, newest first")
    listing.add_argument(
        "--status",
        help="only executions with this status: pending, running, suspended, completed, "
        "failed or cancelled",
    )
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.set_defaults(handler=_cmd_list)

    show = add("show", "show an execution's timeline: nodes, attempts, errors, delays, lateness")
    show.add_argument("id", help="the execution id")
    show.set_defaults(handler=_cmd_show)


def _cmd_list(args: argparse.Namespace) -> int:
    store = open_store(args, must_exist=True)
    try:
        status = None
        if args.status is not None:
            try:
                status = ExecutionStatus(args.status)
            except ValueError:
                choices = ", ".join(s.value for s in ExecutionStatus)
                raise CLIError(f"--status {args.status}: use one of {choices}") from None
        rows = store.list(status, limit=args.limit)
    finally:
        store.close()
    if not rows:
        print("no executions")
        return EXIT_OK
    print(f"{'id':<34} {'workflow':<24} {'status':<10} {'due':<26} updated")
    for row in rows:
        workflow = f"{row.workflow_id} v{row.workflow_version}"
        due = row.due_at.isoformat() if row.due_at else "-"
        updated = row.updated_at.isoformat() if row.updated_at else "-"
        print(f"{row.id:<34} {workflow:<24} {row.status.value:<10} {due:<26} {updated}")
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    from scheduling._console import format_timeline

    store = open_store(args, must_exist=True)
    try:
        execution, version = store.load(args.id)
    finally:
        store.close()
    print(format_timeline(execution))
    print(f"  (record version {version})")
    return EXIT_OK
