"""Real ``prana`` processes for the signal, fault and race tests: started, watched, stopped.

Every process is started in a session of its own and stopped by its pid only; output is
collected by reader threads, and every wait has a deadline (``wait_until`` checks a
condition every few milliseconds, it never sleeps a fixed time).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
ACTIONS = str(Path(__file__).resolve().parent / "fault_actions.py")
"""The actions module the processes load (``--actions``)."""

DEADLINE_SECONDS = 60.0
"""How long any single wait may take before the test fails (only reached on failure)."""


RUN_SECONDS = 120.0
"""How long a command run to its end (``run_prana``) may take (only reached on failure)."""


def run_prana(
    cwd: Path, *argv: str, env: Mapping[str, str] | None = None, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``prana ARGV`` in ``cwd`` to its end; its output. The environment is this
    checkout on ``PYTHONPATH`` plus ``env``, nothing else; ``check`` fails on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "scheduling._cli", *argv],
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=check,
    )


def wait_until(
    predicate: Callable[[], bool], timeout: float = DEADLINE_SECONDS, every: float = 0.01
) -> bool:
    """Check ``predicate`` every ``every`` seconds until it holds (True) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set: its wait is the pause between checks
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(every)
    return True


class Prana:
    """One ``python -m scheduling._cli ...`` process with its output collected as it comes."""

    def __init__(
        self, argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        full_env.pop("PRANA_DB", None)
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "scheduling._cli", *argv],
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.popen.stdout, self._out), daemon=True),
            threading.Thread(target=self._read, args=(self.popen.stderr, self._err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        into.extend(stream)  # line by line, as the process writes them

    @property
    def stdout(self) -> str:
        return "".join(self._out)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def wait_for_output(self, text: str, timeout: float = DEADLINE_SECONDS) -> bool:
        """Whether ``text`` appears on stdout before ``timeout`` (or the process ends)."""
        return wait_until(
            lambda: text in self.stdout or self.popen.poll() is not None, timeout
        ) and (text in self.stdout)

    def send(self, signum: signal.Signals) -> None:
        """Send ``signum`` to this process (by its pid) if it still runs."""
        if self.popen.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL this process (by its pid) and reap it."""
        self.send(signal.SIGKILL)
        self.popen.wait(DEADLINE_SECONDS)

    def wait(self, timeout: float = DEADLINE_SECONDS) -> int:
        """Its exit code, once it ended (``subprocess.TimeoutExpired`` after ``timeout``)."""
        code = self.popen.wait(timeout)
        for reader in self._readers:
            reader.join(DEADLINE_SECONDS)
        return code

    def stop(self) -> None:
        """Kill it if it still runs (test teardown)."""
        if self.popen.poll() is None:
            self.kill()
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()
