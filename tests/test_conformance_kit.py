"""The shipped conformance kit (``scheduling.testing``), run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import scheduling.testing

BACKENDS = Path(__file__).parent.parent / "examples" / "backends"


def test_the_kit_is_public() -> None:
    """The suites are importable by a user's own tests and named in ``__all__``."""
    assert {"StoreConformance", "SchedulerConformance"} <= set(scheduling.testing.__all__)


def test_a_store_and_a_scheduler_written_from_the_docs_pass_the_kit() -> None:
    """The docs' example dict store and timer-thread scheduler pass every check, run by
    pytest in their own folder as a user's suite would be; only the optional
    ``TreeCountingStore`` check is skipped."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "."],
        cwd=BACKENDS,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " failed" not in result.stdout
    assert "not a TreeCountingStore" in result.stdout
    assert "1 skipped" in result.stdout
    assert "TestTimerScheduler" not in result.stdout  # nothing of it failed or skipped
