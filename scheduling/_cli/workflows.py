"""``prana workflows add`` and ``prana workflows list``: the definitions sub-workflows run."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from scheduling._cli._common import (
    EXIT_OK,
    CLIError,
    check_actions,
    check_children,
    load_actions,
    load_workflow_file,
    make_runner,
    open_store,
    register_file,
)

if TYPE_CHECKING:
    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``workflows`` (with ``add`` and ``list``) to the parser."""
    workflows = add("workflows", "register workflow definitions (sub-workflows) and list them")
    workflows.add_argument("action", choices=("add", "list"), help="add files, or list")
    workflows.add_argument("files", nargs="*", metavar="FILE", help="definitions to add")
    workflows.add_argument(
        "--actions", help="module (or .py file) registering the actions the definitions use"
    )
    workflows.add_argument("--json", action="store_true", help="list as JSON")
    workflows.set_defaults(handler=_cmd_workflows)


def _cmd_workflows(args: argparse.Namespace) -> int:
    if args.action == "add":
        return _add(args)
    if args.files:
        raise CLIError("workflows list takes no files")
    store = open_store(args, must_exist=True)
    try:
        rows = store.list_workflows()
    finally:
        store.close()
    if args.json:
        doc = {"workflows": [{"id": wid, "version": version} for wid, version in rows]}
        print(json.dumps(doc, indent=2))
    elif not rows:
        print("no workflows")
    else:
        for wid, version in rows:
            print(f"{wid} v{version}")
    return EXIT_OK


def _add(args: argparse.Namespace) -> int:
    if not args.files:
        raise CLIError("workflows add: give one or more workflow files")
    definitions = [load_workflow_file(path) for path in args.files]
    registry = load_actions(args.actions)
    check_actions(definitions, registry, args.actions)
    store = open_store(args, must_exist=False)
    try:
        check_children(definitions, store)
        runner = make_runner(registry, store, None)
        for workflow, path in zip(definitions, args.files, strict=True):
            register_file(runner, workflow, path)
            print(f"registered {workflow.id} v{workflow.version}")
    finally:
        store.close()
    return EXIT_OK
