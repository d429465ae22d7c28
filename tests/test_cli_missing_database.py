"""A command that reads the store, pointed at a database that does not exist: one line saying
so, exit 5 (the store cannot be used), and nothing created (was: exit 2, a usage mistake, and
on PostgreSQL the schema and tables were created by ``prana list``)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import TYPE_CHECKING

import psycopg
import pytest
from processes import ROOT

from scheduling._cli import main
from scheduling._cli._common import EXIT_UNAVAILABLE

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["list", "--status", "failed", "--json"],
        ["show", "abc"],
        ["cancel", "abc"],
        ["deliver", "abc", "--data", "{}"],
        ["redrive", "abc"],
        ["workflows", "list"],
        ["db", "status"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_a_missing_sqlite_database_is_exit_5_and_stays_missing(
    tmp_path: Path, argv: list[str]
) -> None:
    """``prana list --db missing.sqlite`` (as a process): one line naming the path, exit 5,
    no file made."""
    result = subprocess.run(
        [sys.executable, "-m", "prana", *argv, "--db", "missing.sqlite"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_UNAVAILABLE == 5, result.stderr
    assert result.stderr.startswith("prana: error: no database at missing.sqlite"), result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""
    assert not (tmp_path / "missing.sqlite").exists()


@pytest.mark.postgres
@pytest.mark.parametrize("argv", [["list"], ["show", "abc"], ["db", "status"]], ids=" ".join)
def test_a_postgres_schema_without_prana_tables_is_exit_5_and_stays_empty(
    postgres_dsn: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """PostgreSQL: a schema without prana tables is "no database", exit 5; nothing created."""
    schema = f"prana_missing_{uuid.uuid4().hex[:12]}"
    try:
        code = main([*argv, "--postgres", postgres_dsn, "--schema", schema])
        err = capsys.readouterr().err
        assert code == 5
        assert err.startswith(f"prana: error: no database at PostgreSQL schema {schema}")
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
            ).fetchone()
        assert found is None
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
