"""Process-wide switches, kept private; ``prana.testing`` re-exports the public ones.

The core reads this module, never ``prana.testing`` (as stamina keeps its testing switch
in ``_config.py``), so dependencies point one way: the public test helpers depend on the
core, not the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prana._errors import InvalidSettingsError

if TYPE_CHECKING:
    from types import TracebackType

_TESTING: tuple[bool, int | None] = (False, None)


def testing_state() -> tuple[bool, int | None]:
    """The testing switch as (on, attempt cap); read by the retry decision every time."""
    return _TESTING


def is_testing() -> bool:
    """Whether ``set_testing`` is on: every retry delay is 0."""
    return _TESTING[0]


class _TestingRestore:
    """Returned by ``set_testing``: leaving its ``with`` block restores the previous state."""

    def __init__(self, previous: tuple[bool, int | None]) -> None:
        self._previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _TESTING  # one process-wide switch, by design
        _TESTING = self._previous


def set_testing(on: bool = True, *, attempts: int | None = None) -> _TestingRestore:
    """Switch testing mode on or off for the whole process (like stamina's ``set_testing``).

    When on, every computed retry delay is 0 (so retries resume at once with a manual
    clock) and, with ``attempts``, no policy allows more than that many attempts. The
    switch takes effect immediately; used as a context manager
    (``with set_testing(True, attempts=2):``) it restores the previous state on exit.
    """
    global _TESTING  # one process-wide switch, by design
    if not isinstance(on, bool):
        raise InvalidSettingsError(f"set_testing(on={on!r}): use True or False")
    if attempts is not None and (
        isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
    ):
        raise InvalidSettingsError(
            f"set_testing(attempts={attempts!r}): use a whole number >= 1 (the first try "
            "included), or None for the policies' own limits"
        )
    previous = _TESTING
    _TESTING = (on, attempts if on else None)
    return _TestingRestore(previous)
