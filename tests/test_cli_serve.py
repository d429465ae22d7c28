"""``prana serve`` and the resume path ``prana run`` prints, as a new user runs them."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from prana import ExecutionStatus, loads_workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._cli import load_actions, main
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

READY_TIMEOUT_SECONDS = 30.0

ACTIONS = textwrap.dedent(
    """
    def flaky(params, ctx):
        if ctx.attempt <= params.get("fails", 0):
            raise ConnectionError(f"down on attempt {ctx.attempt}")
        return {"attempt": ctx.attempt}

    def register(registry):
        registry.register("cli.flaky", flaky)
    """
)

WORKFLOW = {
    "id": "serve-demo",
    "nodes": [
        {"key": "start", "type": "manual.trigger"},
        {
            "key": "call",
            "type": "cli.flaky",
            "params": {"fails": 1},
            "settings": {"retry_on_failed": True, "max_retries": 2, "retry_delay_ms": 20},
        },
        {"key": "approve", "type": "wait.wait", "params": {"mode": "webhook"}},
    ],
    "connections": [
        {"from_node": "start", "to_node": "call"},
        {"from_node": "call", "to_node": "approve"},
    ],
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_serve_refuses_a_public_host_without_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Binding beyond loopback needs PRANA_WEB_TOKEN: one line, exit 2."""
    monkeypatch.delenv("PRANA_WEB_TOKEN", raising=False)
    code = main(["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "x.db")])
    assert code == 2
    err = capsys.readouterr().err
    assert "PRANA_WEB_TOKEN" in err
    assert len(err.strip().splitlines()) == 1


def test_serve_names_prana_web_token_when_it_is_too_short(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A short $PRANA_WEB_TOKEN is refused naming the variable the user set (was: a
    message about create_app(token=...), a call a CLI user never made), exit 2."""
    monkeypatch.setenv("PRANA_WEB_TOKEN", "short")
    code = main(["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "x.db")])
    assert code == 2
    err = capsys.readouterr().err
    assert "PRANA_WEB_TOKEN" in err
    assert "at least 16 characters" in err
    assert "create_app" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists()


def test_run_prints_the_path_and_serve_resumes_it_once(tmp_path: Path) -> None:
    """prana run prints /hooks/<token>; prana serve accepts it once, then answers 404."""
    (tmp_path / "actions.py").write_text(ACTIONS)
    (tmp_path / "wf.json").write_text(json.dumps(WORKFLOW))
    db = str(tmp_path / "p.db")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("PRANA_WEB_TOKEN", None)
    run = subprocess.run(
        [sys.executable, "-m", "scheduling._cli", "run", "wf.json", "--db", db,
         "--actions", "actions.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    found = re.search(r"(/hooks/[A-Za-z0-9_\-.]+)", run.stdout)
    assert found is not None, run.stdout
    path = found.group(1)
    # The printed URL is the default address; the line says where a user's serve differs.
    assert "prana serve at its --host and --port" in run.stdout, run.stdout

    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "scheduling._cli", "serve", "--db", db, "--port", str(port),
         "--actions", "actions.py"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert serve.stdout is not None
        for line in serve.stdout:
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        seen = []
        while True:
            line = lines.get(timeout=READY_TIMEOUT_SECONDS)
            seen.append(line)
            if "Application startup complete" in line:
                break
        assert any("loopback only" in line for line in seen), seen
        base = f"http://127.0.0.1:{port}"
        listed = httpx.get(base + "/api/executions").json()
        assert listed["items"][0]["status"] == "suspended"
        refused = httpx.post(base + path, content=b"yes", headers={"content-type": "text/plain"})
        assert refused.status_code == 415  # the token stays valid: the log must not show it
        first = httpx.post(base + path, json={"approved": True})
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "completed"
        second = httpx.post(base + path, json={"approved": True})  # a sender's retry
        assert (second.status_code, second.json()["already_delivered"]) == (200, True)
        other = httpx.post(base + path, json={"approved": False})
        assert other.status_code == 404  # used: only the same delivery is answered
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=READY_TIMEOUT_SECONDS)
        reader.join(READY_TIMEOUT_SECONDS)
        assert serve.stdout is not None
        serve.stdout.close()
    while not lines.empty():
        seen.append(lines.get_nowait())
    log = "".join(seen)
    assert log.count('"POST /hooks/[webhook-token] HTTP/1.1"') == 4, log
    assert path.removeprefix("/hooks/") not in log


@contextlib.contextmanager
def _serving(tmp_path: Path, db: str) -> Iterator[str]:
    """``prana serve`` over ``db`` in a subprocess, on a free loopback port: its base URL."""
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("PRANA_WEB_TOKEN", None)
    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "scheduling._cli", "serve", "--db", db, "--port", str(port),
         "--actions", "actions.py"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert serve.stdout is not None
    try:
        for line in serve.stdout:
            if "Application startup complete" in line:
                break
        threading.Thread(target=serve.stdout.read, daemon=True).start()  # keep the pipe drained
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=READY_TIMEOUT_SECONDS)
        serve.stdout.close()


def test_serve_resumes_work_another_process_left_due(tmp_path: Path) -> None:
    """``prana serve`` resumes due work like a worker (docs/deployment/web.md): a retry left
    due without an alarm after ``serve`` started (a ``prana run`` stopped in backoff) is
    taken up within its poll, and the execution's SSE stream sees it end."""
    (tmp_path / "actions.py").write_text(ACTIONS)
    db = str(tmp_path / "p.db")
    flaky = loads_workflow(
        {**WORKFLOW, "nodes": WORKFLOW["nodes"][:2], "connections": WORKFLOW["connections"][:1]}
    )
    with _serving(tmp_path, db) as base:
        # Another process starts the run; attempt 1 fails; it stops before the retry is due.
        clock = ManualClock(start=datetime.now(timezone.utc))
        other = Runner(
            load_actions(str(tmp_path / "actions.py")),
            SQLiteStore(db),
            ManualScheduler(clock=clock),
            clock,
        )
        with other:
            eid = other.start(flaky, {})
            assert other.get(eid).status is ExecutionStatus.SUSPENDED
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        with httpx.stream(
            "GET", f"{base}/executions/{eid}/events", timeout=READY_TIMEOUT_SECONDS
        ) as events:
            for line in events.iter_lines():
                if line == "event: end":
                    break
                assert time.monotonic() < deadline, "prana serve never resumed the due retry"
        shown = httpx.get(f"{base}/api/executions/{eid}").json()
        assert shown["status"] == "completed"


@pytest.mark.parametrize("when", ["serving", "starting"])
def test_sigterm_stops_serve_gracefully(tmp_path: Path, when: str) -> None:
    """Was: uvicorn stopped on SIGTERM, then raised it again into Python's default handler,
    so ``prana serve`` ended by the signal (exit -15) before its runner closed, cutting off
    any alarm it was firing, where a worker finishes and saves them (exit 0). Now it closes
    the runner, says so in one line and exits 0, also for a SIGTERM sent on its first line."""
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("PRANA_WEB_TOKEN", None)
    db = str(tmp_path / "p.db")
    serve = subprocess.Popen(
        [sys.executable, "-m", "scheduling._cli", "serve", "--db", db, "--port",
         str(_free_port())],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert serve.stdout is not None
    try:
        for line in serve.stdout:
            if (when == "starting" and line.startswith("prana serve on ")) or (
                "Application startup complete" in line
            ):
                break
        serve.send_signal(signal.SIGTERM)
        rest, _ = serve.communicate(timeout=READY_TIMEOUT_SECONDS)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.communicate()
    assert serve.returncode == 0, rest
    assert rest.splitlines()[-1] == (
        "serve stopped (SIGTERM): suspended executions stay in the store for the next worker"
    )


# --- the proxy headers prana serve believes --------------------------------------------------


def _uvicorn_running(config: Any) -> Any:
    """Run uvicorn with ``config`` (its own socket on a free port) until the block ends."""
    import uvicorn

    started = threading.Event()

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            started.set()

    server = _Server(config)
    thread = threading.Thread(target=server.run, daemon=True)

    @contextlib.contextmanager
    def running() -> Iterator[str]:
        thread.start()
        try:
            assert started.wait(READY_TIMEOUT_SECONDS)
            yield f"http://127.0.0.1:{config.port}"
        finally:
            server.should_exit = True
            thread.join(READY_TIMEOUT_SECONDS)

    return running()


@pytest.mark.parametrize("allowed", [None, "127.0.0.1"])
def test_serve_believes_forwarded_headers_only_from_named_proxies(
    tmp_path: Path, allowed: str | None
) -> None:
    """uvicorn believes ``X-Forwarded-For`` from loopback by default: rotating it gave
    unlimited sign-in guesses. ``prana serve`` believes none unless
    ``--forwarded-allow-ips`` names the proxy, and then counts the client it names."""
    import argparse

    from scheduling._cli.serve import server_config
    from scheduling.web import create_app
    from scheduling.web._app import LOGIN_FAILURES

    store = SQLiteStore(tmp_path / "p.db")
    runner = Runner(
        registry=load_actions(None), store=store, scheduler=ManualScheduler(clock=ManualClock())
    )
    app = create_app(runner, token="operator-token-0123456789")
    args = argparse.Namespace(
        host="127.0.0.1", port=_free_port(), log_level="warning", forwarded_allow_ips=allowed
    )
    with _uvicorn_running(server_config(app, args)) as url, httpx.Client(base_url=url) as client:
        answers = [
            client.post(
                "/login",
                data={"token": "wrong-guess-0123456789"},
                headers={"x-forwarded-for": f"203.0.113.{i}"},
            ).status_code
            for i in range(LOGIN_FAILURES + 3)
        ]
    store.close()
    if allowed is None:  # one client, whatever the header says: locked after five
        assert answers == [401] * LOGIN_FAILURES + [429] * 3
    else:  # the proxy names a new client each time
        assert answers == [401] * (LOGIN_FAILURES + 3)
