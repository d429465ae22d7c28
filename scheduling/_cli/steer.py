"""``prana deliver`` and ``prana cancel``: move one waiting execution on."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from prana import AttemptOutcome, ExecutionStatus
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

    from prana import Registry, WorkflowExecution
    from scheduling._cli._common import AddCommand
    from scheduling.abc import ExecutionStore


def register(add: AddCommand) -> None:
    """Add ``deliver`` and ``cancel`` to the parser."""
    deliver = add("deliver", "deliver resume data to an execution waiting on a webhook")
    deliver.add_argument("id", help="the execution id, or a unique prefix of it")
    deliver.add_argument("--data", required=True, help="the resume data, as JSON")
    deliver.add_argument("--actions", help="module (or .py file) registering your actions")
    add_logging(deliver, console=True)
    add_lease(deliver)
    deliver.set_defaults(handler=_cmd_deliver)

    cancel = add("cancel", "cancel an execution that has not ended (pending, running or suspended)")
    cancel.add_argument("id", help="the execution id, or a unique prefix of it")
    cancel.add_argument("--reason", help="why (kept in the record)")
    cancel.add_argument(
        "--actions",
        help="module registering your actions: to record the attempt in flight of an "
        "execution a worker is running (without it, that attempt is left out of the "
        "ledger), and to resume a cancelled child's parent",
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
        in_flight = _unrecordable_attempt(store, execution_id, registry)
        execution = make_runner(registry, store, None).cancel(execution_id, args.reason)
    finally:
        store.close()
    print(f"execution {execution.id}: {execution.status.value}")
    if in_flight is not None and not _records_a_cancelled_attempt(execution):
        print(f"prana: warning: {in_flight}", file=sys.stderr)
    return EXIT_OK


def _unrecordable_attempt(
    store: ExecutionStore, execution_id: str, registry: Registry
) -> str | None:
    """What a cancel leaves out of the ledger, said in a line; ``None`` if nothing.

    A light claim (a worker running a due retry or timer, its stored record still the
    suspended one) has its attempt in flight recorded ``cancelled`` only when the runner can
    rebuild the checkpoint the claim stands for, which needs the workflow's node types
    registered (``--actions``); otherwise the cancelled record leaves that attempt out.
    """
    from scheduling._claims import is_claimed
    from scheduling._console import claimed_resume
    from scheduling._errors import WorkflowNotFound

    execution, _ = store.load(execution_id)
    if not is_claimed(execution):
        return None
    try:
        workflow = store.load_workflow(execution.workflow_id, execution.workflow_version)
    except WorkflowNotFound:
        missing = ["(its definition is not stored)"]
    else:
        missing = sorted({repr(n.type) for n in workflow.nodes if n.type not in registry})
    resume = claimed_resume(execution)
    if not missing or resume is None:
        return None
    claimed = f"claimed {resume['claimed_at'] or '-'}"
    what = (
        f"attempt {resume['attempt']} of node {resume['node_key']!r} ({claimed})"
        if resume["attempt"]
        else f"the resume of the {resume['kind']} at node {resume['node_key']!r} ({claimed})"
    )
    return (
        f"a worker was running {what}; the cancelled record leaves it out, as rebuilding it "
        f"needs the node type(s) {', '.join(missing)}: cancel with --actions MODULE to have "
        "such an attempt recorded cancelled"
    )


def _records_a_cancelled_attempt(execution: WorkflowExecution) -> bool:
    """Whether the cancel closed an attempt in flight (``cancelled``) in ``execution``."""
    return any(
        attempt.outcome is AttemptOutcome.CANCELLED
        for runs in execution.node_executions.values()
        for run in runs
        for attempt in run.attempts
    )
