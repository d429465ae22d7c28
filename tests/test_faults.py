"""Fault tests: real ``prana worker`` processes killed (``kill -9``) while they run actions.

Each test creates flaky executions (a failure script per execution), runs real workers over
them, and kills a worker each time an action has just started in it (the action logs a
line, then holds on for a moment in the worker's own process, so the kill lands inside
it). The PostgreSQL test also cuts the workers' database connections
(``pg_terminate_backend``); another restarts and crashes (``kill -9`` of the postmaster) a
PostgreSQL server of its own under three procrastinate workers. Then every execution must
end exactly as its script says:

- 0 stuck: all end completed or failed within the deadline;
- 0 double transitions: each attempt that ended is in the ledger once, numbered 1..n; an
  attempt whose worker died inside it is there as ``interrupted`` (same number) just
  before the run of it that ended, and every such record is counted and reported;
- duplicated side effects (an attempt whose action ran more than once because its worker
  died before saving it) are counted and reported: delivery is at least once. Each one
  must show in the ledger as an interrupted attempt (a claim is saved before each call, so
  no two workers run one attempt at once).

Sizes: ``PRANA_FAULT_SIZE=full`` runs the issue's full size (SQLite: 200 executions, 20+
kills; PostgreSQL: 300 executions, 3 workers, 20+ kills and 10 cuts; the server: 300
executions, 12 restarts and crashes); the default is a CI size. ``PRANA_FAULT_REPORT=path``
appends each run's numbers as a JSON line.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import attrs
import pytest
from processes import ACTIONS, Prana, wait_until
from servers import PostgresServer

from prana import (
    AttemptOutcome,
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    RetryPolicy,
    Workflow,
    dumps_workflow,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._cli import load_actions
from scheduling.adapters.manual import ManualScheduler

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from scheduling.abc import ExecutionStore

FULL = os.environ.get("PRANA_FAULT_SIZE") == "full"
MAX_ATTEMPTS = 3
SCRIPTS = (("ok",), ("fail", "ok"), ("fail", "fail", "ok"), ("fail", "fail", "fail"))
NEVER_POISON = 1000
"""The workers' ``--max-interruptions``: kills land on re-runs too, so with the default (3)
an unlucky attempt would fail as poison; the poison bound has its own tests."""
HOLD_SECONDS = 0.05
"""How long each action holds on after logging its call: the window a kill lands in."""


@attrs.frozen
class Size:
    executions: int
    kills: int
    spread_seconds: float
    """The executions' timers fall due evenly over this span, so work keeps arriving
    while the killer needs workers busy (a worker restarts in about a second)."""
    cuts: int = 0
    workers: int = 1
    deadline_seconds: float = 300.0


def fault_workflow(log: Path, script: tuple[str, ...]) -> Workflow:
    """trigger -> a timer (``delay_ms`` from the input) -> the scripted action.

    Every attempt runs in a worker: the test process only runs the trigger.
    """
    return Workflow(
        id="fault-" + "-".join(script),
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="wait",
                type="wait.wait",
                params={"mode": "interval", "duration": "{{ $input.main.delay_ms }}", "unit": "ms"},
            ),
            Node(
                key="act",
                type="fault.scripted",
                params={"log": str(log), "script": list(script), "hold": HOLD_SECONDS},
                settings=NodeSettings(
                    retry=RetryPolicy(
                        max_attempts=MAX_ATTEMPTS, backoff="constant", initial_delay=0.05
                    )
                ),
            ),
        ],
        connections=[
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="act"),
        ],
    )


def create(
    store: ExecutionStore, log: Path, count: int, spread_seconds: float, rng: random.Random
) -> dict[str, tuple[str, ...]]:
    """``count`` executions, waiting on timers spread over ``spread_seconds``; their scripts."""
    runner = Runner(load_actions(ACTIONS), store, ManualScheduler(ManualClock(_now())))
    scripts: dict[str, tuple[str, ...]] = {}
    step_ms = 1000 * spread_seconds / count
    for index in range(count):
        script = rng.choice(SCRIPTS)
        execution_id = runner.start(
            fault_workflow(log, script), {"delay_ms": 1 + round(index * step_ms)}
        )
        scripts[execution_id] = script
    return scripts


EXTRA_WAVES = 4
"""How many more waves (each half the size's executions) a run may add while faults are due."""


class Supply:
    """The executions of a fault run: the size's, then more waves while the faults are due.

    Work that only arrives on timers ran out before the faults landed on a loaded machine
    (each worker restart there takes seconds, and the timers do not wait): a run ended with
    1 kill of 8. So when nearly every execution created has begun its action, and the
    killer still needs busy workers, another wave is created, up to ``EXTRA_WAVES``.
    """

    def __init__(self, store: ExecutionStore, log: Path, size: Size) -> None:
        self.store, self.log, self.size = store, log, size
        self.rng = random.Random(7)
        self.scripts = create(store, log, size.executions, size.spread_seconds, self.rng)
        self.waves = 0
        self.wanted = True

    def top_up(self) -> None:
        """Add a wave if fewer than a few executions per worker have not begun."""
        if not self.wanted or self.waves >= EXTRA_WAVES:
            return
        begun = {execution_id for execution_id, _, _ in calls(self.log)}
        if len(self.scripts.keys() - begun) >= 3 * self.size.workers:
            return
        half = max(1, self.size.executions // 2)
        self.scripts.update(
            create(self.store, self.log, half, self.size.spread_seconds / 2, self.rng)
        )
        self.waves += 1


@attrs.define
class Report:
    """What a fault run did and found."""

    store: str
    executions: int
    workers: int
    kills: int = 0
    kills_mid_action: int = 0
    """Kills after which an attempt the killed worker had begun ran again elsewhere."""
    cuts: int = 0
    stuck: int = 0
    wrong_outcome: int = 0
    double_transitions: int = 0
    interrupted_in_ledgers: int = 0
    duplicated_side_effects: int = 0
    actions_run: int = 0
    settle_seconds: float = 0.0
    """From the last fault until every execution had ended (or the deadline)."""

    def publish(self) -> None:
        line = json.dumps(attrs.asdict(self))
        print(f"\nfault run: {line}")
        path = os.environ.get("PRANA_FAULT_REPORT")
        if path:
            with open(path, "a") as file:
                file.write(line + "\n")


def calls(log: Path) -> list[tuple[str, int, int]]:
    """Every action call logged: (execution id, attempt, worker pid)."""
    if not log.exists():
        return []
    found = []
    # Only whole lines: a worker may be appending one while this reads (the last piece,
    # without its newline yet, is read again on the next call).
    for line in log.read_text().split("\n")[:-1]:
        execution_id, _node, _run, attempt, pid = line.split()
        found.append((execution_id, int(attempt), int(pid)))
    return found


def check(
    store: ExecutionStore,
    scripts: dict[str, tuple[str, ...]],
    log: Path,
    report: Report,
    killed: set[int],
) -> None:
    """Fill ``report`` with what the store and the call log say; assert nothing yet."""
    for execution_id, script in scripts.items():
        execution, version = store.load(execution_id)
        if execution.status not in (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED):
            report.stuck += 1
            continue
        expected_attempts = script.index("ok") + 1 if "ok" in script else MAX_ATTEMPTS
        expected_status = ExecutionStatus.COMPLETED if "ok" in script else ExecutionStatus.FAILED
        [run] = execution.node_executions["act"]
        ended = [a.number for a in run.attempts if a.outcome is not AttemptOutcome.INTERRUPTED]
        interrupted = [
            (a.number, following.number)
            for a, following in zip(run.attempts, run.attempts[1:], strict=False)
            if a.outcome is AttemptOutcome.INTERRUPTED
        ]
        report.interrupted_in_ledgers += len(interrupted)
        if ended != list(range(1, len(ended) + 1)) or any(a != b for a, b in interrupted):
            report.double_transitions += 1
        if execution.status is not expected_status or len(ended) != expected_attempts:
            report.wrong_outcome += 1
        del version
    logged = calls(log)
    report.actions_run = len(logged)
    per_attempt = Counter((execution_id, attempt) for execution_id, attempt, _ in logged)
    report.duplicated_side_effects = sum(count - 1 for count in per_attempt.values())
    report.kills_mid_action = len(
        {pid for execution_id, attempt, pid in logged if pid in killed}
        & {pid for execution_id, attempt, pid in logged if per_attempt[(execution_id, attempt)] > 1}
    )


def assert_clean(report: Report, size: Size, processes: list[Prana]) -> None:
    report.publish()
    for process in processes:  # the killed ones included: every log line is one line
        assert "Traceback" not in process.stderr, process.stderr
    assert report.kills >= size.kills
    assert report.cuts >= size.cuts
    assert (report.stuck, report.wrong_outcome, report.double_transitions) == (0, 0, 0)
    # At least once: a duplicate needs a worker that died (or was cut off) mid-attempt, and
    # the ledger shows each of those as an interrupted attempt.
    assert report.duplicated_side_effects <= report.interrupted_in_ledgers
    assert report.interrupted_in_ledgers <= 10 * (report.kills + report.cuts)


class Killer:
    """Kills a worker each time an action has just started in one (seen in the call log)."""

    def __init__(self, log: Path, report: Report, supply: Supply) -> None:
        self.log = log
        self.report = report
        self.supply = supply
        self.seen = 0
        self.killed: set[int] = set()

    def next_action(self, workers: Callable[[], dict[int, Prana]]) -> Prana | None:
        """Wait for an action to start in one of ``workers``; that worker, or None at the end."""
        found: list[Prana] = []

        def started() -> bool:
            self.supply.top_up()
            logged = calls(self.log)
            fresh, self.seen = logged[self.seen :], len(logged)
            alive = workers()
            found.extend(alive[pid] for _, _, pid in reversed(fresh) if pid in alive)
            return bool(found)

        wait_until(started, timeout=30, every=0.002)
        return found[0] if found else None

    def kill(self, worker: Prana) -> None:
        worker.kill()
        self.killed.add(worker.pid)
        self.report.kills += 1


# -- SQLite, one worker -------------------------------------------------------------------


SQLITE = (
    Size(executions=200, kills=24, spread_seconds=40)
    if FULL
    else Size(executions=60, kills=8, spread_seconds=15)
)


def test_sqlite_worker_killed_mid_action_loses_and_doubles_nothing(
    tmp_path: Path, processes: list[Prana]
) -> None:
    """One SQLite worker, killed -9 while it runs actions and restarted: all end as scripted."""
    from scheduling.stores.sqlite import SQLiteStore

    db = str(tmp_path / "fault.db")
    log = tmp_path / "calls.log"
    store = SQLiteStore(db)
    supply = Supply(store, log, SQLITE)
    report = Report(store="sqlite", executions=SQLITE.executions, workers=1)
    killer = Killer(log, report, supply)
    argv = ["worker", "--db", db, "--actions", ACTIONS, "--poll", "0.05", "--lease", "2"]
    argv += ["--max-interruptions", str(NEVER_POISON)]
    alive: dict[int, Prana] = {}

    def start() -> None:
        worker = Prana(argv, cwd=tmp_path)
        processes.append(worker)
        assert worker.wait_for_output("worker on "), worker.stderr
        alive[worker.pid] = worker

    start()
    while report.kills < SQLITE.kills:
        victim = killer.next_action(lambda: alive)
        if victim is None:
            break  # everything ended before enough kills: the assert below says so
        killer.kill(victim)
        del alive[victim.pid]
        start()
    supply.wanted = False
    scripts = supply.scripts
    report.executions = len(scripts)
    try:
        assert wait_until(lambda: settled(store, scripts), timeout=SQLITE.deadline_seconds)
    finally:
        stop_all(alive)
        check(store, scripts, log, report, killer.killed)
        store.close()
    assert_clean(report, SQLITE, processes)
    for worker in alive.values():
        assert worker.wait() == 0, worker.stderr


def stop_all(alive: dict[int, Prana]) -> None:
    """SIGTERM every worker still running (they stop gracefully)."""
    for worker in alive.values():
        worker.send(signal.SIGTERM)


def settled(store: ExecutionStore, scripts: dict[str, tuple[str, ...]]) -> bool:
    final = (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED)
    rows = store.list(limit=len(scripts) + 10)
    return sum(row.status in final for row in rows if row.id in scripts) == len(scripts)


# -- PostgreSQL, three procrastinate workers ------------------------------------------------


POSTGRES = (
    Size(executions=300, kills=24, spread_seconds=45, cuts=10, workers=3)
    if FULL
    else Size(executions=90, kills=8, spread_seconds=20, cuts=4, workers=3)
)
APP_NAME = "prana-fault-worker"


@pytest.fixture
def fault_database(postgres_dsn: str) -> Iterator[str]:
    """A database of this test's own, created for it and dropped (with FORCE) afterwards."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"prana_fault_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(postgres_dsn, dbname=name)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def stuck_report(store: ExecutionStore, scripts: dict[str, tuple[str, ...]], dsn: str) -> str:
    """What holds each execution not settled: its stored row and its procrastinate jobs."""
    import psycopg

    final = (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED)
    lines = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for execution_id in scripts:
            execution, version = store.load(execution_id)
            if execution.status in final:
                continue
            jobs = conn.execute(
                "SELECT id, status::text, scheduled_at, worker_id FROM procrastinate_jobs"
                " WHERE args->>'execution_id' = %s",
                (execution_id,),
            ).fetchall()
            lines.append(
                f"{execution_id}: {execution.status.value} v{version} due {execution.due_at}"
                f" lease {execution.lease_expires_at} suspension"
                f" {execution.suspension and execution.suspension.kind} jobs {jobs}"
            )
        workers = conn.execute("SELECT id, last_heartbeat FROM procrastinate_workers").fetchall()
    return "not settled:\n" + "\n".join(lines) + f"\nworkers: {workers}"


def cut_connections(dsn: str) -> int:
    """End every database backend of the test's workers (by application name); how many."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (APP_NAME,),
        ).fetchall()
    return len(rows)


@pytest.mark.postgres
def test_procrastinate_workers_killed_and_cut_off_lose_and_double_nothing(
    tmp_path: Path, processes: list[Prana], fault_database: str
) -> None:
    """Three procrastinate workers, killed -9 mid-action and cut off: all end as scripted."""
    from scheduling.stores.postgres import PostgresStore

    log = tmp_path / "calls.log"
    store = PostgresStore(fault_database)
    supply = Supply(store, log, POSTGRES)
    report = Report(store="postgres", executions=POSTGRES.executions, workers=POSTGRES.workers)
    killer = Killer(log, report, supply)
    argv = [
        "worker",
        "--postgres",
        fault_database,
        "--scheduler",
        "procrastinate",
        "--actions",
        ACTIONS,
        "--poll",
        "0.5",
        "--lease",
        "2",
        "--max-interruptions",
        str(NEVER_POISON),
    ]
    alive: dict[int, Prana] = {}

    def start() -> None:
        worker = Prana(argv, cwd=tmp_path, env={"PGAPPNAME": APP_NAME})
        processes.append(worker)
        assert worker.wait_for_output("worker on "), worker.stderr
        alive[worker.pid] = worker

    for _ in range(POSTGRES.workers):
        start()
    while report.kills < POSTGRES.kills or report.cuts < POSTGRES.cuts:
        victim = killer.next_action(lambda: alive)
        if victim is None:
            break  # everything ended before enough faults: the assert below says so
        if report.cuts < POSTGRES.cuts and (report.kills >= POSTGRES.kills or report.kills % 2):
            report.cuts += int(cut_connections(fault_database) > 0)
        else:
            killer.kill(victim)
            del alive[victim.pid]
            start()
    supply.wanted = False
    scripts = supply.scripts
    report.executions = len(scripts)
    try:
        ended = wait_until(lambda: settled(store, scripts), timeout=POSTGRES.deadline_seconds)
        assert ended, stuck_report(store, scripts, fault_database)
    finally:
        stop_all(alive)
        check(store, scripts, log, report, killer.killed)
        store.close()
    assert_clean(report, POSTGRES, processes)
    for worker in alive.values():
        assert worker.wait() == 0, worker.stderr


def _now() -> datetime:
    return datetime.now(timezone.utc)


# -- a sub-workflow parent stranded by a kill at a step boundary (issue 22, finding 3) ------


@pytest.mark.parametrize("kill_on", ["execution_suspended:parent", "execution_completed:child"])
def test_a_live_worker_takes_up_a_parent_stranded_by_a_kill(
    kill_on: str, tmp_path: Path, processes: list[Prana]
) -> None:
    """``prana run`` killed (SIGKILL, by its own pid) right after saving a parent and
    before starting its sync child, or right after the child's final save and before the
    parent resumes: the worker already running moves the parent on (it never did)."""
    from scheduling.stores.sqlite import SQLiteStore

    db = str(tmp_path / "stranded.db")
    child = {
        "id": "child",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {"key": "r", "type": "data.set_data", "params": {"fields": {"ok": True}}},
        ],
        "connections": [{"from_node": "start", "to_node": "r"}],
    }
    parent = {
        "id": "parent",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {
                "key": "sub",
                "type": "workflow.execute_workflow",
                "params": {"workflow_id": "child", "mode": "sync"},
            },
        ],
        "connections": [{"from_node": "start", "to_node": "sub"}],
    }
    (tmp_path / "child.json").write_text(json.dumps(child))
    (tmp_path / "parent.json").write_text(json.dumps(parent))
    worker = Prana(
        ["worker", "--db", db, "--actions", ACTIONS, "--poll", "0.1", "--lease", "2"],
        cwd=tmp_path,
    )
    processes.append(worker)
    assert worker.wait_for_output("worker on "), worker.stderr
    run = Prana(
        ["run", "parent.json", "--workflow", "child.json", "--db", db, "--actions", ACTIONS, "-v"],
        cwd=tmp_path,
        env={"PRANA_FAULT_KILL_ON": kill_on},
    )
    processes.append(run)
    assert run.wait() == -signal.SIGKILL, run.stderr
    store = SQLiteStore(db)
    try:
        (row,) = store.list(workflow_id="parent")
        moved = wait_until(
            lambda: store.load(row.id)[0].status is ExecutionStatus.COMPLETED, timeout=30
        )
        assert moved, f"parent still {store.load(row.id)[0].status.value}: {worker.stderr}"
    finally:
        store.close()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.stderr


