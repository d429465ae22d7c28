"""Versioned schema migrations: a version table, ordered steps, upgrades and refusals."""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

import pytest

from prana import ExecutionStatus
from scheduling._cli import main
from scheduling._errors import StoreError
from scheduling.stores import postgres as postgres_module
from scheduling.stores import sqlite as sqlite_module
from scheduling.stores._migrations import (
    Migration,
    SchemaBehindError,
    SchemaTooNewError,
    check_sequence,
)
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    from scheduling.stores.postgres import PostgresStore

# prana's tables without a version table (no released prana made such a database).
UNVERSIONED_LAYOUT = """
CREATE TABLE prana_executions (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, workflow_id TEXT NOT NULL,
    workflow_version INTEGER NOT NULL, status TEXT NOT NULL, due_at INTEGER,
    version INTEGER NOT NULL, updated_at INTEGER, data TEXT NOT NULL
);
CREATE TABLE prana_workflows (
    workflow_id TEXT NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (workflow_id, version)
);
INSERT INTO prana_workflows VALUES ('kept', 1, '{}');
"""
FUTURE = Migration(
    sqlite_module.SCHEMA_VERSION + 1,
    "a future column",
    "ALTER TABLE prana_executions ADD COLUMN future_column INTEGER",
)
NEXT = FUTURE.version
"""The version a database would reach with one more migration than this prana has."""


def versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT version FROM prana_schema_version")]


def test_a_new_sqlite_database_records_its_schema_version(tmp_path: Path) -> None:
    """A new database gets every migration and one version row per migration."""
    store = SQLiteStore(tmp_path / "new.db")
    assert store.schema_version == sqlite_module.SCHEMA_VERSION
    assert store.upgraded_from is None
    store.close()
    assert versions(tmp_path / "new.db") == [m.version for m in sqlite_module.SQLITE_MIGRATIONS]


def test_the_sql_stores_are_migrating_stores(tmp_path: Path) -> None:
    """``prana db`` finds the schema version through ``MigratingStore``, not by attribute."""
    from scheduling.abc import MigratingStore
    from scheduling.stores.memory import MemoryStore

    store: MigratingStore = SQLiteStore(tmp_path / "new.db")  # mypy checks the structure too
    assert isinstance(store, MigratingStore)
    assert (store.schema_version, store.upgraded_from) == (sqlite_module.SCHEMA_VERSION, None)
    assert not isinstance(MemoryStore(), MigratingStore)


def test_tables_without_a_version_table_are_refused(tmp_path: Path) -> None:
    """prana's tables without a version table are refused in one line saying what to do;
    nothing is adopted or changed."""
    path = tmp_path / "unversioned.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(UNVERSIONED_LAYOUT)
    with pytest.raises(StoreError, match="no prana_schema_version table") as caught:
        SQLiteStore(path)
    assert "move its tables aside" in str(caught.value)
    assert versions(path) == []
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT * FROM prana_workflows").fetchall() == [("kept", 1, "{}")]


def test_a_newer_schema_is_refused_in_one_clear_line(tmp_path: Path) -> None:
    """A database written by a newer prana is refused; nothing is changed."""
    path = tmp_path / "newer.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO prana_schema_version VALUES (99, 'from the future', 'x')")
    with pytest.raises(SchemaTooNewError, match="version 99, newer than this prana") as caught:
        SQLiteStore(path)
    assert "upgrade prana-workflows" in str(caught.value)
    assert versions(path)[-1] == 99


def test_the_cli_refuses_a_newer_schema_with_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana list`` on a newer schema exits 5 (the store cannot be used), one line."""
    path = tmp_path / "newer.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO prana_schema_version VALUES (99, 'from the future', 'x')")
    assert main(["list", "--db", str(path)]) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "newer than this prana" in err


@pytest.fixture
def with_a_future_migration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQLite store as it would be with one more migration: a new column."""
    migrations = (*sqlite_module.SQLITE_MIGRATIONS, FUTURE)
    check_sequence(migrations)
    monkeypatch.setattr(sqlite_module, "SQLITE_MIGRATIONS", migrations)
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", NEXT)


def test_adding_a_column_is_one_more_migration(
    tmp_path: Path, with_a_future_migration: None
) -> None:
    """An existing database gains the column on open; its executions stay readable."""
    del with_a_future_migration
    path = tmp_path / "v1.db"
    stored_id = database_at_version_1(path)
    store = SQLiteStore(path)
    assert (store.schema_version, store.upgraded_from) == (NEXT, 1)
    (summary,) = store.list()
    assert summary.id == stored_id
    assert store.load(stored_id)[0].status is ExecutionStatus.COMPLETED
    store.close()
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(prana_executions)")]
    assert {"lease_at", "future_column"} <= set(columns)
    assert versions(path) == list(range(1, NEXT + 1))


