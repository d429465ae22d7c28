"""examples/fastapi_app.py, driven through HTTP on a loopback port."""

from __future__ import annotations

import logging
import runpy
from pathlib import Path
from typing import Any

import httpx
from servers import serve

from scheduling.stores.sqlite import SQLiteStore

EXAMPLE = Path(__file__).parent.parent / "examples" / "fastapi_app.py"


def test_order_waits_for_approval_then_ships(tmp_path: Path) -> None:
    """POST /orders starts and returns the approval path; POSTing it once ships the order."""
    build_app: Any = runpy.run_path(str(EXAMPLE))["build_app"]
    store = SQLiteStore(tmp_path / "orders.db")
    with serve(build_app(store)) as url, httpx.Client(base_url=url) as client:
        started = client.post("/orders", json={"item": "book"})
        assert started.status_code == 200, started.text
        body = started.json()
        assert body["status"] == "suspended"
        approve = body["approve"]
        assert approve.startswith("/prana/hooks/")
        assert client.get(f"/orders/{body['execution_id']}").json()["status"] == "suspended"
        listed = client.get("/prana/api/executions").json()
        assert listed["items"][0]["id"] == body["execution_id"]
        done = client.post(approve, json={"approved": True})
        assert done.status_code == 200
        assert done.json()["status"] == "completed"
        order = client.get(f"/orders/{body['execution_id']}").json()
        assert order == {"status": "completed", "output": {"approved": True, "shipped": "book"}}
        again = client.post(approve, json={"approved": True})  # a retry of the same delivery
        assert (again.status_code, again.json()["already_delivered"]) == (200, True)
        assert client.post(approve, json={"approved": False}).status_code == 404
        assert client.get("/orders/nope").status_code == 404
    store.close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_the_access_log_never_shows_a_resume_token(tmp_path: Path) -> None:
    """Served as its docstring says (uvicorn, access log on), the example's log holds no
    token: not for the delivery, nor for one refused (415) that leaves the token valid."""
    build_app: Any = runpy.run_path(str(EXAMPLE))["build_app"]
    store = SQLiteStore(tmp_path / "orders.db")
    lines = _Lines()
    with serve(build_app(store), log_level="info") as url, httpx.Client(base_url=url) as client:
        access = logging.getLogger("uvicorn.access")
        access.addHandler(lines)  # after uvicorn's logging config, which replaces handlers
        try:
            approve = client.post("/orders", json={"item": "book"}).json()["approve"]
            token = approve.removeprefix("/prana/hooks/")
            refused = client.post(approve, content=b"yes", headers={"content-type": "text/plain"})
            assert refused.status_code == 415
            assert client.post(approve, json={"approved": True}).status_code == 200
        finally:
            access.removeHandler(lines)
    store.close()
    hooks = [line for line in lines.lines if "/hooks/" in line]
    assert len(hooks) == 2, lines.lines
    assert all("/prana/hooks/[webhook-token]" in line for line in hooks)
    assert not any(token in line for line in lines.lines)
