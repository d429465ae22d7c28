"""``prana db upgrade`` and ``prana db status``: the store's versioned schema."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from scheduling._cli._common import EXIT_OK, CLIError, open_store
from scheduling.abc import MigratingStore

if TYPE_CHECKING:
    from scheduling._cli._common import AddCommand


def register(add: AddCommand) -> None:
    """Add ``db`` (with ``upgrade`` and ``status``) to the parser."""
    db = add("db", "the database schema: upgrade it to this prana's version, or show it")
    db.add_argument(
        "action",
        choices=("upgrade", "status"),
        help="upgrade: apply the migrations the database lacks; status: show its version",
    )
    db.set_defaults(handler=_cmd_db)


def _cmd_db(args: argparse.Namespace) -> int:
    upgrade = args.action == "upgrade"
    store = open_store(args, must_exist=not upgrade, upgrade=upgrade)
    try:
        if not isinstance(store, MigratingStore):  # pragma: no cover - the CLI opens SQL stores
            raise CLIError(f"prana db: a {type(store).__name__} has no versioned schema")
        version, before = store.schema_version, store.upgraded_from
    finally:
        store.close()
    if before is not None:
        print(f"schema upgraded from version {before} to {version}")
    else:
        print(f"schema at version {version} (up to date)")
    return EXIT_OK
