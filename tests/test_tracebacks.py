"""A failed attempt keeps where it failed: its traceback, bounded and redacted.

An action doing ``d["customer"]["address"]["zip"]`` failed as ``KeyError: 'address'`` in
the record, the logs, the web view and the spans: no file, no line, no chain of causes.
``ErrorInfo.traceback`` now keeps each frame's file, line and function and the chain, in
Python's layout without source lines, cut to a bound, counted against ``Limits`` and
redacted as the message is.
"""

from __future__ import annotations

import asyncio
from typing import Any

from doubles import T0, run_to_end, workflow

from prana import (
    ActionContext,
    Failed,
    Limits,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    dumps,
    execute_workflow,
    loads,
)
from prana._limits import MAX_TRACEBACK, recorded_size
from prana._noderun import MAX_TRACEBACK_CHAIN, MAX_TRACEBACK_FRAMES
from prana.testing import ManualClock


def _zip_of(order: dict[str, Any]) -> Any:
    return order["customer"]["address"]["zip"]


class LookupFailedError(Exception):
    """The action's own error, raised from the ``KeyError``."""


def _lookup(params: Any, ctx: ActionContext) -> Any:
    try:
        return _zip_of({"customer": {}})
    except KeyError as exc:
        raise LookupFailedError("no address on the order") from exc


def _failed(action: Any, retry: RetryPolicy | None = None, **registry: Any) -> Failed:
    reg = Registry(**registry)
    reg.register("test.act", action)
    settings = NodeSettings(retry=retry) if retry else NodeSettings()
    outcome = run_to_end(workflow(Node(key="act", type="test.act", settings=settings)), reg)
    assert isinstance(outcome, Failed), outcome
    return outcome


def _traceback(outcome: Failed) -> str:
    run = outcome.execution.node("act")
    assert run is not None
    assert run.error is not None
    assert run.attempts[-1].error == run.error
    text = run.error.traceback
    assert text is not None
    return text


def test_the_record_keeps_frames_and_the_chain_of_causes() -> None:
    outcome = _failed(_lookup)
    text = _traceback(outcome)
    assert text.startswith("Traceback (most recent call last):\n")
    assert f'File "{__file__}", line' in text
    assert ", in _zip_of\n" in text
    assert ", in _lookup\n" in text
    assert "KeyError: 'address'\n" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert text.endswith("test_tracebacks.LookupFailedError: no address on the order")
    assert text.index("KeyError") < text.index("LookupFailedError")  # Python's order: cause first
    assert "_drivers.py" not in text  # prana calling the action is not the user's code
    # plain data: it survives the stored form, and the execution's own error carries it
    again = loads(dumps(outcome.execution))
    assert again.node("act").error.traceback == text  # type: ignore[union-attr]
    assert outcome.error.traceback == text
    assert outcome.execution.kept_size == recorded_size(outcome.execution)


def test_an_async_action_keeps_its_frames() -> None:
    async def fetch(params: Any, ctx: ActionContext) -> Any:
        await asyncio.sleep(0)
        return _zip_of({})

    reg = Registry()
    reg.register("test.act", fetch)
    outcome = asyncio.run(_run_async(reg))
    text = _traceback(outcome)
    assert ", in fetch\n" in text
    assert ", in _zip_of\n" in text
    assert text.endswith("KeyError: 'customer'")


async def _run_async(reg: Registry) -> Failed:
    from prana import aexecute_workflow

    wf = workflow(Node(key="act", type="test.act"))
    outcome = await aexecute_workflow(wf, registry=reg, clock=ManualClock(T0))
    assert isinstance(outcome, Failed)
    return outcome


def test_a_deep_recursion_keeps_a_bounded_number_of_frames() -> None:
    def down(n: int) -> Any:
        empty: dict[str, Any] = {}
        return down(n - 1) if n else empty["bottom"]

    def deep(params: Any, ctx: ActionContext) -> Any:
        return down(500)

    text = _traceback(_failed(deep))
    assert text.count('  File "') == MAX_TRACEBACK_FRAMES
    assert f"{502 - MAX_TRACEBACK_FRAMES:,} more frames not kept" in text  # 501 + deep
    assert ", in deep\n" in text  # the outermost frames are kept, and the innermost
    assert text.endswith("KeyError: 'bottom'")


