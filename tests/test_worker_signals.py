"""``prana worker`` stops gracefully on SIGTERM (and Ctrl-C), as a real process.

The worker is stopped while an action runs in it (the ``fault.gate`` action says it started,
then waits for a file): it finishes that attempt, saves it, prints one line and exits.
"""

from __future__ import annotations

import signal
import uuid
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pytest
from processes import ACTIONS, Prana, wait_until

from prana import Connection, ExecutionStatus, Node, Workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._cli import load_actions
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    from scheduling.abc import ExecutionStore

STOPPED = "worker stopped (SIGTERM): suspended executions stay in the store for the next worker"


def gated(tmp_path: Path) -> Workflow:
    """trigger -> a 1 s timer -> the gate action (which waits for the test's release file)."""
    return Workflow(
        id="gated",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="wait", type="wait.wait", params={"mode": "interval", "duration": 1}),
            Node(
                key="gate",
                type="fault.gate",
                params={
                    "started": str(tmp_path / "started"),
                    "release": str(tmp_path / "release"),
                },
            ),
        ],
        connections=[
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="gate"),
        ],
    )


def overdue(store: ExecutionStore, tmp_path: Path) -> str:
    """An execution whose timer fell due an hour ago: the worker runs the gate at once."""
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=1))
    return Runner(load_actions(ACTIONS), store, ManualScheduler(clock)).start(gated(tmp_path))


def stop_mid_action(
    processes: list[Prana], argv: list[str], tmp_path: Path, signum: signal.Signals
) -> Prana:
    """Start a worker, wait until the gate runs in it, send ``signum``, then release the gate."""
    worker = Prana(["worker", "--actions", ACTIONS, "--poll", "0.05", *argv], cwd=tmp_path)
    processes.append(worker)
    assert wait_until(lambda: (tmp_path / "started").exists()), worker.stderr
    worker.send(signum)
    (tmp_path / "release").touch()
    return worker


def test_sigterm_stops_the_apscheduler_worker_after_its_action(
    tmp_path: Path, processes: list[Prana]
) -> None:
    """SIGTERM mid-action: the attempt finishes and is saved, one line, exit 0."""
    db = str(tmp_path / "prana.db")
    store = SQLiteStore(db)
    execution_id = overdue(store, tmp_path)
    store.close()
    worker = stop_mid_action(processes, ["--db", db], tmp_path, signal.SIGTERM)
    assert worker.wait() == 0, worker.stderr
    assert worker.stdout.splitlines()[-1] == STOPPED
    assert worker.stderr == ""
    store = SQLiteStore(db)
    try:
        assert store.load(execution_id)[0].status is ExecutionStatus.COMPLETED
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_procrastinate_worker_after_its_action(
    tmp_path: Path, processes: list[Prana], postgres_dsn: str, signum: signal.Signals
) -> None:
    """SIGTERM (exit 0) or Ctrl-C (exit 130) mid-action: the attempt finishes, one line."""
    import psycopg
    from psycopg import sql

    from scheduling.stores.postgres import PostgresStore

    schema = f"prana_sig_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(postgres_dsn, schema=schema)
    try:
        execution_id = overdue(store, tmp_path)
        worker = stop_mid_action(
            processes,
            ["--postgres", postgres_dsn, "--schema", schema, "--scheduler", "procrastinate"],
            tmp_path,
            signum,
        )
        code = worker.wait()
        assert worker.stderr == ""
        if signum is signal.SIGTERM:
            assert (code, worker.stdout.splitlines()[-1]) == (0, STOPPED)
        else:
            assert code == 130
            assert worker.stdout.splitlines()[-1].startswith("interrupted; ")
        assert store.load(execution_id)[0].status is ExecutionStatus.COMPLETED
    finally:
        store.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.postgres
def test_sigterm_right_after_the_procrastinate_worker_says_it_runs_stops_it_gracefully(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Was: the worker printed "worker on PostgreSQL (procrastinate): resuming due executions"
    before its SIGTERM handler was installed, so a supervisor stopping it on that line killed
    it by the signal (exit -15, no "worker stopped" line) about one time in three. The line
    now comes once SIGTERM stops the worker gracefully; five tries, each exits 0."""
    import subprocess
    import sys

    import psycopg
    from psycopg import sql

    schema = f"prana_sig_{uuid.uuid4().hex[:12]}"
    argv = [sys.executable, "-m", "prana", "worker", "--postgres", postgres_dsn]
    argv += ["--schema", schema, "--scheduler", "procrastinate"]
    try:
        for _ in range(5):
            worker = subprocess.Popen(
                argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            try:
                assert worker.stdout is not None
                first = worker.stdout.readline()  # blocks until the line, no polling delay
                assert first.startswith("worker on PostgreSQL (procrastinate)"), first
                worker.send_signal(signal.SIGTERM)
                out, err = worker.communicate(timeout=60)
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.communicate()
            assert (worker.returncode, out.splitlines()[-1:]) == (0, [STOPPED]), err
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
