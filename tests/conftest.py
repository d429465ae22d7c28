"""Shared fixtures: a clock, a registry of test actions, the PostgreSQL server, the stores.

Hypothesis profiles: ``ci`` (loaded when ``CI`` is set) is derandomized, so every CI run
tries the same examples and a failure reproduces; ``dev`` (otherwise) draws new examples each
run. ``HYPOTHESIS_PROFILE=ci`` runs CI's examples by hand.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from doubles import HYPOTHESIS_PROFILE, T0, raising
from hypothesis import HealthCheck, settings

from prana import ActionContext, Registry
from prana.testing import ManualClock

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from processes import Prana

    from scheduling.abc import ExecutionStore
    from scheduling.stores.memory import MemoryStore
    from scheduling.stores.postgres import PostgresStore
    from scheduling.stores.sqlite import SQLiteStore

DEFAULT_POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=timedelta(seconds=2))
settings.load_profile(HYPOTHESIS_PROFILE)


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock standing at ``T0``."""
    return ManualClock(T0)


def _inputs(params: Any, ctx: ActionContext) -> Any:
    return dict(ctx.input)


@pytest.fixture
def registry() -> Registry:
    """The built-in actions and a few test ones, each a pure function of its params and input.

    ``test.double`` doubles its input, ``test.add`` adds ``n`` (1) to it, ``test.echo``
    returns its params and input, ``test.inputs`` its input by port, ``test.down`` always
    raises ``ConnectionError("down")``.
    """
    reg = Registry()
    reg.register("test.double", lambda p, ctx: ctx.input["main"] * 2)
    reg.register("test.add", lambda p, ctx: ctx.input["main"] + p.get("n", 1))
    reg.register("test.echo", lambda p, ctx: {"params": dict(p), "input": dict(ctx.input)})
    reg.register("test.inputs", _inputs)
    reg.register("test.down", raising(ConnectionError("down")))
    return reg


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """The test server's DSN (``PRANA_TEST_POSTGRES_DSN``); skipped if unreachable, unless in CI.

    In CI (env ``CI`` set) an unreachable server fails the test loudly instead.
    """
    import psycopg

    dsn = os.environ.get("PRANA_TEST_POSTGRES_DSN", DEFAULT_POSTGRES_DSN)
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL test server unreachable at PRANA_TEST_POSTGRES_DSN: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return dsn


@pytest.fixture
def processes() -> Iterator[list[Prana]]:
    """The ``prana`` processes a test starts (append each); any still running is killed by pid."""
    started: list[Prana] = []
    yield started
    for process in started:
        process.stop()


@pytest.fixture
def memory_store() -> MemoryStore:
    """A fresh in-memory store keeping live records (the default)."""
    from scheduling.stores.memory import MemoryStore

    return MemoryStore()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A SQLite store on a fresh file in ``tmp_path``."""
    from scheduling.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "prana.sqlite3")
    yield store
    store.close()


@pytest.fixture
def postgres_store(postgres_dsn: str) -> Iterator[PostgresStore]:
    """A PostgreSQL store in its own fresh schema, dropped (with its tables) afterwards."""
    import psycopg
    from psycopg import sql

    from scheduling.stores.postgres import PostgresStore

    schema = f"prana_test_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(postgres_dsn, schema=schema)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(
    params=[
        "memory",
        "memory-json",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def store(request: pytest.FixtureRequest) -> ExecutionStore:
    """Each store in turn: the conformance suite runs every test against all of them."""
    from scheduling.stores.memory import MemoryStore

    if request.param == "memory":
        return MemoryStore()
    if request.param == "memory-json":
        return MemoryStore(serialize=True)
    fixture: ExecutionStore = request.getfixturevalue(f"{request.param}_store")
    return fixture
