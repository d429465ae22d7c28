"""Seed fidelity: each retry design's own example, pasted as its users would, means what it says.

Every test starts from an example in the seed's own documentation or code and quotes the
line it checks. The seeds: Rappel and its successor Waymark (piercefreeman/rappel,
piercefreeman/waymark), NoETL (noetl/noetl), rh_agents' ``RetryConfig`` (rhodief/rh-agents)
and Prana's ADR-008 (bluzky/prana, the Elixir project prana is modelled on).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from doubles import run_to_end

from prana import (
    ActionContext,
    AttemptTimeout,
    Completed,
    Connection,
    ErrorInfo,
    Failed,
    InvalidSettingsError,
    InvalidWorkflowError,
    Limits,
    Node,
    NodeSettings,
    Registry,
    RetryData,
    RetryPolicy,
    Suspend,
    Workflow,
    dialects,
    dumps_workflow,
    execute_workflow,
    lint,
    loads_workflow,
    resume_workflow,
    validate,
)
from prana._decision import (
    CONDITION_SCOPE,
    AttemptView,
    decide_retry,
    explain_retry,
)
from prana._resolve import resolve
from prana.dialects import NOETL_NAMES, rappel
from prana.dialects import read_policies as coerce_policies
from prana.testing import ManualClock

SEED = "exec-1:node:0"
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


class NetworkError(ConnectionError):
    """The transient error Rappel's examples retry."""


class HTTPError(Exception):
    """An HTTP failure that carries its status code in ``details``, as an HTTP action would."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.details = {"status_code": status_code}


def one_node(settings: NodeSettings, node_type: str = "test.call") -> Workflow:
    """trigger -> call, where ``call`` has ``settings``."""
    return Workflow(
        id="seed",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="call", type=node_type, settings=settings),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )


def attempts_of(outcome: Completed | Failed | Suspend, key: str = "call") -> int:
    """How many attempts node ``key``'s latest run made."""
    assert outcome.execution is not None
    record = outcome.execution.node(key)
    assert record is not None
    return len(record.attempts)


def always_fails(exc: Exception) -> Registry:
    """A registry whose ``test.call`` raises ``exc`` every time."""
    registry = Registry()

    def call(params: Any, ctx: ActionContext) -> Any:
        raise exc

    registry.register("test.call", call)
    return registry


def failed_view(exc: BaseException, attempt: int = 1, **kw: Any) -> AttemptView:
    """The view of attempt ``attempt`` failing with the live exception ``exc``."""
    cls = type(exc)
    info = ErrorInfo(
        code="action_error",
        type=cls.__name__,
        module=cls.__module__,
        message=str(exc),
        details=getattr(exc, "details", None),
    )
    return AttemptView(attempt=attempt, error=info, exception=exc, **kw)


# -- NoETL ---------------------------------------------------------------------------------


def test_noetl_integer_retry_is_max_attempts_only() -> None:
    """NoETL ``retry: 3`` is three attempts in all.

    noetl/noetl docs (event-driven retry architecture): "# Integer (max attempts only)
    retry: 3"; noetl/plugin/runtime/retry.py: "retry_config = {'max_attempts': retry_config}".
    """
    step = yaml.safe_load("retry: 3")
    (policy,) = coerce_policies(step["retry"], field="step.retry") or ()
    assert policy.max_attempts == 3
    outcome = run_to_end(
        one_node(NodeSettings(retry=step["retry"])),
        always_fails(ConnectionError("down")),
        ManualClock(),
    )
    assert isinstance(outcome, Failed)
    assert attempts_of(outcome) == 3


NOETL_FULL = """
retry:
  max_attempts: 5
  initial_delay: 1.0
  backoff_multiplier: 2.0
  max_delay: 60.0
  jitter: true
  retry_when: "{{ status_code >= 500 or error != None }}"
  stop_when: "{{ status_code == 200 and success == True }}"
"""
"""NoETL's "Full Retry Configuration" example, as its playbooks write it."""


def test_noetl_retry_when_sees_status_code_and_error_from_the_error() -> None:
    """A NoETL ``retry_when`` reads ``status_code`` and ``error`` as NoETL names them.

    noetl/noetl docs: "retry_when: \"{{ status_code >= 500 or error != None }}\"", with
    "`status_code`: HTTP status code (for HTTP tasks)" and "`error`: Error message if task
    failed" among the "Retry Context Variables".
    """
    retry = yaml.safe_load(NOETL_FULL)["retry"]
    workflow = one_node(NodeSettings(retry=retry))
    outcome = execute_workflow(
        workflow, {}, registry=always_fails(HTTPError(503)), clock=ManualClock()
    )
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.max_attempts == 5


def test_noetl_condition_scope_has_every_noetl_name() -> None:
    """Each of NoETL's retry context variables is defined for a failed attempt.

    noetl/noetl docs, "Retry Context Variables": "`result`, `status_code`, `error`,
    `success`, `data`, `attempt`, `execution_id`, `node_id`".
    """
    view = failed_view(HTTPError(502), attempt=2, execution_id="e-7", node_key="fetch_data")
    scope = view.names()
    assert set(scope) == set(NOETL_NAMES)
    assert set(NOETL_NAMES) <= set(CONDITION_SCOPE)
    assert scope["status_code"] == 502
    assert scope["error"] == "HTTP 502"
    assert scope["success"] is False
    assert scope["data"] is None
    assert scope["attempt"] == 2
    assert (scope["execution_id"], scope["node_id"]) == ("e-7", "fetch_data")
    assert scope["result"] == {"success": False, "error": "HTTP 502", "error_type": "HTTPError"}
    policy = RetryPolicy(retry_when="{{ status_code >= 500 and node_id == 'fetch_data' }}")
    assert decide_retry([policy], view, seed=SEED) is not None
    typo = RetryPolicy(retry_when="{{ statuscode >= 500 }}")
    why = explain_retry([typo], view, seed=SEED)
    assert why.decision is None
    assert "unknown name 'statuscode'" in why.text
    assert "status_code" in why.text