# -- PostgreSQL restarted and crashed under three procrastinate workers ---------------------


CRASHES = (
    Size(executions=300, kills=12, spread_seconds=90, workers=3, deadline_seconds=60)
    if FULL
    else Size(executions=60, kills=4, spread_seconds=30, workers=3, deadline_seconds=60)
)
"""``kills`` here: how many times the server goes down (restarted or crashed, in turn)."""
FAULT_GAP_SECONDS = (4.0, 8.0)
"""The server goes down every 4 to 8 s (chosen at random, seeded) while the workers run."""
CRASH_LEASE_SECONDS = 2.0


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own (never the shared one), stopped afterwards."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.postgres
def test_procrastinate_workers_leave_nothing_stuck_after_database_crashes(
    tmp_path: Path, processes: list[Prana], own_server: PostgresServer
) -> None:
    """Three procrastinate workers while their server restarts and crashes (kill -9 of the
    postmaster) every few seconds: once it is back for good, every execution ends as
    scripted, within a lease of the workers reconnecting plus the work left."""
    from scheduling.stores.postgres import PostgresStore

    log = tmp_path / "calls.log"
    dsn = own_server.dsn
    store = PostgresStore(dsn)
    scripts = create(store, log, CRASHES.executions, CRASHES.spread_seconds, random.Random(7))
    store.close()  # the test's own reads reconnect once the faults are over
    report = Report(store="postgres-crashes", executions=len(scripts), workers=CRASHES.workers)
    argv = [
        "worker",
        "--postgres",
        dsn,
        "--scheduler",
        "procrastinate",
        "--actions",
        ACTIONS,
        "--poll",
        "0.5",
        "--lease",
        str(CRASH_LEASE_SECONDS),
        "--max-interruptions",
        str(NEVER_POISON),
    ]
    alive: dict[int, Prana] = {}
    for _ in range(CRASHES.workers):
        worker = Prana(argv, cwd=tmp_path)
        processes.append(worker)
        assert worker.wait_for_output("worker on "), worker.stderr
        alive[worker.pid] = worker
    rng = random.Random(22)
    while report.kills < CRASHES.kills:
        threading.Event().wait(rng.uniform(*FAULT_GAP_SECONDS))  # the faults' schedule
        if report.kills % 2:
            own_server.crash()
        else:
            own_server.restart()
        report.kills += 1
    store = PostgresStore(dsn)
    last_fault = time.monotonic()
    try:
        ended = wait_until(lambda: settled(store, scripts), timeout=CRASHES.deadline_seconds)
        report.settle_seconds = round(time.monotonic() - last_fault, 1)
        assert ended, stuck_report(store, scripts, dsn)
    finally:
        stop_all(alive)
        check(store, scripts, log, report, set())
        store.close()
    assert_clean(report, CRASHES, processes)
    for worker in alive.values():
        assert worker.wait() == 0, worker.stderr


