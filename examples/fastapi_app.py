"""A FastAPI application running prana: lifespan, the webhook route, an endpoint that starts.

Run it (from the repository root)::

    pip install -e '.[web]' fastapi
    uvicorn --factory examples.fastapi_app:build_app

Then ``curl -X POST -H 'Content-Type: application/json' -d '{"item": "book"}'
http://127.0.0.1:8000/orders`` starts an order; the answer holds the path that approves it
(``POST /prana/hooks/<token>``), and ``/prana/executions`` shows it live (loopback only
unless ``PRANA_WEB_TOKEN`` is set). The approval path is a secret: it goes only to the
caller that started the order, and uvicorn's access log shows it as
``/prana/hooks/[webhook-token]`` (``create_app`` redacts it).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, HTTPException

from prana import Connection, Node, NodeSettings, Registry, RetryPolicy, Workflow
from scheduling import ExecutionNotFound, Runner
from scheduling.web import create_app

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from scheduling.abc import ExecutionStore

MOUNT = "/prana"

ORDER = Workflow(
    id="order",
    name="Reserve, wait for approval, ship",
    nodes=[
        Node(key="start", type="manual.trigger"),
        Node(
            key="reserve",
            type="shop.reserve",
            params={"item": "{{ $input.main.item }}"},
            settings=NodeSettings(retry=RetryPolicy(max_attempts=3, initial_delay="1s")),
        ),
        Node(key="approve", type="wait.wait", params={"mode": "webhook", "timeout_hours": 24}),
        Node(
            key="ship",
            type="data.set_data",
            params={"fields": {"shipped": "{{ $nodes.reserve.output.item }}"}},
        ),
    ],
    connections=[
        Connection(from_node="start", to_node="reserve"),
        Connection(from_node="reserve", to_node="approve"),
        Connection(from_node="approve", to_node="ship"),
    ],
)


def make_registry() -> Registry:
    """The built-ins plus the one action the order needs."""
    registry = Registry()

    @registry.action("shop.reserve")
    def reserve(params: Any, ctx: Any) -> dict[str, Any]:
        return {"item": params["item"], "reservation": ctx.idempotency_key}

    return registry


def build_app(store: ExecutionStore | None = None) -> FastAPI:
    """The application; the runner opens and closes with it (its lifespan)."""
    if store is None:
        from scheduling.stores.sqlite import SQLiteStore

        store = SQLiteStore(os.environ.get("PRANA_DB", "prana.db"))
    runner = Runner(registry=make_registry(), store=store, workflows=[ORDER])

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None, None]:
        async with runner:
            yield

    app = FastAPI(title="orders", lifespan=lifespan)
    app.mount(MOUNT, create_app(runner))

    @app.post("/orders")
    async def start_order(order: dict[str, Any]) -> dict[str, Any]:
        execution_id = await runner.astart(ORDER, order)
        path = runner.hook_path(execution_id)
        return {
            "execution_id": execution_id,
            "status": runner.get(execution_id).status.value,
            "approve": None if path is None else MOUNT + path,
        }

    @app.get("/orders/{execution_id}")
    async def order_status(execution_id: str) -> dict[str, Any]:
        try:
            execution = runner.get(execution_id)
        except ExecutionNotFound:
            raise HTTPException(status_code=404, detail="no such order") from None
        return {"status": execution.status.value, "output": execution.output}

    return app