def test_noetl_conditions_pass_validation_and_a_typo_is_named() -> None:
    """A workflow with NoETL's conditions validates; a misspelt NoETL name is refused by name.

    noetl/noetl docs: "retry_when: \"{{ status_code >= 500 or error != None }}\"".
    """
    registry = always_fails(HTTPError(503))
    retry = yaml.safe_load(NOETL_FULL)["retry"]
    validate(one_node(NodeSettings(retry=retry)), registry)
    retry["retry_when"] = "{{ statuscode >= 500 }}"
    with pytest.raises(InvalidWorkflowError, match="did you mean status_code"):
        validate(one_node(NodeSettings(retry=retry)), registry)


def test_noetl_stop_when_reads_status_code_and_success_from_the_output() -> None:
    """``stop_when`` stops on a 200 with ``success == True`` read from the output.

    noetl/noetl docs: "stop_when: \"{{ status_code == 200 and success == True }}\"";
    noetl/plugin/runtime/retry.py builds "'status_code': result.get('status_code')" and
    "'success': result.get('success', True)" from the task's result.
    """
    retry = dict(yaml.safe_load(NOETL_FULL)["retry"])
    retry["retry_on_result"] = "{{ $output.status_code != 204 }}"
    (policy,) = coerce_policies(retry, field="step.retry") or ()
    rejected = ErrorInfo(
        code="result_rejected", type="ResultRejected", module="prana", message="rejected"
    )

    def view(output: dict[str, Any]) -> AttemptView:
        return AttemptView(attempt=1, error=rejected, output=output)

    assert decide_retry([policy], view({"status_code": 200, "success": True}), seed=SEED) is None
    assert decide_retry([policy], view({"status_code": 503, "data": {}}), seed=SEED) is not None


def test_noetl_retry_when_as_written_retries_an_error_without_a_status_code() -> None:
    """NoETL's own condition retries an error that has no status code, as NoETL's does.

    noetl/noetl docs: "retry_when: \"{{ status_code >= 500 or error != None }}\"", with
    "`error`: Error message if task failed": a connection error has no status code, so
    ``status_code >= 500`` must not stop the ``or``. A comparison with a missing value is
    false in a condition; the guarded spelling keeps its meaning.
    """
    retry = yaml.safe_load(NOETL_FULL)["retry"]
    (policy,) = coerce_policies(retry, field="step.retry") or ()
    why = explain_retry([policy], failed_view(ConnectionError("reset")), seed=SEED)
    assert why.decision is not None, why.text
    outcome = execute_workflow(
        one_node(NodeSettings(retry=retry)),
        {},
        registry=always_fails(ConnectionError("reset")),
        clock=ManualClock(),
    )
    assert isinstance(outcome, Suspend)
    for text, retries in [
        ("{{ status_code >= 500 }}", False),
        ("{{ status_code < 500 }}", False),
        ("{{ 500 <= status_code }}", False),
        ("{{ status_code == None }}", True),
        ("{{ status_code is none or status_code >= 500 }}", True),
        ("{{ status_code is not none and status_code >= 500 }}", False),
        ("{{ (status_code or 0) >= 500 or error != None }}", True),
    ]:
        guarded = RetryPolicy(retry_when=text)
        decision = decide_retry([guarded], failed_view(ConnectionError("reset")), seed=SEED)
        assert (decision is not None) is retries, text
    for text, retries in [
        ("{{ status_code >= 500 }}", True),
        ("{{ 400 <= status_code < 500 }}", False),
        ("{{ 500 <= status_code < 600 }}", True),
    ]:
        decision = decide_retry(
            [RetryPolicy(retry_when=text)], failed_view(HTTPError(503)), seed=SEED
        )
        assert (decision is not None) is retries, text


class _Response:
    def __init__(self, status_code: Any) -> None:
        self.status_code = status_code


class ClientError(Exception):
    """An error carrying its status the way common HTTP clients do (no ``details``)."""

    def __init__(self, **attributes: Any) -> None:
        super().__init__("client error")
        for name, value in attributes.items():
            setattr(self, name, value)


