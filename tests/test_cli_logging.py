"""The CLI configures logging once, for its own process; the libraries only add NullHandlers.

``prana run``, ``worker`` and ``serve`` (and ``deliver``, ``redrive``) write prana's own
log records (``prana``, ``scheduling.*``) to stderr, one readable line each, at INFO unless
``--log-level`` or ``-v`` says otherwise; other libraries' records (APScheduler's per-job
lines) only from WARNING. Checked on the output of real processes.
"""

from __future__ import annotations

import logging
import re
import signal
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pytest
from processes import ACTIONS, Prana, run_prana, wait_until

from prana import Connection, ExecutionStatus, Node, NodeSettings, RetryPolicy, Workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._cli import _parser, load_actions
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: ")
"""One log line: time, level, logger, message."""

FAILING = """
id: failing
nodes:
  - {key: start, type: manual.trigger}
  - key: act
    type: fault.scripted
    params: {log: calls.log, script: [fail, fail]}
    settings: {retry: {max_attempts: 2, initial_delay: 0.01}}
connections: [{from_node: start, to_node: act}]
"""


def test_run_logs_what_went_wrong_in_one_line_each(tmp_path: Path) -> None:
    """A failed run: the console on stdout, the failure on stderr in one WARNING line."""
    (tmp_path / "failing.yaml").write_text(FAILING)
    done = run_prana(
        tmp_path, "run", "failing.yaml", "--actions", ACTIONS, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines, "a failed run says so on stderr"
    assert all(LINE.match(line) for line in lines), done.stderr
    warnings = [line for line in lines if " WARNING scheduling.events: " in line]
    assert len(warnings) == 1, done.stderr
    assert " failed at node act: " in warnings[0]
    # The console shows each event; the log does not repeat the INFO ones.
    assert " INFO scheduling.events" not in done.stderr


def test_log_level_error_keeps_warnings_out(tmp_path: Path) -> None:
    (tmp_path / "failing.yaml").write_text(FAILING)
    done = run_prana(
        tmp_path,
        "run",
        "failing.yaml",
        "--actions",
        ACTIONS,
        "--log-level",
        "error",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1
    assert done.stderr == ""


def overdue_failing(db: str, log: Path) -> str:
    """An execution whose timer fell due an hour ago, then three failing attempts 50 ms apart."""
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=1))
    workflow = Workflow(
        id="failing-later",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="wait", type="wait.wait", params={"mode": "interval", "duration": 1}),
            Node(
                key="act",
                type="fault.scripted",
                params={"log": str(log), "script": ["fail"]},
                settings=NodeSettings(
                    retry=RetryPolicy(max_attempts=3, backoff="constant", initial_delay=0.05)
                ),
            ),
        ],
        connections=[
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="act"),
        ],
    )
    store = SQLiteStore(db)
    try:
        runner = Runner(load_actions(ACTIONS), store, ManualScheduler(clock=clock), clock)
        return runner.start(workflow, None)
    finally:
        store.close()


def test_verbose_worker_shows_every_event_but_not_apschedulers_job_lines(
    tmp_path: Path,
) -> None:
    """``prana worker -v``: prana's DEBUG lines, one each; APScheduler's per-job lines never."""
    db = str(tmp_path / "prana.db")
    execution_id = overdue_failing(db, tmp_path / "calls.log")
    worker = Prana(
        ["worker", "--db", db, "--actions", ACTIONS, "--poll", "0.05", "-v"], cwd=tmp_path
    )
    try:
        store = SQLiteStore(db)
        try:
            assert wait_until(
                lambda: store.load(execution_id)[0].status is ExecutionStatus.FAILED
            ), worker.stderr
        finally:
            store.close()
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.stderr
    finally:
        worker.stop()
    lines = worker.stderr.splitlines()
    assert all(LINE.match(line) for line in lines), worker.stderr
    assert "apscheduler" not in worker.stderr  # three alarms fired, no job lines
    assert " DEBUG scheduling.events: " in worker.stderr
    assert " WARNING scheduling.events: " in worker.stderr  # the failure


def test_every_command_that_runs_actions_takes_log_level_and_v() -> None:
    parser = _parser()
    for command in ("run", "worker", "serve", "deliver", "redrive"):
        assert parser.parse_args([command, *_required(command), "-v"]).log_level == "debug"
        args = parser.parse_args([command, *_required(command), "--log-level", "warning"])
        assert args.log_level == "warning"
        assert parser.parse_args([command, *_required(command)]).log_level == "info"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "x.yaml", "--log-level", "loud"])


def _required(command: str) -> list[str]:
    return {"run": ["x.yaml"], "deliver": ["id", "--data", "1"], "redrive": ["id"]}.get(command, [])


def test_the_libraries_only_add_null_handlers() -> None:
    """Importing prana and scheduling and running an APScheduler adapter configures nothing."""
    from scheduling.adapters.apscheduler import APSchedulerAdapter

    chatty = [logging.getLogger(n) for n in ("apscheduler.executors", "apscheduler.scheduler")]
    saved = [c.level for c in chatty]
    try:
        for c in chatty:
            c.setLevel(logging.NOTSET)
        adapter = APSchedulerAdapter()
        adapter.start(lambda execution_id: None)
        adapter.shutdown()
        assert [c.level for c in chatty] == [logging.NOTSET, logging.NOTSET]
    finally:
        for c, level in zip(chatty, saved, strict=True):
            c.setLevel(level)
    for name in ("prana", "scheduling"):
        handlers = logging.getLogger(name).handlers
        assert [type(h) for h in handlers] == [logging.NullHandler]
