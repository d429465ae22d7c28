"""The examples run as documented and show what they claim."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from prana.testing import ManualClock

EXAMPLES = Path(__file__).parent.parent / "examples"


def load(name: str) -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLES / name))


def test_flaky_api_retries_then_completes() -> None:
    """The flaky-API example waits out two retry suspensions with growing delays, then completes."""
    clock = ManualClock()
    lines: list[str] = []
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    output = load("flaky_api.py")["main"](clock=clock, sleep=sleep, say=lines.append)
    assert output == "Lisbon: 21 C"
    assert slept == [0.2, 0.4]
    assert "retrying in 200 ms (attempt 2/4)" in lines[0]
    assert lines[-1] == "completed: Lisbon: 21 C"


@pytest.mark.parametrize(("approved", "status"), [(True, "ordered"), (False, "refused")])
def test_webhook_approval_resumes_from_json(approved: bool, status: str) -> None:
    """The approval example survives a JSON round trip and routes on the decision."""
    lines: list[str] = []
    output = load("webhook_approval.py")["main"](
        approved=approved, clock=ManualClock(), say=lines.append
    )
    assert output == {"status": status, "by": "alice"}
    assert lines[0].startswith("waiting for approval until 2030-01-03")


def test_examples_run_as_scripts() -> None:
    """The webhook example runs as a script (the README's command form) and prints completion."""
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "webhook_approval.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "completed: {'status': 'ordered', 'by': 'alice'}" in out.stdout
