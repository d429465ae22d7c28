"""A failed attempt: retry it (a ``Suspend(kind="retry")``), or let ``on_error`` decide.

Split from ``prana._engine``: ``Run.settle_failure`` *is* ``settle_failure`` (bound as a
method, so the engine pays no extra call), with ``run`` as its ``self``.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from prana._decision import (
    CONDITION_FAILED,
    RAN_OUT,
    explain_retry,
    new_attempt_view,
)
from prana._events import EventType
from prana._hooks import redact_tokens
from prana._jsoncheck import json_size
from prana._limits import attempts_exceeded, error_size, kept_error, record_full
from prana._model import (
    NEVER_RETRY_CODES,
    ErrorCode,
    ErrorInfo,
    Outcome,
    new_retry_data,
    new_suspend,
)
from prana._noderun import NodeRun, redacted_error, with_detail
from prana._state import ATTEMPT_FAILED, NODE_FAILED, NODE_SUSPENDED

if TYPE_CHECKING:
    from prana._engine import Run
    from prana._graph import CompiledNode

_LIMIT_EXCEEDED: str = ErrorCode.LIMIT_EXCEEDED.value
"""A limit's own error (short, prana's) is recorded and counted even past the record limit."""
_retry_log = logging.getLogger("prana.retry")
"""Retry conditions that failed when they ran (WARNING): the run goes on without a retry."""


def timeouts_of(node_run: NodeRun, error: ErrorInfo) -> int:
    """The node run's timed-out attempts, the one failing with ``error`` included."""
    earlier = sum(
        1 for a in node_run.attempts if a.error is not None and a.error.code == _TIMEOUT_CODE
    )
    return earlier + (error.code == _TIMEOUT_CODE)


_TIMEOUT_CODE: str = ErrorCode.TIMEOUT.value


def settle_failure(
    run: Run,
    cn: CompiledNode,
    node_run: NodeRun,
    error: ErrorInfo,
    *,
    exception: BaseException | None = None,
    output: Any = None,
) -> Outcome | None:
    """An attempt failed: retry it (a suspension), or let ``on_error`` decide.

    Whether the policies are asked at all is the error code's to say
    (``NEVER_RETRY_CODES``); whether retries ran out is the decision's reason.
    """
    key = cn.key
    number = node_run.attempt_number
    exhausted = False
    if run.issued:
        error = redacted_error(error, run.issued)
    error, size = kept_error(error)  # after redacting: a cut never leaves part of a token
    if run.kept + size > run.limits.max_record_size and error.code != _LIMIT_EXCEEDED:
        error = record_full(key, number, error, size, run.kept, run.limits)
    if cn.policies and error.code not in NEVER_RETRY_CODES:
        now = run.clock()  # one reading: the budget check and resume_at must agree
        view = new_attempt_view(
            number,
            error,
            exception,
            output,
            (now - node_run.budget_start).total_seconds(),
            None,
            run.id,
            key,
            cn.timeout,
            now,
            timeouts_of(node_run, error) if cn.counts_timeouts else 0,
        )
        explanation = explain_retry(cn.policies, view, seed=f"{run.id}:{key}:{node_run.run_index}")
        decision = explanation.decision
        retry = None if decision is None else (decision.delay_seconds, decision.max_attempts)
        if retry is not None and number >= run.limits.max_attempts:
            retry, error = None, attempts_exceeded(key, error, run.limits)
        if retry is None:
            # a retry the Limits cap stopped keeps its reason, RETRY: in neither set below
            reason = explanation.reason
            exhausted = reason in RAN_OUT
            if reason in CONDITION_FAILED:
                # no retry, and a user reads why: the attempt's error, node_failed, a log;
                # the condition may quote the raw exception, so its text is redacted too
                text = explanation.text
                if run.issued:
                    text = redact_tokens(text, run.issued)
                error = kept_error(with_detail(error, "retry_condition_failed", text))[0]
                _retry_log.warning(
                    "execution %s: node %r: %s (attempt %d); the attempt does not retry",
                    *(run.id, key, text, number),
                    extra={"execution_id": run.id, "node_key": key, "attempt": number},
                )
        else:
            delay_seconds, max_attempts = retry
            # floor, so rounding never puts resume_at past a retry_timeout budget
            delay_ms = math.floor(delay_seconds * 1000) if delay_seconds > 0 else 0
            run.kept += size
            node_run.settle(
                run.runs, ATTEMPT_FAILED, now, NODE_SUSPENDED, None, None, None, error, delay_ms
            )
            data = new_retry_data(
                delay_ms,
                number + 1,
                max_attempts,
                error,
                now + timedelta(milliseconds=delay_ms) if delay_ms else now,
                False,
            )
            run.now_hint = now  # the execution is handed back at the attempt's end
            if run.observers:
                run.event(
                    EventType.NODE_RETRY_SCHEDULED,
                    node_key=key,
                    run_index=node_run.run_index,
                    attempt=number + 1,
                    max_attempts=max_attempts,
                    delay_ms=delay_ms,
                    error=error,
                )
            run.pause(key, new_suspend("retry", data, None))
            return None
    if exhausted and run.observers:
        run.event(
            EventType.NODE_RETRY_EXHAUSTED,
            node_key=key,
            run_index=node_run.run_index,
            attempt=number,
            max_attempts=explanation.max_attempts if explanation is not None else None,
            error=error,
        )
    if run.observers:
        run.event(
            EventType.NODE_FAILED,
            node_key=key,
            run_index=node_run.run_index,
            attempt=number,
            error=error,
        )
    run.kept += error_size(error)
    mode = cn.node.settings.on_error
    if mode == "stop_workflow":
        now = run.clock()
        node_run.settle(run.runs, ATTEMPT_FAILED, now, NODE_FAILED, now, None, None, error)
        # The activation stays pending: a redrive runs the node again with it.
        return run.fail_execution(error)
    port = "main" if mode == "continue" else "error"
    output = error.as_output()
    run.kept += max(json_size(output), 0)
    run.complete_node(cn, node_run, output, port, error=error)
    return None