class _Raising:
    @property
    def status_code(self) -> int:
        raise RuntimeError("no response")


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"status_code": 503}, 503),
        ({"response": _Response(502)}, 502),
        ({"status": 429}, 429),
        ({"status_code": 503, "response": _Response(400)}, 503),
        ({"status": "503"}, None),
        ({"status_code": True}, None),
        ({"status_code": 10**100}, None),
        ({"response": _Raising()}, None),
        ({"response": None}, None),
    ],
)
def test_noetl_status_code_is_read_from_the_exception(
    attributes: dict[str, Any], expected: int | None
) -> None:
    """``status_code`` comes from an exception as common HTTP clients raise it.

    noetl/noetl docs, "Retry Context Variables": "`status_code`: HTTP status code (for HTTP
    tasks)"; requests and httpx errors carry it as ``exc.response.status_code``, aiohttp's
    as ``exc.status``, many clients' as ``exc.status_code``.
    """
    registry = always_fails(ClientError(**attributes))
    retry = {"max_attempts": 3, "retry_when": "{{ status_code >= 500 }}"}
    outcome = execute_workflow(
        one_node(NodeSettings(retry=retry)), {}, registry=registry, clock=ManualClock()
    )
    assert outcome.execution is not None
    record = outcome.execution.node("call")
    assert record is not None
    error = record.attempts[0].error
    assert error is not None
    found = (error.details or {}).get("status_code")
    assert found == expected
    retried = isinstance(outcome, Suspend)
    assert retried is (expected is not None and expected >= 500)


@pytest.mark.parametrize(
    "retry",
    ["retry: 3", "retry: true", "retry: {max_attempts: 3, backoff_multiplier: 2.0}"],
)
@pytest.mark.parametrize("exc", [ValueError("v"), KeyError("k"), TypeError("t"), AttributeError()])
def test_noetl_forms_retry_every_error(retry: str, exc: Exception) -> None:
    """NoETL has no exception filter: any error retries under its forms.

    noetl/noetl noetl/plugin/runtime/retry.py: "# Default: retry on error" / "if error or not
    result.get('success', True): ... return True", with no exception type checked.
    """
    step = yaml.safe_load(retry)
    outcome = run_to_end(
        one_node(NodeSettings(retry=step["retry"])), always_fails(exc), ManualClock()
    )
    assert isinstance(outcome, Failed)
    assert attempts_of(outcome) == 3


def test_noetl_events_carry_max_attempts() -> None:
    """``node_started`` and ``node_retry_exhausted`` say how many attempts the node may make.

    noetl/noetl docs (retry implementation summary): "`max_attempts` extracted from retry
    config (bool/int/dict formats)" and "Dynamic max_attempts passed to queue INSERT": each
    job, and each event about it, carries its ``max_attempts``.
    """
    events: list[Any] = []
    workflow = one_node(NodeSettings(retry=yaml.safe_load("retry: 3")["retry"]))
    registry = always_fails(ConnectionError("down"))
    clock = ManualClock()
    outcome = execute_workflow(
        workflow, {}, registry=registry, clock=clock, observers=[events.append]
    )
    while isinstance(outcome, Suspend) and isinstance(outcome.data, RetryData):
        assert outcome.execution is not None
        clock.set(max(clock(), outcome.data.resume_at))
        outcome = resume_workflow(
            outcome.execution,
            None,
            workflow=workflow,
            registry=registry,
            clock=clock,
            observers=[events.append],
        )
    assert isinstance(outcome, Failed)
    started = [e for e in events if e.name == "node_started" and e.node_key == "call"]
    assert [(e.attempt, e.max_attempts) for e in started] == [(1, 3), (2, 3), (3, 3)]
    (exhausted,) = [e for e in events if e.name == "node_retry_exhausted"]
    assert (exhausted.attempt, exhausted.max_attempts) == (3, 3)


# -- Rappel / Waymark ----------------------------------------------------------------------


def test_rappel_bracket_without_filter_catches_all_exceptions() -> None:
    """``[retry: 3, backoff: 60]`` retries every exception, programming errors too.

    piercefreeman/rappel docs/Action-Retries.md: "# Catch all exceptions, retry up to 3
    times with 60s exponential backoff / result = @risky_action() [retry: 3, backoff: 60]".
    """
    (policy,) = RetryPolicy.parse("[retry: 3, backoff: 60]")
    for exc in (ValueError("bad"), KeyError("k"), NetworkError("reset"), RuntimeError("x")):
        decision = decide_retry([policy], failed_view(exc), seed=SEED)
        assert decision is not None, exc
        assert decision.delay_seconds == 60
    assert policy.max_attempts == 4
    assert [row.max_delay for row in policy.schedule()] == [60, 120, 240]
    outcome = run_to_end(
        one_node(NodeSettings(retry="[retry: 3, backoff: 60]")),
        always_fails(ValueError("still bad")),
        ManualClock(),
    )
    assert attempts_of(outcome) == 4


def test_rappel_python_spelling_is_accepted() -> None:
    """Rappel's ``RetryPolicy(attempts=3, exception_types=[...], backoff_seconds=60)`` works.

    piercefreeman/rappel docs/Action-Retries.md: "retry=RetryPolicy(attempts=3,
    exception_types=[\"NetworkError\"], backoff_seconds=60)", where "`RetryPolicy.attempts`:
    Total attempts (initial try + retries)" and "`RetryPolicy.backoff_seconds`: Base backoff
    duration in seconds".
    """
    make: Any = rappel
    policy = make(attempts=3, exception_types=["NetworkError"], backoff_seconds=60)
    assert policy.max_attempts == 3
    assert policy.retry_on == ("NetworkError",)
    assert [row.max_delay for row in policy.schedule()] == [60, 120]
    # the same policy as the bracket text with 2 retries, and our names stay canonical
    assert [policy] == RetryPolicy.parse("[NetworkError -> retry: 2, backoff: 60]")
    assert "max_attempts=3" in repr(policy)
    assert "attempts=3" not in repr(policy).replace("max_attempts=3", "")
    text = dumps_workflow(one_node(NodeSettings(retry=policy)))
    assert '"max_attempts":3' in text.replace(" ", "")
    assert "exception_types" not in text
    assert loads_workflow(text).nodes[1].settings.retry == (policy,)


