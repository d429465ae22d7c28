"""``prana lint``: a workflow file's retry settings checked before anything runs."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from scheduling._cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    check_actions,
    load_actions,
    load_workflow_file,
    load_workflow_source,
)

if TYPE_CHECKING:
    from prana import Registry, RetryPolicy, Workflow
    from scheduling._cli._common import AddCommand

SCHEDULE_ROWS = 5
"""How many retries of each policy's schedule ``--schedule`` shows."""


def register(add: AddCommand) -> None:
    """Add ``lint`` to the parser."""
    lint = add("lint", "check workflow files' retry settings: what is legal but likely a mistake")
    lint.add_argument("files", nargs="+", metavar="FILE", help="workflow files (.json, .yaml)")
    lint.add_argument("--actions", help="module (or .py file) registering your actions")
    lint.add_argument(
        "--schedule",
        action="store_true",
        help="also show each node's retry policies and their first delays",
    )
    lint.add_argument(
        "--json", action="store_true", help="print JSON (stable field names, see the docs)"
    )
    lint.set_defaults(handler=_cmd_lint)


def _cmd_lint(args: argparse.Namespace) -> int:
    from prana import lint, validate

    definitions = [load_workflow_file(path) for path in args.files]
    registry = load_actions(args.actions)
    check_actions(definitions, registry, args.actions)
    found: list[dict[str, Any]] = []
    for file, workflow in zip(args.files, definitions, strict=True):
        validate(workflow, registry)  # an invalid workflow is an error (exit 2), not a warning
        warnings = lint(workflow, registry, source=load_workflow_source(file))
        found.append(
            {
                "file": file,
                "workflow_id": workflow.id,
                "warnings": [
                    {"node": w.node_key, "code": w.code, "message": w.message} for w in warnings
                ],
                "policies": _policies(workflow, registry) if args.schedule or args.json else [],
            }
        )
    if args.json:
        print(json.dumps({"files": found}, indent=2))
    else:
        _print(found, schedule=args.schedule)
    return EXIT_FAILED if any(entry["warnings"] for entry in found) else EXIT_OK


def _policies(workflow: Workflow, registry: Registry) -> list[dict[str, Any]]:
    """Each node's retry policies as it would use them: the one-line summary and first delays."""
    from prana.shell import resolve_policies

    out = []
    for node in workflow.nodes:
        spec = registry.get(node.type)
        policies = resolve_policies(node, workflow, spec.retry if spec is not None else None)
        if policies:
            out.append({"node": node.key, "policies": [_policy(p) for p in policies]})
    return out


def _policy(policy: RetryPolicy) -> dict[str, Any]:
    from prana.shell import schedule_head

    rows = schedule_head(policy, SCHEDULE_ROWS) if policy.enabled else []
    return {
        "describe": policy.describe(),
        "schedule": [
            {
                "retry": row.retry,
                "min_delay_s": row.min_delay,
                "typical_delay_s": row.typical_delay,
                "max_delay_s": row.max_delay,
                "cumulative_typical_s": row.cumulative_typical,
            }
            for row in rows
        ],
    }


def _print(found: list[dict[str, Any]], *, schedule: bool) -> None:
    from prana.shell import format_duration
    from scheduling._console import printable

    for entry in found:
        head = f"{entry['file']} ({entry['workflow_id']})"
        if schedule:
            for node in entry["policies"]:
                for policy in node["policies"]:
                    print(printable(f"{head}: {node['node']}: {policy['describe']}"))
                    for row in policy["schedule"]:
                        print(
                            f"    retry {row['retry']}: "
                            f"{format_duration(row['typical_delay_s'])} "
                            f"({format_duration(row['min_delay_s'])}.."
                            f"{format_duration(row['max_delay_s'])}), "
                            f"{format_duration(row['cumulative_typical_s'])} in all"
                        )
        for warning in entry["warnings"]:
            print(printable(f"{head}: {warning['node']}: [{warning['code']}] {warning['message']}"))
        if not entry["warnings"]:
            print(printable(f"{head}: no warnings"))