# -- long actions due at once on two workers (issue 22, finding 4) ------------------------


LONG_ACTIONS = 16
"""As many as two workers have slots (``--concurrency`` 8 each, the default)."""


@pytest.mark.postgres
def test_long_actions_due_at_once_on_two_workers_all_start_within_a_second(
    tmp_path: Path, processes: list[Prana], fault_database: str
) -> None:
    """16 actions that hold on until released, due at one instant, on 2 procrastinate
    workers with the default ``--batch 32``: every one starts, within 1 s of the instant
    (3 s in CI, where other jobs share the cores).
    Before, one job's batch took most of them and ran them one after another behind the
    first (13-14 in one thread while the other worker idled)."""
    from scheduling.stores.postgres import PostgresStore

    started, release = tmp_path / "started", tmp_path / "release"
    flow = Workflow(
        id="long",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="wait",
                type="wait.wait",
                params={"mode": "schedule", "schedule_at": "{{ $input.main.at }}"},
            ),
            Node(
                key="act",
                type="fault.gate",
                params={"started": str(started), "release": str(release)},
            ),
        ],
        connections=[
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="act"),
        ],
    )
    store = PostgresStore(fault_database)
    due = _now() + timedelta(seconds=8)  # after both workers are up, even on a busy machine
    starter = Runner(load_actions(ACTIONS), store, ManualScheduler(ManualClock(_now())))
    ids = [starter.start(flow, {"at": due.isoformat()}) for _ in range(LONG_ACTIONS)]
    argv = ["worker", "--postgres", fault_database, "--scheduler", "procrastinate"]
    for _ in range(2):
        worker = Prana([*argv, "--actions", ACTIONS], cwd=tmp_path)
        processes.append(worker)
    try:
        for worker in processes:
            assert worker.wait_for_output("worker on "), worker.stderr
        assert _now() < due, "the workers took longer to start than the test allows"
        assert wait_until(
            lambda: started.exists() and len(started.read_text().splitlines()) >= LONG_ACTIONS,
            timeout=30,
        ), f"{len(started.read_text().splitlines()) if started.exists() else 0} started"
        starts = [float(line.split()[2]) for line in started.read_text().splitlines()]
        assert len(starts) == LONG_ACTIONS  # none ran twice
        late = max(starts) - due.timestamp()
        # Every action held on, so all 16 starting at all shows no batch held one back; the
        # bound is the 1 s by hand (PRANA_FAULT_SIZE=full), looser on a shared CI box.
        bound = 1.0 if FULL else 3.0
        assert late <= bound, f"the last action started {late:.2f} s after its due time"
        release.touch()
        assert wait_until(
            lambda: all(store.load(eid)[0].status is ExecutionStatus.COMPLETED for eid in ids)
        )
    finally:
        release.touch()
        for worker in processes:
            worker.send(signal.SIGTERM)
        for worker in processes:
            assert worker.wait() == 0, worker.stderr
        store.close()


