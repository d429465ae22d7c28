"""Argument checks shared by the stores and the scheduler adapters.

Here, not in ``stores/`` or ``adapters/``, so neither kind of backend imports the other.
"""

from __future__ import annotations

from typing import Any

from prana import InvalidSettingsError

__all__ = ["check_schema_name"]


def check_schema_name(name: Any, field: str) -> str:
    """A plain SQL identifier (letters, digits, underscores; not starting with a digit)."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > 40
        or not name.isascii()
        or not (name.replace("_", "a").isalnum())
        or name[0].isdigit()
    ):
        raise InvalidSettingsError(
            f"{field}={name!r}: use letters, digits and underscores (at most 40, "
            "not starting with a digit)"
        )
    return name
