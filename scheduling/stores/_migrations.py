"""Versioned schema migrations for the SQL stores: ordered steps and a version table.

Each store lists its migrations in order, numbered from 1 without gaps; the database keeps
one row per applied migration in ``prana_schema_version``. Opening a store applies the
ones it lacks, in order, inside one transaction (or refuses with ``upgrade=False``), and
refuses a database whose schema is newer than the code. Changing the schema (a column, an
index) is one new migration at the end of the list, never an edit of an old one. An upgrade
on open is logged once, at WARNING on ``scheduling.stores`` (``log_upgrade``): an operator
sees that earlier releases can no longer use the database.

Tables named as prana's without a version table were not made by a released prana: they
are refused (``unversioned_error``), never adopted or altered.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from scheduling._errors import StoreError

VERSION_TABLE = "prana_schema_version"

logger = logging.getLogger("scheduling.stores")
UPGRADED_FROM = "prana_schema_upgraded_from"
"""The attribute of the upgrade's log record holding the version it upgraded from."""


@attrs.frozen
class Migration:
    """One schema step: its number, what it does (for ``prana db upgrade``), its SQL."""

    version: int
    description: str
    sql: str


class SchemaTooNewError(StoreError):
    """The database's schema is newer than this prana; upgrade prana-workflows to use it."""


class SchemaBehindError(StoreError):
    """The database's schema is older than this prana and the store may not upgrade it."""


def unversioned_error(where: str) -> StoreError:
    """The refusal of prana's tables without a version table (no released prana made them)."""
    return StoreError(
        f"{where}: holds a prana_executions table but no {VERSION_TABLE} table, so no released "
        "prana made it; move its tables aside (or use another database) and open it again"
    )


def check_sequence(migrations: Sequence[Migration]) -> None:
    """Migrations are numbered 1, 2, 3, ... in order (an import-time check of the lists)."""
    numbers = [m.version for m in migrations]
    if numbers != list(range(1, len(numbers) + 1)):
        raise AssertionError(f"migrations must be numbered 1..n in order, got {numbers}")


def pending(
    current: int, migrations: Sequence[Migration], *, where: str, upgrade: bool
) -> list[Migration]:
    """The migrations a database at ``current`` lacks; refuses a newer schema.

    With ``upgrade=False`` an existing database that lacks migrations is refused (a new,
    empty one is still created).
    """
    latest = migrations[-1].version
    if current > latest:
        raise SchemaTooNewError(
            f"{where}: the database schema is at version {current}, newer than this prana "
            f"(which knows up to {latest}); upgrade prana-workflows to use it"
        )
    todo = [m for m in migrations if m.version > current]
    if todo and current > 0 and not upgrade:
        raise SchemaBehindError(
            f"{where}: the database schema is at version {current}, this prana needs {latest}; "
            "run `prana db upgrade` (or open the store with upgrade=True)"
        )
    return todo


def log_upgrade(where: str, before: int, after: int) -> None:
    """Say once, at WARNING, that opening the store upgraded the database at ``where``."""
    logger.warning(
        "upgraded the database schema from version %d to %d (%s); earlier prana versions "
        "can no longer open it, and one still running must be stopped",
        before,
        after,
        where,
        extra={UPGRADED_FROM: before, "prana_schema_version": after},
    )
