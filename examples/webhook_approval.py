"""A purchase that waits for a human's approval, kept as JSON while it waits.

Run it: ``python examples/webhook_approval.py``. The workflow suspends on a webhook wait; the
suspended execution is serialized with ``prana.dumps`` (what a store keeps), loaded back,
and resumed with the approval as resume data.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from prana import (
    Completed,
    Connection,
    Node,
    Registry,
    Suspend,
    WebhookData,
    Workflow,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)

registry = Registry()

workflow = Workflow(
    id="purchase-approval",
    nodes=[
        Node(key="start", type="manual.trigger"),
        Node(key="ask", type="wait.wait", params={"mode": "webhook", "timeout_hours": 48}),
        Node(
            key="decide",
            type="logic.if_condition",
            params={"condition": "{{ $input.main.approved }}"},
        ),
        Node(
            key="order",
            type="data.set_data",
            params={"value": {"status": "ordered", "by": "{{ $input.main.by }}"}},
        ),
        Node(
            key="refuse",
            type="data.set_data",
            params={"value": {"status": "refused", "by": "{{ $input.main.by }}"}},
        ),
    ],
    connections=[
        Connection(from_node="start", to_node="ask"),
        Connection(from_node="ask", to_node="decide"),
        Connection(from_node="decide", to_node="order", from_port="true"),
        Connection(from_node="decide", to_node="refuse", from_port="false"),
    ],
)


def main(
    approved: bool = True,
    clock: Callable[[], datetime] | None = None,
    say: Callable[[str], object] = print,
) -> Any:
    """Start the purchase, store the paused execution, resume it with the decision."""
    outcome = execute_workflow(
        workflow, {"item": "laptop", "price": 1200}, registry=registry, clock=clock
    )
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, WebhookData)
    assert outcome.data.expires_at is not None
    say(f"waiting for approval until {outcome.data.expires_at:%Y-%m-%d %H:%M} UTC")
    stored = dumps(outcome.execution)
    say(f"stored the suspended execution as {len(stored)} bytes of JSON")
    decision = {"approved": approved, "by": "alice"}
    done = resume_workflow(
        loads(stored), decision, workflow=workflow, registry=registry, clock=clock
    )
    assert isinstance(done, Completed), done
    say(f"completed: {done.output}")
    return done.output


if __name__ == "__main__":
    main()
