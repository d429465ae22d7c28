"""A failing store said once per change, with a count, instead of once per failure."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduling._errors import StoreError

__all__ = ["StoreHealth"]


class StoreHealth:
    """Says when the store starts failing and when it works again: one line each.

    A store that fails (a full disk, a database down) fails every alarm of every poll; one
    ERROR line each buried the log (954 in 21 s). The first failure is one ERROR line, the
    next ones are counted, and the first success after them is one WARNING with the count.
    ``failures`` is read without the lock on the hot path: a stale zero only delays the
    WARNING to the next success.
    """

    __slots__ = ("_lock", "failing", "failures", "logger", "noun", "recovered")

    def __init__(self, logger: logging.Logger, failing: str, recovered: str, noun: str) -> None:
        self.logger = logger
        self.failing = failing
        """The ERROR line, formatted with the error (``%s``)."""
        self.recovered = recovered
        """The WARNING line, formatted with the count and ``noun``."""
        self.noun = noun
        self.failures = 0
        self._lock = threading.Lock()

    def failed(self, error: StoreError) -> None:
        """One more failure; the first since the store last worked is logged."""
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if first:
            self.logger.error(self.failing, error)

    def worked(self) -> None:
        """The store answered: after failures, say so once, with their count."""
        if not self.failures:
            return
        with self._lock:
            count, self.failures = self.failures, 0
        if count:
            self.logger.warning(self.recovered, count, self.noun)