def test_rappel_python_spelling_without_types_catches_all() -> None:
    """``exception_types`` empty or left out catches every exception, as Rappel says.

    piercefreeman/rappel docs/Action-Retries.md: "`RetryPolicy.exception_types`: Exception
    type names to match; empty/None catches all".
    """
    make: Any = rappel
    choices: tuple[list[str] | None, ...] = (None, [])
    for types in choices:
        policy = make(attempts=2, exception_types=types, backoff_seconds=5)
        assert decide_retry([policy], failed_view(KeyError("k")), seed=SEED) is not None


def fails_in_turn(*errors: Exception | None) -> Registry:
    """A registry whose ``test.call`` raises ``errors[n]`` on attempt n + 1 (None: returns)."""
    registry = Registry()

    def call(params: Any, ctx: ActionContext) -> Any:
        error = errors[ctx.attempt - 1] if ctx.attempt <= len(errors) else None
        if error is not None:
            raise error
        return "done"

    registry.register("test.call", call)
    return registry


def test_rappel_timeouts_have_their_own_retry_budget() -> None:
    """Timed-out attempts retry on their own budget of 3, apart from ``retry: N``.

    piercefreeman/rappel docs/Action-Retries.md: "`timeout_retry_limit` | int | Retries
    remaining for timeout failures", set to 3 for every action ("timeout_retry_limit: 3").
    """
    text = "[retry: 1] [timeout: 30s]"
    (policy,) = RetryPolicy.parse(text)
    assert (policy.max_attempts, policy.timeout_retries) == (2, 3)
    assert RetryPolicy.parse("[retry: 1]")[0].timeout_retries is None
    assert dialects.rappel(attempts=2, timeout=30).timeout_retries == 3
    late = AttemptTimeout("ran past 30s")
    workflow = one_node(NodeSettings(retry=text))
    done = run_to_end(workflow, fails_in_turn(late, late, late), ManualClock())
    assert isinstance(done, Completed)
    assert attempts_of(done) == 4  # three timeouts retried, retry: 1 untouched
    failed = run_to_end(workflow, fails_in_turn(late, late, late, late), ManualClock())
    assert isinstance(failed, Failed)
    assert attempts_of(failed) == 4
    down = ConnectionError("down")
    mixed = run_to_end(workflow, fails_in_turn(down, late, down), ManualClock())
    assert isinstance(mixed, Failed)
    assert attempts_of(mixed) == 3  # the one retry of errors, and one of a timeout


def test_rappel_bracket_retry_count_has_no_limit_of_its_own() -> None:
    """``[retry: N]`` takes any N; ``Limits.max_attempts`` alone caps the attempts that run.

    piercefreeman/rappel docs/Action-Retries.md: "`retry: N` - Maximum retry attempts
    before permanent failure", with no bound of its own.
    """
    (policy,) = RetryPolicy.parse("[retry: 5000, backoff: 0]")
    assert policy.max_attempts == 5001
    registry = Registry(limits=Limits(max_attempts=4))

    def call(params: Any, ctx: ActionContext) -> Any:
        raise ConnectionError("down")

    registry.register("test.call", call)
    outcome = run_to_end(
        one_node(NodeSettings(retry="[retry: 5000, backoff: 0]")), registry, ManualClock()
    )
    assert isinstance(outcome, Failed)
    assert attempts_of(outcome) == 4
    assert "Limits.max_attempts=4" in outcome.error.message
    with pytest.raises(InvalidSettingsError, match="whole number of retries"):
        RetryPolicy.parse(f"[retry: {2**64}]")


def returns_exception_payloads(failures: int) -> Registry:
    """A registry whose ``test.call`` returns an exception-shaped payload ``failures`` times."""
    registry = Registry()

    def call(params: Any, ctx: ActionContext) -> Any:
        if ctx.attempt <= failures:
            return {"type": "NetworkError", "message": "connection reset"}
        return {"rows": 3}

    registry.register("test.call", call)
    return registry


@pytest.mark.parametrize(
    "retry",
    [
        {"dialect": "waymark", "attempts": 3, "backoff_seconds": 1},
        {"max_attempts": 3, "retry_on_result": "waymark.exception_payload"},
    ],
)
def test_waymark_exception_payload_is_a_failure_when_asked(retry: dict[str, Any]) -> None:
    """A returned payload shaped like an exception fails the attempt under Waymark's reading.

    piercefreeman/waymark docs/_internal/Action-Retries.md: "Action result is treated as
    failure if payload looks like an exception object (`type` / `message`)."
    """
    outcome = run_to_end(
        one_node(NodeSettings(retry=retry)), returns_exception_payloads(2), ManualClock()
    )
    assert isinstance(outcome, Completed)
    assert outcome.execution is not None
    record = outcome.execution.node("call")
    assert record is not None
    assert len(record.attempts) == 3
    assert record.output == {"rows": 3}
    if "dialect" in retry:
        assert NodeSettings(retry=retry).retry == (dialects.waymark(attempts=3, backoff_seconds=1),)
    # prana's own reading keeps a returned value as the output
    plain = run_to_end(
        one_node(NodeSettings(retry="[retry: 2]")), returns_exception_payloads(2), ManualClock()
    )
    assert isinstance(plain, Completed)
    assert attempts_of(plain) == 1


