"""``prana run``: run a workflow file until it ends or waits on the outside."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduling._cli._common import (
    add_lease,
    add_logging,
    check_actions,
    check_children,
    check_seconds,
    file_conflict,
    finish,
    load_actions,
    load_workflow_file,
    make_runner,
    open_store,
    parse_json,
    register_file,
)
from scheduling._errors import WorkflowConflictError

if TYPE_CHECKING:
    import argparse

    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``run`` to the parser."""
    run = add("run", "run a workflow file (JSON or YAML) until it ends or waits on a webhook")
    run.add_argument("file", help="the workflow definition, .json, .yaml or .yml")
    run.add_argument("--input", help="the workflow input, as JSON")
    run.add_argument("--actions", help="module (or .py file) registering your actions")
    run.add_argument(
        "--workflow",
        action="append",
        default=[],
        metavar="FILE",
        help="a sub-workflow's definition to register first (repeat for several)",
    )
    add_logging(run, console=True)
    add_lease(run)
    run.set_defaults(handler=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from scheduling._console import ConsoleView

    check_seconds("--lease", args.lease)
    workflow = load_workflow_file(args.file)
    children = [load_workflow_file(path) for path in args.workflow]
    data = parse_json(args.input, "--input") if args.input is not None else None
    registry = load_actions(args.actions)
    check_actions([workflow, *children], registry, args.actions)
    store = open_store(args, must_exist=False)
    view = ConsoleView()
    try:
        check_children([workflow, *children], store)
        runner = make_runner(registry, store, view, lease_seconds=args.lease)
        for child, path in zip(children, args.workflow, strict=True):
            register_file(runner, child, path)
        with runner, view.live():
            try:  # start validates the definition, then stores it
                execution_id = runner.start(workflow, data)
            except WorkflowConflictError:
                raise file_conflict(runner, workflow, args.file) from None
            return finish(runner, execution_id, view)
    finally:
        store.close()