def database_at_version_1(path: Path) -> str:
    """A database at schema version 1 holding one completed execution; returns its id."""
    from prana import Node, Registry, Workflow, execute_workflow

    workflow = Workflow(id="w", nodes=[Node(key="t", type="manual.trigger")], connections=[])
    original = sqlite_module.SQLITE_MIGRATIONS[:1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite_module, "SQLITE_MIGRATIONS", original)
        patch.setattr(sqlite_module, "SCHEMA_VERSION", 1)
        store = SQLiteStore(path)
        execution = execute_workflow(workflow, None, registry=Registry()).execution
        store.save(execution, None)
        store.close()
    assert execution.status is ExecutionStatus.COMPLETED
    return execution.id


def test_upgrade_false_refuses_a_database_that_is_behind(
    tmp_path: Path, with_a_future_migration: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """With upgrade=False an older schema is refused; ``prana db upgrade`` then upgrades it."""
    del with_a_future_migration
    path = tmp_path / "v1.db"
    database_at_version_1(path)
    with pytest.raises(SchemaBehindError, match="run `prana db upgrade`"):
        SQLiteStore(path, upgrade=False)
    assert main(["db", "status", "--db", str(path)]) == 5
    assert "prana db upgrade" in capsys.readouterr().err
    assert main(["db", "upgrade", "--db", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"schema upgraded from version 1 to {NEXT}"
    assert main(["db", "status", "--db", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"schema at version {NEXT} (up to date)"


def test_migration_lists_are_numbered_in_order() -> None:
    """Both stores' migrations are numbered 1..n; a gap is refused."""
    check_sequence(sqlite_module.SQLITE_MIGRATIONS)
    check_sequence(postgres_module.POSTGRES_MIGRATIONS)
    with pytest.raises(AssertionError, match=r"numbered 1\.\.n"):
        check_sequence([FUTURE])


@pytest.mark.postgres
def test_postgres_records_refuses_newer_and_adopts_old(
    postgres_store: PostgresStore, postgres_dsn: str
) -> None:
    """PostgreSQL: a version row per migration; unversioned tables and a newer schema refused."""
    import psycopg
    from psycopg import sql

    from scheduling.abc import MigratingStore
    from scheduling.stores.postgres import PostgresStore

    postgres_store.setup()
    assert isinstance(postgres_store, MigratingStore)
    assert postgres_store.schema_version == postgres_module.SCHEMA_VERSION
    table = sql.Identifier(postgres_store.schema or "public", "prana_schema_version")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute(sql.SQL("SELECT version FROM {}").format(table)).fetchall()
        assert rows == [(v,) for v in range(1, postgres_module.SCHEMA_VERSION + 1)]
        conn.execute(sql.SQL("DELETE FROM {}").format(table))
    unversioned = PostgresStore(postgres_dsn, schema=postgres_store.schema)
    try:
        with pytest.raises(StoreError, match="no prana_schema_version table"):
            unversioned.setup()
        with pytest.raises(StoreError, match="no prana_schema_version table"):
            unversioned.stored_schema_version()
    finally:
        unversioned.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute(sql.SQL("SELECT version FROM {}").format(table)).fetchall() == []
        conn.execute(sql.SQL("INSERT INTO {} (version, description) VALUES (1, 'x')").format(table))
        conn.execute(
            sql.SQL("INSERT INTO {} (version, description) VALUES (7, 'future')").format(table)
        )
    newer = PostgresStore(postgres_dsn, schema=postgres_store.schema)
    try:
        with pytest.raises(SchemaTooNewError, match="version 7, newer than this prana"):
            newer.setup()
    finally:
        newer.close()


def test_db_status_is_read_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``prana db status`` creates no file, table or journal: "no database" exits 5."""
    missing, empty = tmp_path / "missing.db", tmp_path / "empty.db"
    empty.touch()
    for path in (missing, empty):
        assert main(["db", "status", "--db", str(path)]) == 5
        err = capsys.readouterr().err
        assert err.startswith(f"prana: error: no database at {path}")
        assert err.count("\n") == 1
    assert not missing.exists()
    assert empty.stat().st_size == 0
    SQLiteStore(tmp_path / "kept.db").close()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["db", "status", "--db", str(tmp_path / "kept.db")]) == 0
    current = sqlite_module.SCHEMA_VERSION
    assert capsys.readouterr().out.strip() == f"schema at version {current} (up to date)"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_db_status_reports_a_behind_schema_without_upgrading_it(
    tmp_path: Path, with_a_future_migration: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A schema that is behind is reported (exit 5) and left as it was."""
    del with_a_future_migration
    path = tmp_path / "v1.db"
    database_at_version_1(path)
    assert main(["db", "status", "--db", str(path)]) == 5
    err = capsys.readouterr().err
    assert f"at version 1, this prana needs {NEXT}; run `prana db upgrade`" in err
    assert versions(path) == [1]


def test_db_status_refuses_tables_without_a_version_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tables without a version table are refused in one line (exit 5); status records
    nothing."""
    path = tmp_path / "unversioned.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(UNVERSIONED_LAYOUT)
    assert main(["db", "status", "--db", str(path)]) == 5
    err = capsys.readouterr().err
    assert "no prana_schema_version table" in err
    assert err.count("\n") == 1
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "prana_schema_version" not in tables


def test_db_status_on_a_file_that_is_not_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that is not SQLite is refused in one line (exit 5), left unchanged."""
    path = tmp_path / "notes.db"
    path.write_text("not a database " * 100)
    assert main(["db", "status", "--db", str(path)]) == 5
    assert "not a prana database" in capsys.readouterr().err
    assert path.read_text() == "not a database " * 100


@pytest.mark.postgres
def test_db_status_on_postgres_creates_nothing(
    postgres_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL: status on a schema without prana tables says so and creates none."""
    import uuid

    import psycopg

    schema = f"prana_test_{uuid.uuid4().hex[:12]}"
    args = ["db", "status", "--postgres", postgres_dsn, "--schema", schema]
    assert main(args) == 5
    assert f"no database at PostgreSQL schema {schema}" in capsys.readouterr().err
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert found is None
    try:
        assert main(["db", "upgrade", "--postgres", postgres_dsn, "--schema", schema]) == 0
        out = capsys.readouterr().out.strip()
        latest = postgres_module.SCHEMA_VERSION
        assert out == f"schema created at version {latest} (PostgreSQL schema {schema})"
        assert main(args) == 0
        assert capsys.readouterr().out.strip() == f"schema at version {latest} (up to date)"
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_db_upgrade_of_no_database_says_it_created_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana db upgrade`` where there is no database says it created one (it said the
    schema was "up to date"), and the second run says up to date."""
    path = tmp_path / "new.db"
    assert main(["db", "upgrade", "--db", str(path)]) == 0
    current = sqlite_module.SCHEMA_VERSION
    assert capsys.readouterr().out.strip() == f"schema created at version {current} ({path})"
    assert main(["db", "upgrade", "--db", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"schema at version {current} (up to date)"


UPGRADED = (
    "upgraded the database schema from version 1 to {to} ({where}); earlier prana versions "
    "can no longer open it, and one still running must be stopped"
)


def test_opening_an_older_database_warns_once_that_it_upgraded_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, with_a_future_migration: None
) -> None:
    """An upgrade on open is one WARNING on ``scheduling.stores``; a store that upgraded
    nothing (a new database, or one already up to date) logs none."""
    del with_a_future_migration
    path = tmp_path / "v1.db"
    database_at_version_1(path)
    with caplog.at_level(logging.WARNING, logger="scheduling"):
        SQLiteStore(path).close()
        SQLiteStore(path).close()
        SQLiteStore(tmp_path / "new.db").close()
    [record] = caplog.records
    assert (record.name, record.levelno) == ("scheduling.stores", logging.WARNING)
    current = sqlite_module.SCHEMA_VERSION
    assert record.getMessage() == UPGRADED.format(to=current, where=path)


def test_the_cli_says_on_stderr_that_it_upgraded_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_a_future_migration: None
) -> None:
    """``prana list`` on an older database says on stderr, in one line, that it upgraded
    it; ``prana db upgrade`` says it once, on stdout, as before."""
    del with_a_future_migration
    listed, upgraded = tmp_path / "listed.db", tmp_path / "upgraded.db"
    stored_id = database_at_version_1(listed)
    database_at_version_1(upgraded)
    current = sqlite_module.SCHEMA_VERSION
    assert main(["list", "--db", str(listed)]) == 0
    out, err = capsys.readouterr()
    assert stored_id[:8] in out
    assert err == f"prana: warning: {UPGRADED.format(to=current, where=listed)}\n"
    assert main(["list", "--db", str(listed)]) == 0
    assert capsys.readouterr().err == ""
    assert main(["db", "upgrade", "--db", str(upgraded)]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (f"schema upgraded from version 1 to {current}\n", "")


@pytest.mark.postgres
def test_postgres_warns_once_that_it_upgraded_the_schema(
    postgres_store: PostgresStore,
    postgres_dsn: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL: an upgrade on open (here to a future version) is one WARNING naming the
    schema; opening it again logs none."""
    from scheduling.stores.postgres import PostgresStore

    postgres_store.setup()
    future = Migration(
        postgres_module.SCHEMA_VERSION + 1,
        "a future column",
        "ALTER TABLE {executions} ADD COLUMN future_column INTEGER",
    )
    monkeypatch.setattr(
        postgres_module, "POSTGRES_MIGRATIONS", (*postgres_module.POSTGRES_MIGRATIONS, future)
    )
    monkeypatch.setattr(postgres_module, "SCHEMA_VERSION", future.version)
    with caplog.at_level(logging.WARNING, logger="scheduling"):
        for _ in "ab":
            store = PostgresStore(postgres_dsn, schema=postgres_store.schema)
            try:
                store.setup()
            finally:
                store.close()
    [record] = caplog.records
    assert record.name == "scheduling.stores"
    assert record.getMessage().startswith(
        f"upgraded the database schema from version {future.version - 1} to {future.version} "
        f"(PostgreSQL schema {postgres_store.schema or 'public'})"
    )