def test_waymark_max_over_matching_brackets_is_flagged_by_lint() -> None:
    """Brackets that overlap with different counts are flagged: Waymark takes the maximum.

    piercefreeman/waymark docs/_internal/Action-Retries.md: "`max_retries` is the max across
    matching retry brackets." prana keeps the first matching policy (DESIGN §5).
    """
    text = "[retry: 3, backoff: 60] [NetworkError -> retry: 5, backoff: 2m]"
    workflow = one_node(NodeSettings(retry=text))
    found = [w for w in lint(workflow) if w.code == "first_match_differs_from_max"]
    assert len(found) == 1
    message = found[0].message
    assert "NetworkError" in message
    assert "Waymark" in message
    # the first match decides: a NetworkError gets the first bracket's 3 retries
    policies = RetryPolicy.parse(text)
    decision = decide_retry(policies, failed_view(NetworkError("reset"), attempt=4), seed=SEED)
    assert decision is None
    # Rappel's own multi-bracket example does not overlap: no warning
    rappel = "[RateLimitError -> retry: 10, backoff: 1m] [NetworkError -> retry: 3, backoff: 30s]"
    plain = one_node(NodeSettings(retry=rappel))
    assert not [w for w in lint(plain) if w.code == "first_match_differs_from_max"]


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("[ConnectionError -> retry: 2] [OSError -> retry: 4]", True),
        ("[OSError -> retry: 4] [ConnectionError -> retry: 2]", False),
        ("[OSError -> retry: 2] [ConnectionError -> retry: 2]", False),
        ("[ValueError -> retry: 2] [KeyError -> retry: 4]", False),
        ("[NetworkError -> retry: 1] [NetworkError -> retry: 2]", True),
        ("[NetworkError -> retry: 1] [retry: 2]", True),
    ],
)
def test_lint_flags_only_overlaps_where_waymark_would_allow_more(text: str, flagged: bool) -> None:
    """Only an error matching an earlier policy and a later one with more attempts is flagged."""
    workflow = one_node(NodeSettings(retry=text))
    codes = [w.code for w in lint(workflow)]
    assert ("first_match_differs_from_max" in codes) is flagged


# -- rh_agents -----------------------------------------------------------------------------


def test_rh_agents_linear_backoff_is_initial_delay_times_attempt() -> None:
    """An rh_agents config with a linear strategy waits 1, 2, 3 x the initial delay.

    rhodief/rh-agents rh_agents/core/retry.py: "LINEAR = \"linear\"  # Linearly increasing
    delay (delay * attempt)" and "delay = self.initial_delay * attempt": the multiplier is
    ignored.
    """
    config = {
        "max_attempts": 4,
        "backoff_strategy": "linear",
        "initial_delay": 2.0,
        "backoff_multiplier": 3.0,
        "max_delay": 60.0,
        "jitter": False,
    }
    (policy,) = coerce_policies(config, field="retry_config") or ()
    assert [row.max_delay for row in policy.schedule()] == [2.0, 4.0, 6.0]
    # written in prana's own names, linear keeps DESIGN §5's formula with the multiplier
    ours = RetryPolicy(max_attempts=4, backoff="linear", initial_delay=2.0, multiplier=3.0)
    assert [row.max_delay for row in ours.schedule()] == [2.0, 8.0, 14.0]


def test_rh_agents_form_keeps_its_jitter_and_error_filters() -> None:
    """An rh_agents config keeps its +/-25% jitter and its transient-errors-only default.

    rhodief/rh-agents rh_agents/core/retry.py: "jitter: bool = Field(default=True" with
    "# Apply jitter if enabled (±25% jitter)"; "DEFAULT_RETRYABLE_EXCEPTIONS" lists
    "TimeoutError, asyncio.TimeoutError, ConnectionError, ..." and "exclude_exceptions" is a
    "Blacklist of exceptions to never retry (merged with defaults)".
    """
    (policy,) = (
        coerce_policies({"max_attempts": 5, "backoff_strategy": "exponential"}, field="c") or ()
    )
    assert policy.jitter == 0.25
    assert decide_retry([policy], failed_view(TimeoutError()), seed=SEED) is not None
    assert decide_retry([policy], failed_view(NetworkError()), seed=SEED) is not None
    assert decide_retry([policy], failed_view(RuntimeError()), seed=SEED) is None
    (strict,) = (
        coerce_policies(
            {
                "retry_on_exceptions": ["ValueError", "LookupError"],
                "exclude_exceptions": ["IndexError"],
                "jitter": False,
            },
            field="c",
        )
        or ()
    )
    assert strict.jitter == "none"
    assert decide_retry([strict], failed_view(ValueError()), seed=SEED) is None
    assert decide_retry([strict], failed_view(IndexError()), seed=SEED) is None
    assert decide_retry([strict], failed_view(LookupError()), seed=SEED) is not None
    with pytest.raises(InvalidSettingsError, match="unknown RetryConfig setting 'retries'"):
        coerce_policies({"backoff_strategy": "linear", "retries": 3}, field="c")