def test_a_long_chain_keeps_its_last_causes_and_short_messages() -> None:
    def link(n: int) -> Any:
        if n == 0:
            raise ValueError("first " + "x" * 100_000)
        try:
            link(n - 1)
        except Exception as exc:
            raise RuntimeError(f"link {n}") from exc

    def chained(params: Any, ctx: ActionContext) -> Any:
        link(20)

    text = _traceback(_failed(chained))
    assert text.count("Traceback (most recent call last):") == MAX_TRACEBACK_CHAIN
    assert text.startswith(f"({21 - MAX_TRACEBACK_CHAIN} earlier exceptions not kept)")
    assert "first" not in text
    assert len(text) < 6_000
    assert text.endswith("RuntimeError: link 20")


def test_a_huge_message_is_cut_and_counted() -> None:
    def huge(params: Any, ctx: ActionContext) -> Any:
        try:
            raise ValueError("y" * 50_000)
        except ValueError as exc:
            raise RuntimeError("wrapped") from exc

    outcome = _failed(huge)
    text = _traceback(outcome)
    assert len(text) <= MAX_TRACEBACK + 100
    assert "more characters" in text
    assert outcome.execution.kept_size == recorded_size(outcome.execution)


def test_tracebacks_count_against_the_record_size() -> None:
    """Each retry keeps another traceback; counted, the record stops at its limit."""

    def fails(params: Any, ctx: ActionContext) -> Any:
        raise RuntimeError("boom")

    policy = RetryPolicy(max_attempts=10_000, backoff="constant", initial_delay=0.001)
    outcome = _failed(fails, policy, limits=Limits(max_record_size=20_000))
    assert outcome.error.code == "limit_exceeded"
    run = outcome.execution.node("act")
    assert run is not None
    kept = [a.error.traceback for a in run.attempts if a.error and a.error.traceback]
    size_without = sum(len(a.error.message) + 40 for a in run.attempts if a.error)
    assert kept
    assert size_without < 20_000 // 2
    assert outcome.execution.kept_size == recorded_size(outcome.execution)


SECRET = "sk-live-0123456789abcdef"


def test_a_secret_in_a_cause_is_redacted_from_the_traceback() -> None:
    def call(params: Any, ctx: ActionContext) -> Any:
        try:
            raise ConnectionError(f"refused with {params['auth']}")
        except ConnectionError as exc:
            raise RuntimeError("call failed") from exc

    reg = Registry(secrets={"API_KEY": SECRET})
    reg.register("test.act", call)
    node = Node(key="act", type="test.act", params={"auth": "{{ $secrets.API_KEY }}"})
    outcome = execute_workflow(workflow(node), registry=reg, clock=ManualClock(T0))
    assert isinstance(outcome, Failed)
    text = _traceback(outcome)
    assert "ConnectionError: refused with [secret]" in text
    assert SECRET not in dumps(outcome.execution)


def test_a_failure_prana_finds_itself_has_no_traceback() -> None:
    outcome = _failed(lambda params, ctx: object())  # not JSON: output_not_json
    run = outcome.execution.node("act")
    assert run is not None
    assert run.error is not None
    assert run.error.code == "output_not_json"
    assert run.error.traceback is None


def test_the_record_keeps_the_end_of_a_long_traceback() -> None:
    from prana._limits import error_size, kept_error
    from prana._model import new_error_info

    text = "Traceback (most recent call last):\n" + "x" * 20_000 + "\nKeyError: 'zip'"
    error = new_error_info("action_error", "KeyError", "builtins", "'zip'", None, "a", text)
    cut, size = kept_error(error)
    assert cut.traceback is not None
    assert cut.traceback.endswith("\nKeyError: 'zip'")
    assert cut.traceback.startswith(f"({len(text) - MAX_TRACEBACK:,} characters not kept)")
    assert len(cut.traceback) < MAX_TRACEBACK + 60
    assert size == error_size(cut) >= len(cut.traceback)
