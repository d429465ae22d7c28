"""Actions run by real worker processes in the signal, fault and race tests (``--actions``).

Each action reports to files, so the test (another process) can see what ran: a call log
line per attempt, written before the action holds on, so a kill can land while it runs.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any


def _append(path: str, line: str) -> None:
    """Append one line atomically (one ``write`` on an ``O_APPEND`` file)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def gate(params: Any, ctx: Any) -> Any:
    """Say it started (``params["started"]``: execution id, attempt, wall time), then wait
    until ``params["release"]`` exists."""
    _append(params["started"], f"{ctx.execution_id} {ctx.attempt} {time.time()}")
    deadline = time.monotonic() + 60
    while not Path(params["release"]).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the gate")
        time.sleep(0.005)
    return {"released": True}


def scripted(params: Any, ctx: Any) -> Any:
    """Fail or succeed as ``params['script'][attempt - 1]`` says ("fail" or "ok").

    Every call appends ``<execution id> <node> <run> <attempt> <pid>`` to ``params['log']``
    first (so duplicated side effects can be counted), then holds on for ``params['hold']``
    seconds in this process, so a kill can land while the action runs.
    """
    _append(
        params["log"],
        f"{ctx.execution_id} {ctx.node_key} {ctx.run_index} {ctx.attempt} {os.getpid()}",
    )
    hold = float(params.get("hold", 0))
    if hold:
        time.sleep(hold)
    script = params["script"]
    step = script[min(ctx.attempt, len(script)) - 1]
    if step == "fail":
        raise ConnectionError(f"scripted failure on attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


class _KillOn(logging.Handler):
    """SIGKILLs this process when the runner logs ``event`` of ``workflow``: the event is
    released right after its step's save, before anything that follows it (a child's start,
    a parent's resume), so the kill lands exactly on that step boundary."""

    def __init__(self, event: str, workflow: str) -> None:
        super().__init__()
        self.event, self.workflow = event, workflow

    def emit(self, record: logging.LogRecord) -> None:
        if (
            getattr(record, "prana_event", None) == self.event
            and getattr(record, "workflow_id", None) == self.workflow
        ):
            os.kill(os.getpid(), signal.SIGKILL)


def kernel_now(scratch: str) -> float:
    """The machine's time (POSIX seconds) as the kernel stamps a file written now.

    A process under libfaketime reads a skewed wall clock (``time.time``), but the time the
    kernel stamps on a write is the machine's: the skew tests measure with it.
    """
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x")
        stamped = os.fstat(fd).st_mtime_ns / 1e9
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    return stamped


def timed(params: Any, ctx: Any) -> Any:
    """``scripted``, logging the machine's time (``kernel_now``) as each attempt starts and
    ends: ``<execution id> <attempt> start|end <seconds> <pid>`` lines in ``params['log']``.
    """
    scratch = f"{params['log']}.{os.getpid()}.clock"
    line = f"{ctx.execution_id} {ctx.attempt} {{}} {{:.6f}} {os.getpid()}"
    _append(params["log"], line.format("start", kernel_now(scratch)))
    try:
        # Not time.sleep: under libfaketime (DONT_FAKE_MONOTONIC) it fails with EINVAL.
        threading.Event().wait(float(params.get("hold", 0)))
        step = params["script"][min(ctx.attempt, len(params["script"])) - 1]
        if step == "fail":
            raise ConnectionError(f"scripted failure on attempt {ctx.attempt}")
        return {"attempt": ctx.attempt}
    finally:
        _append(params["log"], line.format("end", kernel_now(scratch)))


def register(registry: Any) -> None:
    """Add the actions to the CLI's registry; with ``PRANA_FAULT_KILL_ON=event:workflow``
    in the environment, the process kills itself on that event (``_KillOn``)."""
    registry.register("fault.gate", gate)
    registry.register("fault.scripted", scripted)
    registry.register("fault.timed", timed)
    kill_on = os.environ.get("PRANA_FAULT_KILL_ON")
    if kill_on:
        event, workflow = kill_on.split(":")
        logging.getLogger("scheduling.events").addHandler(_KillOn(event, workflow))