def test_rh_agents_retry_timeout_does_not_start_an_attempt_that_cannot_finish() -> None:
    """No attempt starts whose timeout would run past what is left of ``retry_timeout``.

    rhodief/rh-agents docs/RETRY_MECHANISM_SPEC.md: "retry_config = RetryConfig(max_attempts=5,
    retry_timeout=30.0)" ... "# If attempts take: 3s, 3s, 3s, 25s / # Fourth attempt won't
    start (would exceed 30s total)". prana knows how long an attempt may take only from its
    timeout: with attempts failing after 3 s and a 24 s timeout, the fourth attempt (9 s
    used, 24 s more would end at 33 s) never starts; with the example's 25 s as the timeout,
    already the third could not fit (6 + 25 > 30).
    """
    for timeout, expected in ((24.0, 3), (25.0, 2)):
        clock = ManualClock()
        registry = Registry()

        def slow_failure(params: Any, ctx: ActionContext, clock: ManualClock = clock) -> Any:
            clock.advance(3)
            raise ConnectionError("took 3 s, then failed")

        registry.register("test.call", slow_failure)
        policy = RetryPolicy(
            max_attempts=5,
            backoff="constant",
            initial_delay=0,
            retry_timeout=30,
            timeout=timeout,
        )
        outcome = run_to_end(one_node(NodeSettings(retry=policy)), registry, clock)
        assert isinstance(outcome, Failed)
        assert attempts_of(outcome) == expected, timeout


def test_schedule_leaves_out_retries_whose_timeout_cannot_fit_the_budget() -> None:
    """``schedule()`` agrees with the run: a retry whose timeout overruns the budget is not listed.

    The rule of rhodief/rh-agents docs/RETRY_MECHANISM_SPEC.md: "Fourth attempt won't start
    (would exceed 30s total)".
    """
    policy = RetryPolicy(
        max_attempts=4,
        backoff="constant",
        initial_delay=10,
        max_delay=10,
        retry_timeout=30,
        timeout=15,
    )
    assert [row.retry for row in policy.schedule()] == [1]
    untimed = RetryPolicy(
        max_attempts=4, backoff="constant", initial_delay=10, max_delay=10, retry_timeout=30
    )
    assert [row.retry for row in untimed.schedule()] == [1, 2, 3]


def test_rh_agents_defaults_per_actor_type_are_registered_defaults() -> None:
    """Per-kind defaults are the default an action type is registered with.

    rhodief/rh-agents rh_agents/core/retry.py ``get_default_retry_config_by_actor_type``:
    "EventType.LLM_CALL: RetryConfig(max_attempts=3, ... max_delay=30.0, enabled=True)" and
    "EventType.AGENT_CALL: RetryConfig(enabled=False  # Agents handle their own logic)".
    """
    registry = Registry()
    llm_default = RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=30.0)
    registry.register("llm.call", lambda params, ctx: {}, retry=llm_default)
    registry.register("agent.call", lambda params, ctx: {}, retry=RetryPolicy(enabled=False))
    llm = registry.get("llm.call")
    agent = registry.get("agent.call")
    assert llm is not None
    assert agent is not None
    workflow = one_node(NodeSettings(), node_type="llm.call")
    assert resolve(workflow.nodes[1], workflow, llm.retry) == (llm_default,)
    agent_flow = one_node(NodeSettings(), node_type="agent.call")
    (off,) = resolve(agent_flow.nodes[1], agent_flow, agent.retry)
    assert not off.enabled
    # a node's own policy still wins, as rh_agents' event-level config does
    own = RetryPolicy(max_attempts=5)
    mine = one_node(NodeSettings(retry=own), node_type="agent.call")
    assert resolve(mine.nodes[1], mine, agent.retry) == (own,)


class ValidationError(Exception):
    """Stands for pydantic's ``ValidationError``, matched by name as rh_agents lists it."""


RH_AGENTS_EXAMPLE_3 = """
retry:
  dialect: rh_agents
  max_attempts: 5
  initial_delay: 2.0
  backoff_multiplier: 3.0
"""
"""rh_agents' docs/RETRY_MECHANISM_SPEC.md Example 3 ("aggressive per-event"), marked."""


def test_rh_agents_marker_gives_retry_config_defaults_exactly() -> None:
    """``RetryConfig()`` is written ``{dialect: rh_agents}`` (or ``dialects.RetryConfig()``).

    rhodief/rh-agents docs/RETRY_MECHANISM_SPEC.md: "max_attempts: int = Field(default=3",
    "backoff_strategy: BackoffStrategy = Field(default=BackoffStrategy.EXPONENTIAL)",
    "initial_delay: float = Field(default=1.0", "max_delay: float = Field(default=60.0",
    "backoff_multiplier: float = Field(default=2.0", "jitter: bool = Field(default=True".
    """
    (marked,) = coerce_policies({"dialect": "rh_agents"}, field="retry") or ()
    assert marked == dialects.RetryConfig()
    assert (marked.max_attempts, marked.backoff, marked.initial_delay) == (3, "exponential", 1.0)
    assert (marked.multiplier, marked.max_delay, marked.jitter) == (2.0, 60.0, 0.25)
    assert marked.jitter_after_cap
    assert decide_retry([marked], failed_view(RuntimeError()), seed=SEED) is None
    assert decide_retry([marked], failed_view(TimeoutError()), seed=SEED) is not None
    retry = yaml.safe_load(RH_AGENTS_EXAMPLE_3)["retry"]
    (example,) = NodeSettings(retry=retry).retry or ()
    assert example == dialects.RetryConfig(
        max_attempts=5, initial_delay=2.0, backoff_multiplier=3.0
    )
    assert [row.typical_delay for row in example.schedule()] == [2.0, 6.0, 18.0, 54.0]
    assert decide_retry([example], failed_view(RuntimeError()), seed=SEED) is None
    with pytest.raises(InvalidSettingsError, match=r"dialect='rh-agent'.*rh_agents"):
        coerce_policies({"dialect": "rh-agent"}, field="retry")