# -- one process's clock 2 minutes off (issue 22, finding 2) -------------------------------


LIBFAKETIME_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
SKEW_SECONDS = 120
SKEW_LEASE_SECONDS = 2.0
SKEW_HOLD_SECONDS = 3.0
"""Each attempt runs longer than the lease: its process must renew it, and no other may
take it over."""
SKEW_RETRY_SECONDS = 2.0
SKEW_TIMER_MS = (1000, 3000)
"""The executions' timers fall due evenly between these (from their creation)."""
TOLERANCE_SECONDS = 0.25
"""How early (by the machine's clock) an action may start before its due time: rounding."""
LATE_SECONDS = 15.0
"""How late a retry may start after its due time on a loaded machine (a skew: 120 s)."""
SKEW_LEASE = ("--lease", str(SKEW_LEASE_SECONDS))
WORKER_ARGV = ("worker", "--postgres")
RUN_ARGV = ("run", "wf.json", "--postgres")
RUN_INPUT = ("--input", '{"delay_ms": 1000}')
SKEWED_EXECUTIONS = 16 if FULL else 6
SKEWED_RUNS = 3 if FULL else 1


def skewed(seconds: int) -> dict[str, str]:
    """The environment that puts one process's wall clock ``seconds`` off (libfaketime).

    Its monotonic clock stays the machine's, as a real skew leaves it.
    """
    found = sorted(glob.glob(LIBFAKETIME_GLOB))
    if not found:
        message = "libfaketime is not installed (Debian: apt-get install libfaketime)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return {"LD_PRELOAD": found[-1], "FAKETIME": f"{seconds:+d}s", "DONT_FAKE_MONOTONIC": "1"}


