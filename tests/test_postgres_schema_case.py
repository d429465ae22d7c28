"""A PostgreSQL schema named in mixed case (``--schema Orders``) is the schema used throughout.

Was: the store created the schema quoted (case kept) but looked its tables up with
``to_regclass('Orders.prana_executions')``, which folds the name to ``orders``, so ``prana db
status`` said the schema held no prana tables; and the procrastinate adapter set
``search_path=Orders`` unquoted, so its setup failed with "no schema has been selected to
create in".
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql

from scheduling.stores.postgres import SCHEMA_VERSION, PostgresStore

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres


@pytest.fixture
def mixed_schema(postgres_dsn: str) -> Iterator[str]:
    """A fresh schema name in mixed case, dropped afterwards (and its folded twin)."""
    name = f"Prana_Mixed_{uuid.uuid4().hex[:8].upper()}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for schema in (name, name.lower()):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _tables_in(dsn: str, schema: str, prefix: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = %s AND table_name LIKE %s",
            (schema, prefix + "%"),
        ).fetchall()
    return {row[0] for row in rows}


def test_the_store_reads_its_schema_version_in_a_mixed_case_schema(
    postgres_dsn: str, mixed_schema: str
) -> None:
    """``stored_schema_version`` (``prana db status``) finds the tables setup made."""
    store = PostgresStore(postgres_dsn, schema=mixed_schema)
    try:
        store.setup()
        assert store.stored_schema_version() == SCHEMA_VERSION
    finally:
        store.close()
    assert "prana_executions" in _tables_in(postgres_dsn, mixed_schema, "prana_")
    assert not _tables_in(postgres_dsn, mixed_schema.lower(), "prana_")


def test_procrastinate_sets_up_its_tables_in_a_mixed_case_schema(
    postgres_dsn: str, mixed_schema: str
) -> None:
    """The procrastinate adapter's tables go into the schema named, case kept."""
    pytest.importorskip("procrastinate")
    from scheduling.adapters.procrastinate import ProcrastinateScheduler

    scheduler = ProcrastinateScheduler(postgres_dsn, schema=mixed_schema, run_in_thread=False)
    try:
        scheduler.setup()
    finally:
        scheduler.shutdown()
    assert "procrastinate_jobs" in _tables_in(postgres_dsn, mixed_schema, "procrastinate_")
