"""What every scheduler adapter shares: checking due times and refusing calls out of order."""

from __future__ import annotations

from datetime import datetime

from prana import InvalidSettingsError
from prana.shell import is_aware
from scheduling._errors import SchedulerStateError

__all__ = ["SchedulerStateError", "require_aware"]


def require_aware(due_at: object, where: str) -> datetime:
    """Return ``due_at`` if it is an aware datetime, else raise a clear ``InvalidSettingsError``."""
    if not isinstance(due_at, datetime):
        raise InvalidSettingsError(
            f"{where}: due_at must be an aware datetime, got {type(due_at).__name__} {due_at!r}"
        )
    if not is_aware(due_at):
        raise InvalidSettingsError(
            f"{where}: due_at={due_at!r} is naive; pass an aware datetime, "
            "e.g. datetime.now(timezone.utc) + timedelta(seconds=5)"
        )
    return due_at