def test_rh_agents_jitter_comes_after_the_cap() -> None:
    """rh_agents jitters the capped delay: a delay may pass ``max_delay`` by up to 25%.

    rhodief/rh-agents rh_agents/core/retry.py: "# Apply max delay cap / delay = min(delay,
    self.max_delay)" then "# Apply jitter if enabled (±25% jitter) / jitter_factor = 0.75 +
    (random.random() * 0.5)".
    """
    policy = dialects.RetryConfig(max_attempts=8, initial_delay=1.0, max_delay=4.0)
    rows = policy.schedule()
    assert [(r.min_delay, r.typical_delay, r.max_delay) for r in rows][3:] == [(3.0, 4.0, 5.0)] * 4
    delays = [policy.delay_for(6, seed=f"e-{i}:call:0") for i in range(200)]
    assert max(delays) > 4.0
    assert all(3.0 <= d <= 5.0 for d in delays)


def test_rh_agents_max_delay_below_initial_delay_caps() -> None:
    """rh_agents caps every delay at ``max_delay``, even one below ``initial_delay``.

    rhodief/rh-agents docs/RETRY_MECHANISM_SPEC.md: "max_delay: float = Field(default=60.0,
    ge=0" (no check against ``initial_delay``) and "delay = min(delay, self.max_delay)".
    """
    policy = dialects.RetryConfig(
        backoff_strategy="constant", initial_delay=10.0, max_delay=5.0, jitter=False
    )
    assert [row.max_delay for row in policy.schedule()] == [5.0, 5.0]
    (read,) = (
        coerce_policies(
            {"backoff_strategy": "linear", "initial_delay": 10, "max_delay": 5}, field="c"
        )
        or ()
    )
    assert read.max_delay == 5.0


def test_rh_agents_default_exclusions_are_its_five() -> None:
    """Exactly rh_agents' five default exclusions; a whitelisted AssertionError retries.

    rhodief/rh-agents docs/RETRY_MECHANISM_SPEC.md: "DEFAULT_NON_RETRYABLE_EXCEPTIONS = [
    ValidationError, ValueError, TypeError, KeyError, AttributeError," with "# Check
    exclusions first" and "If whitelist is set, exception must be in it".
    """
    everything = dialects.RetryConfig(retry_on_exceptions=[Exception])
    for excluded in (ValidationError(), ValueError(), TypeError(), KeyError(), AttributeError()):
        assert decide_retry([everything], failed_view(excluded), seed=SEED) is None, excluded
    for retried in (AssertionError(), RuntimeError(), IndexError()):
        assert decide_retry([everything], failed_view(retried), seed=SEED) is not None, retried
    asserted = dialects.RetryConfig(retry_on_exceptions=[AssertionError])
    assert decide_retry([asserted], failed_view(AssertionError()), seed=SEED) is not None


def test_noetl_marker_gives_noetl_defaults_exactly() -> None:
    """``{dialect: noetl}`` (or ``dialects.noetl(...)``) is NoETL's policy, jitter included.

    noetl/noetl noetl/plugin/runtime/retry.py: "self.max_attempts = retry_config.get(
    'max_attempts', 3)", "initial_delay', 1.0", "max_delay', 60.0", "backoff_multiplier',
    2.0", "self.jitter = retry_config.get('jitter', True)", and "delay = min(...,
    self.max_delay)" then "delay = delay * (0.5 + random.random())"; no exception filter.
    """
    (policy,) = coerce_policies({"dialect": "noetl"}, field="retry") or ()
    assert policy == dialects.noetl({})[0]
    assert (policy.max_attempts, policy.initial_delay, policy.multiplier) == (3, 1.0, 2.0)
    assert (policy.max_delay, policy.jitter, policy.jitter_after_cap) == (60.0, 0.5, True)
    assert decide_retry([policy], failed_view(ValueError()), seed=SEED) is not None
    assert dialects.noetl(3)[0] == attrs.evolve(policy, max_attempts=3)
    (plain,) = dialects.noetl({"jitter": False, "max_attempts": 2})
    assert (plain.jitter, plain.max_attempts) == ("none", 2)


def test_rappel_marker_and_its_python_names_in_data() -> None:
    """Rappel's Python names read in data too, marked or by their own keys.

    piercefreeman/rappel docs/Action-Retries.md: "retry=RetryPolicy(attempts=3,
    exception_types=[\"NetworkError\"], backoff_seconds=60)".
    """
    expected = dialects.rappel(attempts=3, exception_types=["NetworkError"], backoff_seconds=60)
    mapping = {"attempts": 3, "exception_types": ["NetworkError"], "backoff_seconds": 60}
    assert coerce_policies({"dialect": "rappel", **mapping}, field="retry") == (expected,)
    assert coerce_policies(mapping, field="retry") == (expected,)


