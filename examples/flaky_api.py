"""A flaky API, retried with backoff, driven by hand through its retry suspensions.

Run it: ``python examples/flaky_api.py``. The core never sleeps: each failed attempt comes
back as ``Suspend(kind="retry")`` with a ``RetryData``; this script waits out the delay and
calls ``resume_workflow``. (The ``scheduling`` package does that waiting for you; see
``prana demo``.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from prana import (
    ActionContext,
    Completed,
    Connection,
    Node,
    NodeSettings,
    Registry,
    RetryData,
    RetryPolicy,
    Suspend,
    Workflow,
    execute_workflow,
    resume_workflow,
)

registry = Registry()


@registry.action("weather.fetch")
def fetch_weather(params: Any, ctx: ActionContext) -> Any:
    """Pretend to call a weather API that is down for the first two attempts."""
    if ctx.attempt < 3:
        raise ConnectionError(f"weather API unreachable (attempt {ctx.attempt})")
    return {"city": params["city"], "temp_c": 21, "attempt": ctx.attempt}


workflow = Workflow(
    id="weather",
    nodes=[
        Node(key="start", type="manual.trigger"),
        Node(
            key="fetch",
            type="weather.fetch",
            params={"city": "{{ $input.main.city }}"},
            settings=NodeSettings(
                retry=RetryPolicy(max_attempts=4, backoff="exponential", initial_delay="200ms")
            ),
        ),
        Node(
            key="report",
            type="data.set_data",
            params={"value": "{{ $input.main.city }}: {{ $input.main.temp_c }} C"},
        ),
    ],
    connections=[
        Connection(from_node="start", to_node="fetch"),
        Connection(from_node="fetch", to_node="report"),
    ],
)


def main(
    clock: Callable[[], datetime] | None = None,
    sleep: Callable[[float], object] = time.sleep,
    say: Callable[[str], object] = print,
) -> Any:
    """Run the workflow, waiting out each retry suspension; return the final output."""
    outcome = execute_workflow(workflow, {"city": "Lisbon"}, registry=registry, clock=clock)
    while isinstance(outcome, Suspend) and isinstance(outcome.data, RetryData):
        data = outcome.data
        say(
            f"attempt {data.attempt_number - 1} failed ({data.original_error.message}); "
            f"retrying in {data.retry_delay_ms} ms (attempt {data.attempt_number}/"
            f"{data.max_attempts})"
        )
        sleep(data.retry_delay_ms / 1000)
        assert outcome.execution is not None
        outcome = resume_workflow(
            outcome.execution, workflow=workflow, registry=registry, clock=clock
        )
    assert isinstance(outcome, Completed), outcome
    say(f"completed: {outcome.output}")
    return outcome.output


if __name__ == "__main__":
    main()
