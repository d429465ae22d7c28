"""How a user runs the scheduler conformance kit over a scheduler of their own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from timer_scheduler import TimerScheduler

from scheduling.testing import SchedulerConformance

if TYPE_CHECKING:
    from collections.abc import Iterator


class TestTimerScheduler(SchedulerConformance):
    """Every check of the kit, over a fresh ``TimerScheduler``."""

    @pytest.fixture
    def scheduler(self) -> Iterator[TimerScheduler]:
        scheduler = TimerScheduler()
        yield scheduler
        scheduler.shutdown()