def skew_workflow(log: Path, script: tuple[str, ...] = ("fail", "ok")) -> Workflow:
    """trigger -> a timer (``delay_ms`` from the input) -> ``fault.timed``: a long attempt
    that fails, a retry ``SKEW_RETRY_SECONDS`` later, a long attempt that succeeds."""
    return Workflow(
        id="skew-" + "-".join(script),
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="wait",
                type="wait.wait",
                params={"mode": "interval", "duration": "{{ $input.main.delay_ms }}", "unit": "ms"},
            ),
            Node(
                key="act",
                type="fault.timed",
                params={"log": str(log), "script": list(script), "hold": SKEW_HOLD_SECONDS},
                settings=NodeSettings(
                    retry=RetryPolicy(
                        max_attempts=len(script),
                        backoff="constant",
                        initial_delay=SKEW_RETRY_SECONDS,
                    )
                ),
            ),
        ],
        connections=[
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="act"),
        ],
    )


@attrs.define
class SkewReport:
    """What a run with one process's clock off did, by the machine's clock."""

    case: str
    executions: int
    stuck: int = 0
    runs_twice: int = 0
    """Attempts whose action ran more than once (nothing was killed: none may)."""
    twice_at_once: int = 0
    """Of those, attempts whose two runs overlapped in time."""
    false_interruptions: int = 0
    timers_early: int = 0
    most_early_seconds: float = 0.0
    retries_early: int = 0
    retries_late: int = 0
    most_late_seconds: float = 0.0

    def publish(self) -> None:
        line = json.dumps(attrs.asdict(self))
        print(f"\nskew run: {line}")
        path = os.environ.get("PRANA_FAULT_REPORT")
        if path:
            with open(path, "a") as file:
                file.write(line + "\n")

    def assert_clean(self) -> None:
        self.publish()
        assert attrs.asdict(self) == {
            **attrs.asdict(self),
            **dict.fromkeys(
                (
                    "stuck",
                    "runs_twice",
                    "twice_at_once",
                    "false_interruptions",
                    "timers_early",
                    "retries_early",
                    "retries_late",
                ),
                0,
            ),
        }


