"""The bundled demo of ``prana demo``: a flaky API called with retries and backoff.

Three executions call a fake API that refuses the first ``fail_times`` attempts: one
succeeds after one retry, one after two, and one runs out of attempts, so the console
shows a retry line for each wait, a compact line for each recovery, a detailed block
for the failure, and the retry summary. Delays are short (0.2 s, doubling), so the demo
ends in a couple of seconds on a real scheduler.
"""

from __future__ import annotations

from typing import Any

from prana import (
    ActionContext,
    Connection,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Workflow,
)

__all__ = ["DEMO_INPUTS", "flaky_api", "register", "workflow"]

DEMO_INPUTS: tuple[dict[str, Any], ...] = (
    {"service": "inventory", "fail_times": 1},
    {"service": "payments", "fail_times": 2},
    {"service": "shipping", "fail_times": 9},
)
"""One input per demo execution: how many attempts the fake API refuses."""


def flaky_api(params: Any, ctx: ActionContext) -> dict[str, Any]:
    """A fake API call that refuses the first ``fail_times`` attempts with ``ConnectionError``."""
    service = str(params.get("service", "api"))
    fail_times = int(params.get("fail_times", 0))
    if ctx.attempt <= fail_times:
        raise ConnectionError(f"{service}: connection refused (attempt {ctx.attempt})")
    return {"service": service, "status": 200, "attempt": ctx.attempt}


def register(registry: Registry) -> None:
    """Add the demo's action, ``demo.flaky_api``, to ``registry``."""
    registry.register("demo.flaky_api", flaky_api)


def workflow() -> Workflow:
    """The demo workflow: trigger -> call the flaky API (4 attempts, 0.2 s doubling) -> report."""
    policy = RetryPolicy(
        max_attempts=4, backoff="exponential", initial_delay=0.2, multiplier=2, max_delay=1
    )
    return Workflow(
        id="demo.flaky_api",
        name="Call a flaky API with retries",
        nodes=(
            Node(key="start", type="manual.trigger"),
            Node(
                key="call_api",
                type="demo.flaky_api",
                params={
                    "service": "{{ $input.main.service }}",
                    "fail_times": "{{ $input.main.fail_times }}",
                },
                settings=NodeSettings(retry=policy),
            ),
            Node(
                key="report",
                type="data.set_data",
                params={"fields": {"reported": True}},
            ),
        ),
        connections=(
            Connection(from_node="start", to_node="call_api"),
            Connection(from_node="call_api", to_node="report"),
        ),
    )