LINT_DIALECTS = """
id: dialects
nodes:
  - {key: start, type: manual.trigger}
  - key: example3
    type: http.request
    params: {url: "http://x"}
    settings:
      retry: {max_attempts: 5, initial_delay: 2.0, backoff_multiplier: 3.0}
  - key: bare
    type: http.request
    params: {url: "http://x"}
    settings:
      retry: {max_attempts: 5}
  - key: marked
    type: http.request
    params: {url: "http://x"}
    settings:
      retry: {dialect: rh_agents, max_attempts: 5}
  - key: own
    type: http.request
    params: {url: "http://x"}
    settings:
      retry: {max_attempts: 5, retry_on: [ConnectionError]}
connections:
  - {from_node: start, to_node: example3}
"""


def test_lint_says_which_dialect_an_ambiguous_mapping_was_read_as(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana lint`` names the reading of an unmarked mapping that fits several designs.

    rhodief/rh-agents docs/RETRY_MECHANISM_SPEC.md's Example 3 ("max_attempts=5,
    initial_delay=2.0, backoff_multiplier=3.0") is also a NoETL retry mapping.
    """
    from scheduling._cli import main

    path = tmp_path / "dialects.yaml"
    path.write_text(LINT_DIALECTS)
    assert main(["lint", str(path), "--json"]) == 1
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    notes = {w["node"]: w["message"] for w in entry["warnings"] if w["code"] == "ambiguous_dialect"}
    assert set(notes) == {"example3", "bare"}
    assert "read as NoETL's" in notes["example3"]
    assert "rh_agents" in notes["example3"]
    assert "dialect:" in notes["example3"]
    assert "read as prana's" in notes["bare"]
    found = lint(
        loads_workflow(yaml.safe_load(LINT_DIALECTS)), source=yaml.safe_load(LINT_DIALECTS)
    )
    assert {w.node_key for w in found if w.code == "ambiguous_dialect"} == {"example3", "bare"}


# -- Prana ADR-008 -------------------------------------------------------------------------


def test_prana_max_retries_counts_retries_and_max_attempts_counts_every_attempt() -> None:
    """Prana's ``max_retries=N`` allows N retries: N + 1 attempts, stored as ``max_attempts``.

    bluzky/prana docs/adr/008-node-retry-mechanism.md: "field(:max_retries, :integer, default:
    1, number: [min: 1, max: 10])" and the suspension data "\"max_attempts\" =>
    node.settings.max_retries": the ADR files the retry count under ``max_attempts``; prana
    stores the total, first try included (DESIGN §3).
    """
    settings = NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=1000)
    registry = always_fails(ConnectionError("down"))
    first = execute_workflow(one_node(settings), {}, registry=registry, clock=ManualClock())
    assert isinstance(first, Suspend)
    assert isinstance(first.data, RetryData)
    assert (first.data.attempt_number, first.data.max_attempts) == (2, 4)
    outcome = run_to_end(one_node(settings), registry, ManualClock())
    assert attempts_of(outcome) == 4


# -- the policy reference ------------------------------------------------------------------


def test_coming_from_page_lists_each_remaining_difference_with_the_way_back() -> None:
    """Each difference that remains has a row saying how to get the design's own behaviour.

    piercefreeman/waymark docs/_internal/Action-Retries.md: "Retry backoff delay (`backoff`)
    is not applied before requeue." and "Timeout policy (`timeout`) is not enforced";
    rhodief/rh-agents docs/RETRY_MECHANISM_SPEC.md: "DEFAULT_NON_RETRYABLE_EXCEPTIONS = [
    ValidationError, ValueError, TypeError, KeyError, AttributeError,".
    """
    text = (DOCS / "coming-from" / "retry-designs.md").read_text()
    table = re.search(r"## Where the readings differ\n\n(?:.*?\n\n)?(\|.*?)\n\n", text, re.DOTALL)
    assert table is not None
    header, _rule, *rows = table.group(1).splitlines()
    assert header.split("|")[1:-1] == [
        " Difference ",
        " The design ",
        " prana ",
        " To get the design's behaviour ",
    ]
    assert len(rows) >= 12
    for row in rows:
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        assert len(cells) == 4, row
        assert all(cells), row
    body = "\n".join(rows)
    for topic in (
        "0-based",
        "ledger",
        "Waymark's runner",
        "retrying",
        "timeout_retry_limit",
        "jitter",
        "first match",
        "`attempt`",
    ):
        assert topic in body, topic
    rh_row = next(line for line in text.splitlines() if line.startswith("| rh_agents |"))
    assert "AssertionError" not in rh_row
    assert "ValidationError" in rh_row
    brackets = next(
        line for line in text.splitlines() if line.startswith("| Rappel / Waymark brackets")
    )
    assert "Waymark's runner" in brackets


def test_policy_reference_has_a_coming_from_table() -> None:
    """The docs' policy reference points to a table stating each seed's counting rule."""
    reference = (DOCS / "reference" / "retry-policy.md").read_text()
    assert "../coming-from/retry-designs.md" in reference
    text = (DOCS / "coming-from" / "retry-designs.md").read_text()
    table = re.search(
        r"## Counting rules and defaults, side by side\n\n(\|.*?)\n\n", text, re.DOTALL
    )
    assert table is not None
    rows = table.group(1).splitlines()
    for seed in ("Rappel", "Waymark", "NoETL", "rh_agents", "Prana ADR-008", "prana"):
        assert any(row.startswith(f"| {seed}") for row in rows), seed
    assert all(row.count("|") == rows[0].count("|") for row in rows)
    assert "`max_attempts=max_retries + 1`" in table.group(1)
    assert "## Why prana stores total attempts" in text
    assert "coming-from/retry-designs.md" in README.read_text()