def timed_runs(log: Path) -> dict[tuple[str, int], list[tuple[float, float]]]:
    """Every run of an attempt ``fault.timed`` logged: (start, end) by the machine's clock."""
    starts: dict[tuple[str, int, int], list[float]] = {}
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    lines = log.read_text().split("\n")[:-1] if log.exists() else []
    for line in lines:
        execution_id, attempt, what, at, pid = line.split()
        key = (execution_id, int(attempt), int(pid))
        if what == "start":
            starts.setdefault(key, []).append(float(at))
        elif starts.get(key):
            runs.setdefault(key[:2], []).append((starts[key].pop(0), float(at)))
    for key, pending in starts.items():
        for started in pending:  # still running (or its process died): open-ended
            runs.setdefault(key[:2], []).append((started, float("inf")))
    return runs


def skew_check(
    store: ExecutionStore,
    delays: dict[str, int],
    log: Path,
    report: SkewReport,
    created_at: float | None = None,
) -> None:
    """Fill ``report`` from the store and the log of ``fault.timed``.

    A timer is due ``delays[id]`` ms after its execution began: by its record's start time
    when the test began it (its clock is the machine's), else after ``created_at`` (a
    skewed ``prana run`` records its own clock's time; it began it after that).
    """
    runs = timed_runs(log)
    for spans in runs.values():
        if len(spans) > 1:
            report.runs_twice += 1
            spans.sort()
            if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)):
                report.twice_at_once += 1
    for execution_id, delay_ms in delays.items():
        execution, _ = store.load(execution_id)
        if execution.status not in (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED):
            report.stuck += 1
        for node_runs in execution.node_executions.values():
            for node_run in node_runs:
                report.false_interruptions += sum(
                    a.outcome is AttemptOutcome.INTERRUPTED for a in node_run.attempts
                )
        assert execution.started_at is not None
        began = execution.started_at.timestamp() if created_at is None else created_at
        due = began + delay_ms / 1000
        first = runs.get((execution_id, 1))
        if first:
            early = due - min(start for start, _ in first)
            report.most_early_seconds = max(report.most_early_seconds, round(early, 3))
            report.timers_early += early > TOLERANCE_SECONDS
        second = runs.get((execution_id, 2))
        if first and second:
            retry_due = min(end for _, end in first) + SKEW_RETRY_SECONDS
            late = min(start for start, _ in second) - retry_due
            report.most_late_seconds = max(report.most_late_seconds, round(late, 3))
            report.retries_early += late < -TOLERANCE_SECONDS
            report.retries_late += late > LATE_SECONDS


