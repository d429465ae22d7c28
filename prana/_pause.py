"""An action's pause: the ``Suspend`` it returns, checked, recorded and handed back.

Split from ``prana._engine`` (whose ``Run`` calls ``settle_suspend`` when an action returns
a ``Suspend``): a webhook wait's resume token is minted here, and only its digest is kept.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import attrs

from prana._durations import is_aware
from prana._events import EventType
from prana._hooks import PENDING_TOKEN_PREFIX, mint_token, redact_tokens, token_digest
from prana._jsoncheck import json_problem
from prana._model import (
    AttemptOutcome,
    ErrorCode,
    NodeStatus,
    Outcome,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
)
from prana._noderun import NodeRun, prana_error

if TYPE_CHECKING:
    from prana._engine import Run
    from prana._graph import CompiledNode


def settle_suspend(run: Run, cn: CompiledNode, node_run: NodeRun, value: Suspend) -> Outcome | None:
    """The action asked to pause: record it; the run goes on with what else is ready."""
    key = cn.key
    kind, data = value.kind, value.data
    problem: str | None = None
    if kind == "retry":
        problem = (
            "actions may not return Suspend(kind='retry'); raise an error (or RetryAfter) instead"
        )
    elif kind in _SUSPEND_TYPES:
        if not isinstance(data, _SUSPEND_TYPES[kind]):
            expected = _SUSPEND_TYPES[kind].__name__
            problem = f"Suspend({kind!r}) needs {expected} data, got {type(data).__name__}"
        else:
            problem = _time_problem(kind, data)
            if problem is None and kind == "sub_workflow" and run.issued:
                problem = _kept_secret_problem(data, run.issued)
    else:
        json_issue = json_problem(data)
        if json_issue is not None:
            problem = f"Suspend({kind!r}) data is not JSON-native at {json_issue}"
    if problem is not None:
        error = prana_error(
            ErrorCode.INVALID_SUSPEND, f"node {key!r}: {problem}", key, "InvalidSuspend"
        )
        return run.settle_failure(cn, node_run, error)
    now = run.clock()
    node_run.settle(run.runs, AttemptOutcome.SUSPENDED, now, NodeStatus.SUSPENDED)
    given = None
    if kind == "webhook":
        # The record keeps the token's digest; the plaintext goes only to the caller. A
        # token handed out earlier through ``$webhooks.<key>`` is this wait's token.
        digest = run.state.pop(PENDING_TOKEN_PREFIX + key, None)
        token = run.issued.pop(key, None)
        if not isinstance(digest, str):
            token, secret = mint_token(run.id)
            digest = token_digest(run.id, key, secret)
        data = WebhookData(expires_at=data.expires_at, token_digest=digest)
        given = attrs.evolve(data, token=token)
    elif run.issued and kind not in _SUSPEND_TYPES:
        # An action's own data (a link it was given): the caller gets it as given, the
        # record without the tokens minted in this call.
        redacted = redact_tokens(data, run.issued)
        if redacted != data:
            given, data = data, redacted
    suspension = Suspend(kind, data)
    if run.observers:
        run.event(
            EventType.NODE_SUSPENDED,
            node_key=key,
            run_index=node_run.run_index,
            attempt=node_run.attempt_number,
            kind=kind,
        )
    run.pause(key, suspension, given)
    return None


_UTC = timezone.utc


def _kept_secret_problem(data: SubWorkflowData, issued: dict[str, str]) -> str | None:
    """Why a sub-workflow's input may not be recorded, if it holds a ``$secrets`` value or a
    resume token: the child starts from the input the parent's record keeps, as it is."""
    if redact_tokens(data.input, issued) == data.input:
        return None
    return (
        "the sub-workflow input holds a $secrets value or a $webhooks token, which the "
        "record would keep as it is (the child starts from it); read $secrets.<name> in the "
        "child workflow instead (it shares the registry)"
    )


def _time_problem(kind: str, data: Any) -> str | None:
    """Why a built-in kind's time is not one a record can hold (an aware datetime), if so.

    The records have no validators (``TimerData`` is a hot record, ``prana._model``): what
    an action hands back is checked here, as it comes in. A naive time suspended the run,
    then broke the alarm and the record (``dumps`` wrote it, ``loads`` refused it).
    """
    name = "resume_at" if kind == "timer" else "expires_at"
    value = getattr(data, name)
    if value.__class__ is datetime and value.tzinfo is _UTC:
        return None  # what the clocks give: aware (is_aware for anything else)
    if value is None and kind != "timer":
        return None  # a wait without an end
    if is_aware(value):
        return None
    return f"Suspend({kind!r}) {name}={value!r} is not an aware datetime"


_SUSPEND_TYPES: dict[str, type[Any]] = {
    "timer": TimerData,
    "webhook": WebhookData,
    "sub_workflow": SubWorkflowData,
}
