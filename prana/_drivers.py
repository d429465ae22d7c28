"""The drivers: they make the action calls the engine yields and send the results back.

``drive_sync`` calls actions directly (an async action runs on a private event loop, a
timeout runs the call in a worker thread); ``drive_async`` awaits them. Both drive the same
engine generator (``prana._engine``). ``asyncio`` is imported only when needed.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any

from prana._engine import Call, Result
from prana._errors import AttemptTimeout, NonRetryable
from prana._model import Outcome, Output

_NEVER_AWAITABLE = frozenset({str, int, float, bool, type(None), dict, list, tuple, Output})

AROUND_CALL: contextvars.ContextVar[Callable[[Any], AbstractContextManager[object]] | None] = (
    contextvars.ContextVar("prana_around_call", default=None)
)
"""What each action call runs inside, given its ``ActionContext``, or ``None``:
``scheduling.otel.TracingObserver`` sets it while a step runs, so the attempt's span is the
current one inside the action (its worker thread and event loop included)."""


def drive_sync(engine: Generator[Call, Result, Outcome]) -> Outcome:
    try:
        call = next(engine)
        while True:
            around = AROUND_CALL.get()  # read per call: a step's observer sets it
            call = engine.send(_call_sync_in(call) if around is None else _around(around, call))
    except StopIteration as stop:
        result: Outcome = stop.value
        return result


def _around(around: Callable[[Any], AbstractContextManager[object]], call: Call) -> Result:
    with around(call[3][2]):
        return _call_sync_in(call)


def _call_sync_in(call: Call) -> Result:
    fn, args, timeout, _ = call
    try:
        value = fn(*args) if timeout is None else _call_in_thread(fn, args, timeout)
        if type(value) not in _NEVER_AWAITABLE and inspect.isawaitable(value):
            value = _run_awaitable(value, timeout)
    except Exception as exc:  # noqa: BLE001 - an action's failure is data, not a crash
        return False, exc
    return True, value


def _call_in_thread(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
    """Run a sync call in a worker thread; past the deadline, abandon it and time out."""
    box: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - carried back to the caller's thread
            box.append((False, exc))

    context = contextvars.copy_context()  # the caller's context: its current span
    worker = threading.Thread(target=context.run, args=(target,), name="prana-attempt", daemon=True)
    worker.start()
    worker.join(timeout)
    if not box:
        raise AttemptTimeout(f"attempt timed out after {timeout:g}s (its thread was abandoned)")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _run_awaitable(awaitable: Any, timeout: float | None) -> Any:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()  # never awaited: close it, so no "coroutine was never awaited" warning
        raise NonRetryable(
            RuntimeError(
                "an async action was called from execute_workflow inside a running event "
                "loop; use aexecute_workflow / aresume_workflow there"
            )
        )

    async def run() -> Any:
        return await _await_with_timeout(awaitable, timeout)

    return asyncio.run(run())


async def _await_with_timeout(awaitable: Any, timeout: float | None) -> Any:
    import asyncio

    if timeout is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise AttemptTimeout(f"attempt timed out after {timeout:g}s (cancelled)") from None


async def drive_async(engine: Generator[Call, Result, Outcome]) -> Outcome:
    try:
        call = next(engine)
        while True:
            call = engine.send(await _call_async(call))
    except StopIteration as stop:
        result: Outcome = stop.value
        return result


async def _call_async(call: Call) -> Result:
    around = AROUND_CALL.get()
    if around is not None:
        with around(call[3][2]):
            return await _call_async_in(call)
    return await _call_async_in(call)


async def _call_async_in(call: Call) -> Result:
    import asyncio

    fn, args, timeout, _ = call
    try:
        if timeout is not None and not inspect.iscoroutinefunction(fn):
            loop = asyncio.get_running_loop()
            context = contextvars.copy_context()  # the caller's context: its current span
            future = loop.run_in_executor(None, lambda: context.run(fn, *args))
            value = await _await_with_timeout(future, timeout)
        else:
            value = fn(*args)
        if inspect.isawaitable(value):
            value = await _await_with_timeout(value, timeout)
    except Exception as exc:  # noqa: BLE001 - an action's failure is data, not a crash
        return False, exc
    return True, value
