"""Runner benchmark: resume throughput through the whole shell.

Run by hand: ``python bench/bench_runner.py [N]``. For each store, N executions (default
1,000) are started and each suspends on a retry after its first attempt fails; then one
``ManualScheduler.advance`` fires all N alarms, and each fire loads the execution,
resumes it (the attempt succeeds), saves it with compare-and-set and settles it. Prints
executions resumed per second (best of 3 rounds). Targets (issue 4): >= 50,000/s with
``MemoryStore``, >= 10,000/s with ``SQLiteStore`` (file, WAL, ``synchronous=NORMAL``).
PostgreSQL runs when ``PRANA_TEST_POSTGRES_DSN`` (or the default test DSN) is reachable.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prana import (
    ActionContext,
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Workflow,
)
from prana.testing import ManualClock
from scheduling import ExecutionStore, Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
TARGETS = {"memory": 50_000, "memory-json": None, "sqlite": 10_000, "postgres": None}


def fails_once(params: Any, ctx: ActionContext) -> Any:
    """Fail the first attempt, succeed on the retry."""
    if ctx.attempt == 1:
        raise ConnectionError("first attempt fails")
    return ctx.attempt


WORKFLOW = Workflow(
    id="bench.retry",
    nodes=(
        Node(key="start", type="manual.trigger"),
        Node(
            key="r",
            type="bench.fails_once",
            settings=NodeSettings(retry=RetryPolicy(max_attempts=2, initial_delay=1)),
        ),
    ),
    connections=(Connection(from_node="start", to_node="r"),),
)


def one_round(store: ExecutionStore, n: int) -> float:
    """Start ``n`` executions (untimed), then time firing all their alarms; resumes per second."""
    registry = Registry()
    registry.register("bench.fails_once", fails_once)
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=timezone.utc))
    scheduler = ManualScheduler(clock)
    runner = Runner(registry, store, scheduler)
    with runner:
        ids = [runner.start(WORKFLOW) for _ in range(n)]
        assert len(scheduler.pending()) == n
        gc.collect()
        start = time.perf_counter()
        fired = scheduler.advance(1)
        elapsed = time.perf_counter() - start
    assert len(fired) == n
    assert runner.get(ids[-1]).status is ExecutionStatus.COMPLETED
    return n / elapsed


def stores() -> list[tuple[str, Callable[[], ExecutionStore], Callable[[], None]]]:
    tmp = Path(tempfile.mkdtemp(prefix="prana-bench-"))
    made: list[Any] = []

    def sqlite() -> ExecutionStore:
        store = SQLiteStore(tmp / f"{uuid.uuid4().hex}.db", synchronous="NORMAL")
        made.append(store)
        return store

    def close_all() -> None:
        for store in made:
            store.close()
        made.clear()

    out: list[tuple[str, Callable[[], ExecutionStore], Callable[[], None]]] = [
        ("memory", MemoryStore, close_all),
        ("memory-json", lambda: MemoryStore(serialize=True), close_all),
        ("sqlite", sqlite, close_all),
    ]
    dsn = os.environ.get("PRANA_TEST_POSTGRES_DSN", DEFAULT_DSN)
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means: no PostgreSQL row
        print(f"(postgres skipped: {exc})")
        return out

    schemas: list[str] = []

    def postgres() -> ExecutionStore:
        from scheduling.stores.postgres import PostgresStore

        schema = f"prana_bench_{uuid.uuid4().hex[:10]}"
        schemas.append(schema)
        store = PostgresStore(dsn, schema=schema)
        made.append(store)
        return store

    def close_postgres() -> None:
        from psycopg import sql

        close_all()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
        schemas.clear()

    out.append(("postgres", postgres, close_postgres))
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(f"Runner resume throughput: {n} due retry executions fired by one advance()")
    print(f"{'store':<12} {'resumed/s':>12} {'target':>10}")
    for name, make, cleanup in stores():
        try:
            best = max(one_round(make(), n) for _ in range(3))
        finally:
            cleanup()
        target = TARGETS.get(name)
        verdict = "-" if target is None else ("ok" if best >= target else f"MISS {target:,}")
        print(f"{name:<12} {best:>12,.0f} {verdict:>10}")


if __name__ == "__main__":
    main()
