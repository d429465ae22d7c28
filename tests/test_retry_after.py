"""``RetryAfter`` takes a server's ``Retry-After`` as it comes (RFC 9110 §10.2.3).

The header is either delta-seconds or an HTTP-date. A date used to fail the node for good
(a ``DurationError`` raised inside the action, a programming error to the policy). Now a
date is a delay measured by the injected clock, and a hint that cannot be read never turns
a retryable failure into a permanent one: the attempt retries on the policy's own delay
and the recorded error says why the hint was ignored.
"""

from __future__ import annotations

import copy
import pickle
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from prana import (
    Connection,
    Node,
    NodeSettings,
    Registry,
    RetryAfter,
    RetryPolicy,
    Suspend,
    Workflow,
    execute_workflow,
)
from prana.testing import ManualClock

NOW = datetime(2015, 10, 21, 7, 27, tzinfo=timezone.utc)
"""One minute before the RFC's example date, ``Wed, 21 Oct 2015 07:28:00 GMT``."""


def first_retry(hint: Any, policy: RetryPolicy | None = None) -> Suspend:
    """Run one node that raises ``RetryAfter(hint)``; return the retry suspension."""
    registry = Registry()

    def busy(params: Any, ctx: Any) -> Any:
        raise RetryAfter(hint)

    registry.register("svc.busy", busy)
    workflow = Workflow(
        id="w",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="busy",
                type="svc.busy",
                settings=NodeSettings(
                    retry=policy or RetryPolicy(initial_delay="5s", max_delay="10m")
                ),
            ),
        ],
        connections=[Connection(from_node="start", to_node="busy")],
    )
    outcome = execute_workflow(workflow, {}, registry=registry, clock=ManualClock(NOW))
    assert isinstance(outcome, Suspend), outcome
    assert outcome.kind == "retry"
    return outcome


@pytest.mark.parametrize(
    "header",
    [
        "Wed, 21 Oct 2015 07:28:00 GMT",  # IMF-fixdate, the preferred form
        "Wednesday, 21-Oct-15 07:28:00 GMT",  # obsolete RFC 850 form
        "Wed Oct 21 07:28:00 2015",  # obsolete asctime form
    ],
)
def test_an_http_date_is_a_delay_by_the_injected_clock(header: str) -> None:
    """Every HTTP-date form RFC 9110 requires recipients to accept waits until that time."""
    suspend = first_retry(header)
    assert suspend.data.retry_delay_ms == 60_000
    assert suspend.data.resume_at == NOW + timedelta(minutes=1)


def test_delta_seconds_and_durations_work_as_before() -> None:
    """A number, digits, duration text and a timedelta are seconds from now."""
    assert first_retry("120").data.retry_delay_ms == 120_000
    assert first_retry(90).data.retry_delay_ms == 90_000
    assert first_retry("2m").data.retry_delay_ms == 120_000
    assert first_retry(timedelta(seconds=30)).data.retry_delay_ms == 30_000


def test_a_date_in_the_past_retries_at_once() -> None:
    """A date that has passed asks for no wait at all."""
    assert first_retry("Wed, 21 Oct 2015 07:00:00 GMT").data.retry_delay_ms == 0


def test_an_aware_datetime_is_accepted_too() -> None:
    """Code that already parsed the header can pass the datetime."""
    assert first_retry(NOW + timedelta(seconds=45)).data.retry_delay_ms == 45_000


def test_the_hint_from_a_date_is_still_capped_by_the_policy() -> None:
    """A far date is a hint like any other: ``max_delay`` caps it."""
    policy = RetryPolicy(initial_delay="1s", max_delay="30s")
    assert first_retry("Wed, 21 Oct 2015 09:00:00 GMT", policy).data.retry_delay_ms == 30_000


@pytest.mark.parametrize(
    ("hint", "why"),
    [
        ("soon", "cannot read 'soon'"),
        ("Wed, 32 Oct 2015 07:28:00 GMT", "cannot read"),
        (-5, "non-negative"),
        (float("nan"), "finite"),
        (datetime(2015, 10, 21, 7, 28), "naive"),  # noqa: DTZ001 - the bad input
        ([1, 2], "list"),
    ],
)
def test_a_bad_hint_retries_on_the_policy_delay_and_says_why(hint: Any, why: str) -> None:
    """The failure stays retryable: the policy's own delay, and the reason is recorded."""
    suspend = first_retry(hint)
    assert suspend.data.retry_delay_ms == 5_000  # the policy's initial_delay
    error = suspend.data.original_error
    assert error.type == "RetryAfter"
    assert why in error.details["retry_after_ignored"]
    assert "retrying on the policy's own delay" in error.message


def test_from_header_resolves_against_the_given_now() -> None:
    """``RetryAfter.from_header(value, now=ctx.now)`` gives seconds at once."""
    hint = RetryAfter.from_header("Wed, 21 Oct 2015 07:28:00 GMT", now=NOW)
    assert hint.delay_seconds == 60.0
    assert RetryAfter.from_header(" 7 ", now=NOW).delay_seconds == 7.0
    assert RetryAfter.from_header("later", now=NOW).delay_seconds is None
    with pytest.raises(ValueError, match="aware"):
        RetryAfter.from_header("7", now=datetime(2015, 1, 1))  # noqa: DTZ001 - the bad input


def test_a_subclass_keeps_its_details_when_the_hint_is_ignored() -> None:
    """An HTTP error's details survive, with the reason added beside them."""

    class Busy(RetryAfter):
        def __init__(self, hint: Any) -> None:
            self.details = {"status": 503}
            super().__init__(hint, "HTTP 503")

    error = Busy("whenever")
    assert error.details["status"] == 503
    assert "cannot read 'whenever'" in error.details["retry_after_ignored"]
    assert str(error).startswith("HTTP 503")


@pytest.mark.parametrize(
    "error",
    [
        RetryAfter(30),
        RetryAfter("30s", "busy"),
        RetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"),
        RetryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now=NOW),
        RetryAfter("whenever", "HTTP 503"),
    ],
    ids=["seconds", "text with a message", "a date", "a resolved date", "an ignored hint"],
)
def test_retry_after_round_trips_through_pickle_and_copy(error: RetryAfter) -> None:
    """A hint crosses a process boundary (or ``copy``) unchanged: its custom ``__init__`` is
    not called again with the message as the delay."""
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(again) is RetryAfter
        assert again.args == error.args
        assert str(again) == str(error)
        assert vars(again) == vars(error)
        assert again.hint_seconds(NOW) == error.hint_seconds(NOW)


def test_http_errors_round_trip_through_pickle() -> None:
    """``http.request``'s errors, whose ``__init__`` takes several arguments, pickle too."""
    from prana._http import HTTPRetryAfter, HTTPStatusError

    status = HTTPStatusError(503, "GET", "https://a.test/", "busy")
    for error in (status, HTTPRetryAfter("7", status, now=NOW), HTTPRetryAfter("soon", status)):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error)
        assert (again.args, str(again), vars(again)) == (error.args, str(error), vars(error))
