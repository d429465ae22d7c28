"""Stores when the database misbehaves: errors are ``StoreError`` in one line, reads reconnect.

Every PostgreSQL test here uses a store whose connections carry an ``application_name`` of
its own, so cutting "its" connections (``pg_terminate_backend``) never touches anyone else's.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from prana import Node, Workflow, WorkflowExecution, execute_workflow
from scheduling import StoreError
from scheduling.stores.postgres import PostgresStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.postgres

WORKFLOW = Workflow(id="faults", nodes=[Node(key="start", type="manual.trigger")], connections=[])


class Cut:
    """A store over its own schema and ``application_name``, and a way to cut its connections."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = f"prana_faults_{uuid.uuid4().hex[:12]}"
        self.name = f"prana-faults-{uuid.uuid4().hex[:12]}"
        self.store = PostgresStore(
            make_conninfo(dsn, application_name=self.name), schema=self.schema
        )

    def terminate(self) -> int:
        """End every server backend of this store; return how many."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (self.name,),
            ).fetchall()
        return len(rows)

    def admin(self, statement: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL(statement).format(schema=sql.Identifier(self.schema)))


@pytest.fixture
def cut(postgres_dsn: str) -> Iterator[Cut]:
    found = Cut(postgres_dsn)
    try:
        yield found
    finally:
        found.store.close()
        found.admin("DROP SCHEMA IF EXISTS {schema} CASCADE")


def a_saved_execution(store: PostgresStore) -> str:
    execution = execute_workflow(WORKFLOW, {"x": 1}).execution
    assert execution is not None
    store.save_workflow(WORKFLOW)
    store.save(execution, None)
    return execution.id


def test_reads_reconnect_after_the_connections_were_cut(cut: Cut) -> None:
    """A read on a connection the server ended is retried once on a fresh one, and succeeds."""
    execution_id = a_saved_execution(cut.store)
    assert cut.terminate() >= 1
    execution, version = cut.store.load(execution_id)
    assert (execution.id, version) == (execution_id, 1)
    assert cut.terminate() >= 1
    assert [row.id for row in cut.store.list()] == [execution_id]
    assert cut.terminate() >= 1
    assert cut.store.find_due(datetime.now(timezone.utc)) == []


def test_a_write_on_a_cut_connection_is_a_store_error_and_the_next_one_works(cut: Cut) -> None:
    """A save whose connection was cut raises ``StoreError`` (never retried blind); then works."""
    execution_id = a_saved_execution(cut.store)
    execution, version = cut.store.load(execution_id)
    assert cut.terminate() >= 1
    with pytest.raises(StoreError) as caught:
        cut.store.save(execution, version)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("PostgreSQL: save of execution")
    assert isinstance(caught.value.__cause__, psycopg.Error)
    assert cut.store.save(execution, version) == version + 1


CALLS: list[tuple[str, Callable[[PostgresStore, WorkflowExecution], Any]]] = [
    ("load", lambda store, execution: store.load(execution.id)),
    ("save", lambda store, execution: store.save(execution, 1)),
    ("find_due", lambda store, execution: store.find_due(datetime.now(timezone.utc))),
    ("alarms", lambda store, execution: store.alarms()),
    ("list", lambda store, execution: store.list()),
    (
        "save_workflow",
        lambda store, execution: store.save_workflow(
            Workflow(id="other", nodes=WORKFLOW.nodes, connections=[])
        ),
    ),
    (
        "latest_workflow_version",
        lambda store, execution: store.latest_workflow_version("faults"),
    ),
]


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
def test_every_database_error_is_a_store_error_in_one_line(
    cut: Cut, name: str, call: Callable[[PostgresStore, WorkflowExecution], Any]
) -> None:
    """A server-side failure (here: the tables are gone) is a one-line ``StoreError``."""
    execution_id = a_saved_execution(cut.store)
    execution, _ = cut.store.load(execution_id)
    cut.admin("DROP TABLE {schema}.prana_executions, {schema}.prana_workflows")
    with pytest.raises(StoreError) as caught:
        call(cut.store, execution)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("PostgreSQL: ")
    assert "does not exist" in message
    assert isinstance(caught.value.__cause__, psycopg.Error)