def create_skewed(store: ExecutionStore, log: Path, count: int) -> dict[str, int]:
    """``count`` executions of ``skew_workflow`` waiting on their timers; their delays (ms)."""
    runner = Runner(load_actions(ACTIONS), store, ManualScheduler(ManualClock(_now())))
    low, high = SKEW_TIMER_MS
    delays = {}
    for index in range(count):
        delay_ms = low + (high - low) * index // max(1, count - 1)
        delays[runner.start(skew_workflow(log), {"delay_ms": delay_ms})] = delay_ms
    return delays


@pytest.mark.postgres
@pytest.mark.parametrize("skew", [SKEW_SECONDS, -SKEW_SECONDS])
@pytest.mark.parametrize("scheduler", ["procrastinate", "apscheduler"])
def test_a_worker_whose_clock_is_minutes_off_runs_nothing_twice_nor_early(
    scheduler: str, skew: int, tmp_path: Path, processes: list[Prana], fault_database: str
) -> None:
    """Two workers on one PostgreSQL, one with its wall clock 2 minutes off: no attempt is
    taken over while it runs, no ledger says "interrupted", no timer or retry fires early,
    and none late."""
    from scheduling.stores.postgres import PostgresStore

    log = tmp_path / "calls.log"
    store = PostgresStore(fault_database)
    delays = create_skewed(store, log, SKEWED_EXECUTIONS)
    report = SkewReport(case=f"{scheduler} worker {skew:+d}s", executions=len(delays))
    argv = ["worker", "--postgres", fault_database, "--actions", ACTIONS]
    argv += ["--poll", "0.5", "--lease", str(SKEW_LEASE_SECONDS)]
    if scheduler == "procrastinate":
        argv += ["--scheduler", "procrastinate"]
    alive: dict[int, Prana] = {}
    for env in (skewed(skew), {}):
        worker = Prana(argv, cwd=tmp_path, env=env)
        processes.append(worker)
        assert worker.wait_for_output("worker on "), worker.stderr
        alive[worker.pid] = worker
    try:
        wait_until(lambda: settled(store, dict.fromkeys(delays, ())), timeout=120)
    finally:
        stop_all(alive)
        skew_check(store, delays, log, report)
        store.close()
    report.assert_clean()
    for worker in alive.values():
        assert worker.wait() == 0, worker.stderr
        assert "Traceback" not in worker.stderr, worker.stderr


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("who", "skew"),
    [
        ("run", -SKEW_SECONDS),
        ("run", SKEW_SECONDS),
        ("worker", SKEW_SECONDS),
        ("worker", -SKEW_SECONDS),
    ],
)
def test_prana_run_beside_a_worker_with_clocks_minutes_apart_runs_nothing_twice(
    who: str, skew: int, tmp_path: Path, processes: list[Prana], fault_database: str
) -> None:
    """``prana run`` of a long attempt while a worker runs on the same PostgreSQL, one of
    them 2 minutes off: the worker never takes the live attempt over."""
    from scheduling.stores.postgres import PostgresStore

    log = tmp_path / "calls.log"
    (tmp_path / "wf.json").write_text(dumps_workflow(skew_workflow(log, ("ok",))))
    worker = Prana(
        [*WORKER_ARGV, fault_database, "--actions", ACTIONS, "--poll", "0.2", *SKEW_LEASE],
        cwd=tmp_path,
        env=skewed(skew) if who == "worker" else {},
    )
    processes.append(worker)
    assert worker.wait_for_output("worker on "), worker.stderr
    runs = []
    launched = time.time()
    for _ in range(SKEWED_RUNS):
        run = Prana(
            [*RUN_ARGV, fault_database, "--actions", ACTIONS, *SKEW_LEASE, *RUN_INPUT],
            cwd=tmp_path,
            env=skewed(skew) if who == "run" else {},
        )
        processes.append(run)
        runs.append(run)
    for run in runs:
        assert run.wait(120) == 0, run.stdout + run.stderr
    store = PostgresStore(fault_database)
    try:
        ids = {row.id: 1000 for row in store.list(workflow_id="skew-ok")}
        report = SkewReport(case=f"prana run, {who} {skew:+d}s", executions=len(ids))
        skew_check(store, ids, log, report, created_at=launched)
    finally:
        store.close()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.stderr
    report.assert_clean()
