"""``prana db upgrade`` and ``prana db status``: the store's versioned schema."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from typing import TYPE_CHECKING

from scheduling._cli._common import (
    EXIT_OK,
    CLIError,
    StoreUnavailableError,
    db_path,
    no_database,
    open_store,
    postgres_dsn,
    postgres_schema,
)
from scheduling.abc import MigratingStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``db`` (with ``upgrade`` and ``status``) to the parser."""
    db = add("db", "the database schema: upgrade it to this prana's version, or show it")
    db.add_argument(
        "action",
        choices=("upgrade", "status"),
        help="upgrade: apply the migrations the database lacks; status: show its version",
    )
    db.add_argument(
        "--json",
        action="store_true",
        help="status: print JSON (schema_version, code_schema_version, state; see the docs)",
    )
    db.set_defaults(handler=_cmd_db)


def _cmd_db(args: argparse.Namespace) -> int:
    if args.action == "status":
        return _status(args)
    stored, where, _ = _stored_version(args)
    with _upgrade_said_here():
        store = open_store(args, must_exist=False, upgrade=True)
    try:
        if not isinstance(store, MigratingStore):  # pragma: no cover - the CLI opens SQL stores
            raise CLIError(f"prana db: a {type(store).__name__} has no versioned schema")
        version, before = store.schema_version, store.upgraded_from
    finally:
        store.close()
    if before is not None:
        print(f"schema upgraded from version {before} to {version}")
    elif stored is None:
        print(f"schema created at version {version} ({where})")
    else:
        print(f"schema at version {version} (up to date)")
    return EXIT_OK


@contextlib.contextmanager
def _upgrade_said_here() -> Iterator[None]:
    """Leave out the store's own warning that it upgraded the schema: the line below says it."""
    from scheduling.stores._migrations import UPGRADED_FROM, logger

    def other(record: logging.LogRecord) -> bool:
        return not hasattr(record, UPGRADED_FROM)

    logger.addFilter(other)
    try:
        yield
    finally:
        logger.removeFilter(other)


def _status(args: argparse.Namespace) -> int:
    """Report the schema version without creating or changing anything (read-only)."""
    from scheduling.stores._migrations import SchemaBehindError, SchemaTooNewError

    version, where, latest = _stored_version(args)
    if version is None:
        raise no_database(where)
    if args.json:
        state = "current" if version == latest else ("newer" if version > latest else "behind")
        said = {"format": 1, "database": where, "schema_version": version}
        print(json.dumps({**said, "code_schema_version": latest, "state": state}, indent=2))
    if version > latest:
        raise SchemaTooNewError(
            f"{where}: the database schema is at version {version}, newer than this prana "
            f"(which knows up to {latest}); upgrade prana-workflows to use it"
        )
    if version < latest:
        raise SchemaBehindError(
            f"{where}: the database schema is at version {version}, this prana needs "
            f"{latest}; run `prana db upgrade`"
        )
    if not args.json:
        print(f"schema at version {version} (up to date)")
    return EXIT_OK


def _stored_version(args: argparse.Namespace) -> tuple[int | None, str, int]:
    """The stored schema version (None: no database), where, and this prana's version;
    read-only."""
    dsn = postgres_dsn(args)
    if dsn is not None:
        from scheduling.stores.postgres import SCHEMA_VERSION, PostgresStore

        schema = postgres_schema(args)
        store = PostgresStore(dsn, schema=schema)
        try:
            version = store.stored_schema_version()
        except Exception as exc:  # noqa: BLE001 - any driver error becomes one clear line
            raise StoreUnavailableError(f"--postgres: cannot use the database: {exc}") from None
        finally:
            store.close()
        where = f"PostgreSQL schema {schema or 'public'}"
        latest = SCHEMA_VERSION
    else:
        from scheduling.stores.sqlite import SCHEMA_VERSION, stored_schema_version

        where = db_path(args)
        version = stored_schema_version(where)
        latest = SCHEMA_VERSION
    return version, where, latest
