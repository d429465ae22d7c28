"""The retry policy: shape, jitter, error classification, conditions, budget, precedence."""

from __future__ import annotations

import typing
from datetime import timedelta
from typing import Any

import attrs
import pytest

from prana import (
    AttemptTimeout,
    ErrorInfo,
    InvalidSettingsError,
    Node,
    NodeSettings,
    NonRetryable,
    RetryAfter,
    RetryPolicy,
    ScheduleRow,
    Workflow,
)
from prana._decision import (
    RAN_OUT,
    AttemptView,
    RetryExplanation,
    RetryReason,
    decide_retry,
    explain_retry,
    rejects_result,
)
from prana._model import NEVER_RETRY_CODES, ErrorCode
from prana._policy import (
    CURVES,
    HINT_CEILING_SECONDS,
    JITTER_KINDS,
    Backoff,
    Curve,
    JitterKind,
)
from prana._resolve import attempt_timeout, resolve
from prana.dialects import prana_simple as simple_policy
from prana.dialects import read_policies as coerce_policies
from prana.testing import is_testing, set_testing

SEED = "exec-1:fetch:0"


class NetworkError(ConnectionError):
    """A transient error of the kind users define."""


class BadInputError(ValueError):
    """A programming error by inheritance."""


def info_of(exc: BaseException, code: str = "action_error") -> ErrorInfo:
    """The ErrorInfo the executor would record for ``exc``."""
    cls = type(exc)
    return ErrorInfo(code=code, type=cls.__qualname__, module=cls.__module__, message=str(exc))


def view_of(
    exc: BaseException, attempt: int = 1, elapsed: float = 0.0, live: bool = True, **kw: Any
) -> AttemptView:
    """An AttemptView for a failed attempt raising ``exc``."""
    return AttemptView(
        attempt=attempt,
        error=info_of(exc),
        exception=exc if live else None,
        elapsed_seconds=elapsed,
        **kw,
    )


def delay(policy: RetryPolicy, exc: BaseException, attempt: int = 1, **kw: Any) -> float | None:
    """The delay decide_retry picks for one policy, or None for no retry."""
    decision = decide_retry([policy], view_of(exc, attempt, **kw), seed=SEED)
    return None if decision is None else decision.delay_seconds


# --- construction --------------------------------------------------------------------


def test_defaults_are_the_designed_ones() -> None:
    """A bare policy has the defaults of DESIGN §5."""
    p = RetryPolicy()
    assert (p.max_attempts, p.backoff, p.initial_delay, p.multiplier, p.max_delay, p.jitter) == (
        3,
        "exponential",
        1.0,
        2.0,
        60.0,
        "none",
    )
    assert p.enabled
    assert p.retry_on is None
    assert p.exclude is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(5, 5.0), (0.25, 0.25), (timedelta(minutes=2), 120.0), ("500ms", 0.5), ("30s", 30.0),
     ("2m", 120.0), ("1h", 3600.0)],
)  # fmt: skip
def test_durations_are_read_as_float_seconds(value: Any, seconds: float) -> None:
    """Every duration field takes numbers, timedeltas and text and stores float seconds."""
    p = RetryPolicy(initial_delay=value, max_delay="2h", timeout=value, retry_timeout=value)
    assert p.initial_delay == seconds
    assert p.timeout == seconds
    assert p.retry_timeout == seconds
    assert isinstance(p.initial_delay, float)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": None}, "max_attempts"),
        ({"backoff": "quadratic"}, "backoff"),
        ({"initial_delay": -1}, "initial_delay"),
        ({"initial_delay": "soon"}, "initial_delay"),
        ({"max_delay": "30x"}, "max_delay"),
        ({"initial_delay": 10, "max_delay": 5}, "max_delay"),
        ({"multiplier": -1}, "multiplier"),
        ({"multiplier": float("nan")}, "multiplier"),
        ({"multiplier": "2"}, "multiplier"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"jitter": "some"}, "jitter"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": 0.0}, "jitter"),
        ({"retry_on": [42]}, "retry_on"),
        ({"retry_on": ()}, "retry_on"),
        ({"exclude": [int]}, "exclude"),
        ({"retry_when": "attempt < 3"}, "retry_when"),
        ({"stop_when": 3}, "stop_when"),
        ({"retry_on_result": "not a name"}, "retry_on_result"),
        ({"timeout": 0}, "timeout"),
        ({"retry_timeout": "-1s"}, "retry_timeout"),
        ({"hint_exceeds_max_delay": "yes"}, "hint_exceeds_max_delay"),
        ({"enabled": 1}, "enabled"),
        ({"seed": 7}, "seed"),
    ],
)
def test_bad_settings_raise_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    """Every invalid value is refused at construction with an error naming its field."""
    with pytest.raises(InvalidSettingsError, match=field):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize("name", ["attempts", "exception_types", "backoff_seconds"])
def test_rappels_names_say_where_they_are_read(name: str) -> None:
    """``RetryPolicy(attempts=3)`` (Rappel's spelling, taken until this release) says to
    write ``prana.dialects.rappel(...)``, not only that the keyword is unexpected."""
    settings: dict[str, Any] = {name: 3}
    with pytest.raises(InvalidSettingsError, match=rf"{name}=.*prana\.dialects\.rappel"):
        RetryPolicy(**settings)


def test_unlimited_attempts_need_a_budget() -> None:
    """max_attempts=None is allowed only together with retry_timeout."""
    with pytest.raises(InvalidSettingsError, match="retry_timeout"):
        RetryPolicy(max_attempts=None)
    assert RetryPolicy(max_attempts=None, retry_timeout="1h").max_attempts is None


def test_linear_curve_may_use_a_zero_multiplier() -> None:
    """A linear curve with multiplier 0 is a constant delay, which is allowed."""
    p = RetryPolicy(backoff="linear", multiplier=0, initial_delay=3)
    assert [p.delay_for(k) for k in (1, 2, 3)] == [3.0, 3.0, 3.0]


def test_jitter_accepts_booleans_and_names() -> None:
    """jitter=True is full jitter, False is none, names are case-insensitive."""
    assert RetryPolicy(jitter=True).jitter == "full"
    assert RetryPolicy(jitter=False).jitter == "none"
    assert RetryPolicy(jitter="Equal").jitter == "equal"
    assert RetryPolicy(jitter=0.25).jitter == 0.25


def test_policies_are_frozen() -> None:
    """A policy cannot be changed in place; evolve re-validates."""
    p = RetryPolicy()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.max_attempts = 5  # type: ignore[misc]
    with pytest.raises(InvalidSettingsError, match="max_attempts"):
        attrs.evolve(p, max_attempts=0)


# --- curves ----------------------------------------------------------------------------


PINNED_CURVES: dict[str, list[float]] = {
    "constant": [2, 2, 2, 2, 2, 2],
    "linear": [2, 8, 14, 20, 26, 32],  # 2 * (1 + 3 * (k - 1))
    "exponential": [2, 6, 18, 40, 40, 40],  # 2 * 3 ** (k - 1), capped at 40
    "fibonacci": [2, 2, 4, 6, 10, 16],  # 2 * F(k)
}
"""Each curve's delays for initial_delay=2, multiplier=3, max_delay=40, worked out by hand."""


@pytest.mark.parametrize(("backoff", "expected"), PINNED_CURVES.items())
def test_curves_follow_the_pinned_formulas(backoff: str, expected: list[float]) -> None:
    """Each backoff gives DESIGN §5's delay before retry k, capped by max_delay."""
    p = RetryPolicy(
        backoff=backoff,  # type: ignore[arg-type]
        initial_delay=2,
        multiplier=3,
        max_delay=40,
        max_attempts=10,
    )
    assert [p.delay_for(k) for k in range(1, 7)] == expected


def test_every_curve_of_the_table_is_pinned() -> None:
    """A curve added to the table needs its hand-worked delays above, or this fails."""
    assert set(PINNED_CURVES) == set(CURVES)


def test_backoff_literal_and_curve_table_agree() -> None:
    """The ``Backoff`` type lists exactly the table's curves, in the table's order."""
    assert typing.get_args(Backoff) == tuple(CURVES)


def test_no_curve_name_falls_through_to_another_curve() -> None:
    """Every accepted curve name gives delays of its own (a new name cannot borrow one).

    Today a name added to the accepted list without its own branch silently got
    Fibonacci's delays; with the table, each name is a row with its own function.
    """
    schedules = {
        name: tuple(
            RetryPolicy(backoff=name, initial_delay=1, multiplier=3, max_delay=1e6).delay_for(k)
            for k in range(1, 8)
        )
        for name in typing.get_args(Backoff)
    }
    assert len(set(schedules.values())) == len(schedules), schedules


def test_a_curve_added_to_the_table_is_accepted_used_and_described(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Adding a curve is adding one row: validation, delays, describe and schedule follow."""
    quadratic = Curve(lambda initial, _m, _cap, k: initial * k * k, "d * k ** 2")
    monkeypatch.setitem(CURVES, "quadratic", quadratic)
    p = RetryPolicy(backoff="quadratic", initial_delay=1, max_delay=100)  # type: ignore[arg-type]
    assert [p.delay_for(k) for k in (1, 2, 3)] == [1, 4, 9]
    assert p.describe() == "quadratic 1.0s x2, cap 1m40s, 3 attempts"
    assert [row.max_delay for row in p.schedule()] == [1, 4]
    with pytest.raises(InvalidSettingsError, match="quadratic"):
        RetryPolicy(backoff="cubic")  # type: ignore[arg-type]


def test_a_jitter_kind_added_to_the_table_is_accepted_and_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Adding a jitter kind is adding one row: the converter accepts it, delays use it."""
    top = JitterKind(
        lambda policy, k: (policy._curve(k), policy._curve(k), policy._curve(k) * 1.5),
        lambda _policy, base, _k, _seed: base * 2,
    )
    monkeypatch.setitem(JITTER_KINDS, "top", top)
    p = RetryPolicy(backoff="constant", initial_delay=2, max_delay=60, jitter="TOP")
    assert p.jitter == "top"
    assert p.delay_for(1) == 3.0  # drawn at 4, clamped into the kind's bounds (2, 3)
    assert p.describe() == "constant 2.0s, cap 1m0s, top jitter, 3 attempts"
    with pytest.raises(InvalidSettingsError, match="none, full, equal, decorrelated, top"):
        RetryPolicy(jitter="wild")


def test_describe_shows_the_multiplier_only_for_curves_that_use_it() -> None:
    """``describe`` reads the table: constant and fibonacci ignore the multiplier."""
    described = {
        name: RetryPolicy(backoff=name, multiplier=3).describe().split(",")[0]  # type: ignore[arg-type]
        for name in CURVES
    }
    assert described == {
        "constant": "constant 1.0s",
        "linear": "linear 1.0s x3",
        "exponential": "exponential 1.0s x3",
        "fibonacci": "fibonacci 1.0s",
    }


def test_fibonacci_sequence_is_1_1_2_3_5_8() -> None:
    """F starts 1, 1, 2, 3, 5, 8, 13 and the cap applies."""
    p = RetryPolicy(backoff="fibonacci", initial_delay=1, max_delay=10)
    assert [p.delay_for(k) for k in range(1, 9)] == [1, 1, 2, 3, 5, 8, 10, 10]


def test_huge_retry_numbers_stay_at_the_cap() -> None:
    """A retry far along an exponential curve neither overflows nor passes max_delay."""
    p = RetryPolicy(max_attempts=None, retry_timeout="30d", max_delay="1h")
    assert p.delay_for(5000) == 3600.0
    assert RetryPolicy(backoff="fibonacci", max_delay=60).delay_for(10_000) == 60.0


def test_zero_initial_delay_is_always_zero() -> None:
    """initial_delay=0 gives a zero delay on every curve."""
    p = RetryPolicy(initial_delay=0, max_attempts=None, retry_timeout=10)
    assert p.delay_for(1) == 0.0
    assert p.delay_for(3000) == 0.0


def test_delay_for_refuses_retry_zero() -> None:
    """Retries count from 1."""
    with pytest.raises(InvalidSettingsError, match="from 1"):
        RetryPolicy().delay_for(0)


# --- jitter ----------------------------------------------------------------------------


@pytest.mark.parametrize("jitter", ["full", "equal", "decorrelated", 0.5])
def test_jitter_is_deterministic_per_seed(jitter: Any) -> None:
    """The same seed text always gives the same delays; another seed gives others."""
    p = RetryPolicy(jitter=jitter, max_attempts=8, max_delay=300)
    first = [p.delay_for(k, seed="e1:n:0") for k in range(1, 8)]
    again = [p.delay_for(k, seed="e1:n:0") for k in range(1, 8)]
    other = [p.delay_for(k, seed="e2:n:0") for k in range(1, 8)]
    assert first == again
    assert first != other


def test_policy_seed_changes_the_jitter() -> None:
    """The policy's own seed field is mixed into the jitter seed."""
    a = RetryPolicy(jitter="full")
    b = RetryPolicy(jitter="full", seed="deploy-2")
    assert a.delay_for(2, seed=SEED) != b.delay_for(2, seed=SEED)


def test_jitter_is_the_same_in_every_process() -> None:
    """Jitter does not depend on hash(): processes with different hash seeds agree."""
    import os
    import subprocess
    import sys

    code = (
        "from prana import RetryPolicy\n"
        "p = RetryPolicy(jitter='full', max_attempts=6)\n"
        "print([p.delay_for(k, seed='exec-1:fetch:0') for k in range(1, 6)])"
    )
    outputs = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout.strip())
    here = RetryPolicy(jitter="full", max_attempts=6)
    assert outputs == {str([here.delay_for(k, seed="exec-1:fetch:0") for k in range(1, 6)])}


def test_jitter_matches_random_seeded_with_the_text() -> None:
    """Full jitter before retry k is Random(f'{seed}:{k}').uniform(0, d)."""
    import random

    p = RetryPolicy(jitter="full", initial_delay=4, max_attempts=5)
    assert p.delay_for(2, seed=SEED) == random.Random(f"{SEED}:2").uniform(0, 8)


@pytest.mark.parametrize(
    ("jitter", "low", "high"),
    [("full", 0.0, 8.0), ("equal", 4.0, 8.0), (0.25, 6.0, 10.0)],
)
def test_jitter_stays_in_its_range(jitter: Any, low: float, high: float) -> None:
    """Jittered delays before retry 2 of a 4s-x2 curve stay in each kind's range."""
    p = RetryPolicy(jitter=jitter, initial_delay=4, max_delay=60, max_attempts=5)
    delays = [p.delay_for(2, seed=f"e{i}") for i in range(200)]
    assert all(low <= d <= high for d in delays)
    assert max(delays) - min(delays) > (high - low) / 2  # it really spreads


def test_jitter_never_passes_the_cap() -> None:
    """A +/-50% jitter on a delay at the cap is clipped to max_delay, never above."""
    p = RetryPolicy(jitter=0.5, initial_delay=10, max_delay=10, max_attempts=5)
    delays = [p.delay_for(3, seed=f"e{i}") for i in range(100)]
    assert max(delays) == 10.0
    assert min(delays) >= 5.0


def test_decorrelated_jitter_grows_from_the_initial_delay() -> None:
    """Decorrelated jitter stays within [initial_delay, min(cap, initial * 3**k)]."""
    p = RetryPolicy(jitter="decorrelated", initial_delay=1, max_delay=20, max_attempts=10)
    for k in range(1, 9):
        for i in range(30):
            d = p.delay_for(k, seed=f"s{i}")
            assert 1.0 <= d <= min(20.0, 3.0**k)


# --- classification ----------------------------------------------------------------------


def test_smart_defaults_retry_transient_errors() -> None:
    """Without filters, operational errors retry."""
    for exc in (ConnectionError("x"), TimeoutError("x"), RuntimeError("x"), NetworkError("x")):
        assert delay(RetryPolicy(), exc) == 1.0


@pytest.mark.parametrize(
    "exc",
    [ValueError("x"), TypeError("x"), KeyError("x"), IndexError("x"), AttributeError("x"),
     NameError("x"), NotImplementedError("x"), AssertionError("x"), BadInputError("x"),
     UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")],
)  # fmt: skip
def test_smart_defaults_never_retry_programming_errors(exc: BaseException) -> None:
    """Programming errors, and their subclasses through the MRO, do not retry by default."""
    assert delay(RetryPolicy(), exc) is None


def test_attempt_timeout_retries_by_default_and_can_be_excluded() -> None:
    """AttemptTimeout is a TimeoutError, so it retries unless excluded."""
    assert delay(RetryPolicy(), AttemptTimeout("late")) == 1.0
    assert delay(RetryPolicy(exclude=("AttemptTimeout",)), AttemptTimeout("late")) is None
    assert delay(RetryPolicy(exclude=(TimeoutError,)), AttemptTimeout("late")) is None


def test_retry_on_names_match_through_the_mro() -> None:
    """'OSError' covers ConnectionError and its user subclasses, by name or dotted name."""
    assert delay(RetryPolicy(retry_on=("OSError",)), NetworkError("x")) == 1.0
    assert delay(RetryPolicy(retry_on=("builtins.OSError",)), NetworkError("x")) == 1.0
    assert delay(RetryPolicy(retry_on=(f"{__name__}.NetworkError",)), NetworkError("x")) == 1.0
    assert delay(RetryPolicy(retry_on=(f"{__name__}:NetworkError",)), NetworkError("x")) == 1.0
    assert delay(RetryPolicy(retry_on=("OSError",)), RuntimeError("x")) is None


def test_retry_on_classes_match_subclasses() -> None:
    """A class filter matches subclasses, and may opt programming errors back in."""
    assert delay(RetryPolicy(retry_on=(ConnectionError,)), NetworkError("x")) == 1.0
    assert delay(RetryPolicy(retry_on=(ValueError,)), BadInputError("x")) == 1.0
    assert delay(RetryPolicy(retry_on=(ConnectionError,)), TimeoutError("x")) is None


def test_exclude_wins_over_retry_on() -> None:
    """An error both allowed and excluded does not retry."""
    p = RetryPolicy(retry_on=("OSError",), exclude=(NetworkError,))
    assert delay(p, NetworkError("x")) is None
    assert delay(p, ConnectionRefusedError("x")) == 1.0


def test_exclude_alone_narrows_the_smart_defaults() -> None:
    """With only exclude, programming errors still do not retry."""
    p = RetryPolicy(exclude=("TimeoutError",))
    assert delay(p, TimeoutError("x")) is None
    assert delay(p, ValueError("x")) is None
    assert delay(p, ConnectionError("x")) == 1.0


def test_non_retryable_wins_over_everything() -> None:
    """NonRetryable never retries, even with retry_on catching it."""
    p = RetryPolicy(retry_on=("BaseException",), max_attempts=10)
    assert delay(p, NonRetryable("stop")) is None
    assert delay(p, NonRetryable(ConnectionError("wrapped"))) is None


def test_non_retryable_is_recognised_without_the_live_exception() -> None:
    """After a reload, the non_retryable code or the type name still stops retries."""
    p = RetryPolicy(retry_on=("BaseException",))
    wrapped = ErrorInfo(
        code="non_retryable", type="ConnectionError", module="builtins", message="x"
    )
    assert decide_retry([p], AttemptView(attempt=1, error=wrapped), seed=SEED) is None
    assert delay(p, NonRetryable("x"), live=False) is None


@pytest.mark.parametrize("code", ["params_invalid", "output_not_json", "template_error"])
def test_codes_that_never_retry(code: str) -> None:
    """Failures DESIGN §3 lists as never retried are refused whatever the policy."""
    error = ErrorInfo(code=code, type="RuntimeError", module="builtins", message="x")
    p = RetryPolicy(retry_on=("BaseException",))
    assert decide_retry([p], AttemptView(attempt=1, error=error), seed=SEED) is None


def test_without_the_live_exception_loaded_classes_still_match_through_the_mro() -> None:
    """A reloaded error of a loaded class matches 'OSError'; an unknown one by name only."""
    assert delay(RetryPolicy(retry_on=("OSError",)), NetworkError("x"), live=False) == 1.0
    assert delay(RetryPolicy(), BadInputError("x"), live=False) is None
    unknown = ErrorInfo(code="action_error", type="Gone", module="nowhere.mod", message="x")
    by_name = RetryPolicy(retry_on=("Gone",))
    assert decide_retry([by_name], AttemptView(attempt=1, error=unknown), seed=SEED) is not None
    by_parent = RetryPolicy(retry_on=("OSError",))
    assert decide_retry([by_parent], AttemptView(attempt=1, error=unknown), seed=SEED) is None
    dotted = RetryPolicy(retry_on=("nowhere.mod.Gone",))
    assert decide_retry([dotted], AttemptView(attempt=1, error=unknown), seed=SEED) is not None


def test_class_filter_matches_a_reloaded_error_by_name() -> None:
    """A class filter matches a not-live error whose class is not loaded by its names."""
    error = ErrorInfo(code="action_error", type="NetworkError", module=__name__, message="x")
    p = RetryPolicy(retry_on=(NetworkError,))
    assert decide_retry([p], AttemptView(attempt=1, error=error), seed=SEED) is not None


# --- RetryAfter --------------------------------------------------------------------------


def test_retry_after_sets_the_delay_and_retries_under_defaults() -> None:
    """A RetryAfter hint is the next delay, and RetryAfter retries under the smart defaults."""
    assert delay(RetryPolicy(), RetryAfter(7)) == 7.0
    assert delay(RetryPolicy(), RetryAfter("2s")) == 2.0


def test_retry_after_is_capped_by_max_delay_unless_opted_out() -> None:
    """The hint is capped at max_delay, unless hint_exceeds_max_delay is set."""
    assert delay(RetryPolicy(max_delay=30), RetryAfter("5m")) == 30.0
    assert delay(RetryPolicy(max_delay=30, hint_exceeds_max_delay=True), RetryAfter("5m")) == 300.0


def test_retry_after_hard_ceiling_always_applies() -> None:
    """No hint waits longer than HINT_CEILING_SECONDS, even when opted out of the cap."""
    p = RetryPolicy(hint_exceeds_max_delay=True)
    assert delay(p, RetryAfter(timedelta(days=30))) == HINT_CEILING_SECONDS


def test_retry_after_hint_from_a_reloaded_record() -> None:
    """Without the live exception the hint comes from AttemptView.retry_after_seconds."""
    view = view_of(RetryAfter(9), live=False, retry_after_seconds=9.0)
    decision = decide_retry([RetryPolicy()], view, seed=SEED)
    assert decision is not None
    assert decision.delay_seconds == 9.0


def test_retry_after_still_respects_max_attempts_and_filters() -> None:
    """A hint says how long, not whether: attempts and retry_on still decide."""
    assert delay(RetryPolicy(max_attempts=2), RetryAfter(1), attempt=2) is None
    assert delay(RetryPolicy(retry_on=("OSError",)), RetryAfter(1)) is None


# --- attempts, several policies ------------------------------------------------------------


def test_max_attempts_counts_the_first_try() -> None:
    """max_attempts=3 allows retries after attempts 1 and 2, not after 3."""
    p = RetryPolicy(max_attempts=3)
    assert delay(p, ConnectionError(), attempt=1) == 1.0
    assert delay(p, ConnectionError(), attempt=2) == 2.0
    assert delay(p, ConnectionError(), attempt=3) is None


def test_first_matching_policy_decides_with_its_own_limits() -> None:
    """With several policies, the first whose filter matches decides, with its own attempts."""
    policies = [
        RetryPolicy(retry_on=("RateLimitError",), max_attempts=11, initial_delay=60, max_delay=600),
        RetryPolicy(retry_on=(ConnectionError,), max_attempts=4, initial_delay=30, max_delay=600),
    ]

    class RateLimitError(Exception):
        pass

    limited = decide_retry(policies, view_of(RateLimitError(), attempt=5), seed=SEED)
    assert limited is not None
    assert (limited.policy_index, limited.max_attempts) == (0, 11)
    net = decide_retry(policies, view_of(NetworkError(), attempt=2), seed=SEED)
    assert net is not None
    assert (net.policy_index, net.delay_seconds) == (1, 60.0)
    assert decide_retry(policies, view_of(NetworkError(), attempt=4), seed=SEED) is None
    assert decide_retry(policies, view_of(RuntimeError(), attempt=1), seed=SEED) is None


def test_disabled_policy_switches_retry_off() -> None:
    """enabled=False means no retry for anything it covers (everything, without filters)."""
    assert delay(RetryPolicy(enabled=False), ConnectionError()) is None
    policies = [RetryPolicy(enabled=False), RetryPolicy(retry_on=(ValueError,))]
    assert decide_retry(policies, view_of(ValueError()), seed=SEED) is None


def test_disabled_policy_with_a_filter_stops_only_its_errors() -> None:
    """A disabled policy with retry_on stops those errors; later policies handle the rest."""
    policies = [RetryPolicy(retry_on=(NetworkError,), enabled=False), RetryPolicy()]
    assert decide_retry(policies, view_of(NetworkError()), seed=SEED) is None
    assert decide_retry(policies, view_of(TimeoutError()), seed=SEED) is not None


def test_no_policies_means_no_retry() -> None:
    """An empty policy tuple never retries."""
    assert decide_retry((), view_of(ConnectionError()), seed=SEED) is None


def test_explain_retry_names_the_reason() -> None:
    """explain_retry says why a retry was refused, as a reason and in words."""
    why = explain_retry([RetryPolicy(max_attempts=2)], view_of(OSError(), 2), seed=SEED)
    assert (why.reason, why.text) == (RetryReason.EXHAUSTED, "attempts exhausted (2 of 2)")
    why = explain_retry([RetryPolicy()], view_of(KeyError()), seed=SEED)
    assert (why.reason, why.text) == (RetryReason.NOT_MATCHED, "no policy matches the error")
    why = explain_retry([RetryPolicy()], view_of(OSError()), seed=SEED)
    assert why.decision is not None
    assert (why.reason, why.text) == (RetryReason.RETRY, "retry")
    assert explain_retry([], AttemptView(attempt=1, error=None), seed=SEED) == RetryExplanation(
        None, RetryReason.NOTHING_FAILED, "nothing failed"
    )


def _raise(_view: AttemptView) -> bool:
    raise RuntimeError("bug")


REASON_CASES: dict[RetryReason, tuple[RetryPolicy | None, AttemptView]] = {
    RetryReason.RETRY: (RetryPolicy(), view_of(OSError())),
    RetryReason.NOTHING_FAILED: (RetryPolicy(), AttemptView(attempt=1, error=None)),
    RetryReason.NON_RETRYABLE: (RetryPolicy(), view_of(NonRetryable("no"))),
    RetryReason.NEVER_RETRIES: (
        RetryPolicy(retry_on=("BaseException",)),
        AttemptView(
            attempt=1,
            error=ErrorInfo(
                code="template_error", type="TemplateError", module="prana", message="x"
            ),
        ),
    ),
    RetryReason.NOT_MATCHED: (RetryPolicy(retry_on=("TimeoutError",)), view_of(OSError())),
    RetryReason.DISABLED: (RetryPolicy(enabled=False), view_of(OSError())),
    RetryReason.EXHAUSTED: (RetryPolicy(max_attempts=2), view_of(OSError(), 2)),
    RetryReason.STOP_WHEN: (RetryPolicy(stop_when=lambda v: True), view_of(OSError())),
    RetryReason.STOP_WHEN_FAILED: (RetryPolicy(stop_when=_raise), view_of(OSError())),
    RetryReason.RETRY_WHEN_FALSE: (RetryPolicy(retry_when=lambda v: False), view_of(OSError())),
    RetryReason.RETRY_WHEN_FAILED: (RetryPolicy(retry_when=_raise), view_of(OSError())),
    RetryReason.BUDGET: (RetryPolicy(retry_timeout=5), view_of(OSError(), elapsed=4.5)),
}
"""One attempt per reason, each built so that exactly that reason decides."""


def test_every_retry_reason_has_a_case() -> None:
    """Each member of RetryReason is reachable (the enum is the code's real set of reasons)."""
    assert set(REASON_CASES) == set(RetryReason)


@pytest.mark.parametrize("reason", list(REASON_CASES), ids=lambda r: r.value)
def test_each_case_gives_its_reason(reason: RetryReason) -> None:
    """explain_retry reports the reason its case was built for; only RETRY has a decision."""
    policy, view = REASON_CASES[reason]
    explanation = explain_retry([policy] if policy else [], view, seed=SEED)
    assert explanation.reason is reason
    assert (explanation.decision is not None) == (reason is RetryReason.RETRY)
    assert explanation.text
    assert {RetryReason.EXHAUSTED, RetryReason.BUDGET} == RAN_OUT


# --- error codes -------------------------------------------------------------------------


def test_never_retry_codes_are_error_code_values() -> None:
    """The never-retry set is made of ErrorCode values (plain strings, as records hold them)."""
    assert {type(code) for code in NEVER_RETRY_CODES} == {str}
    assert {code.value for code in ErrorCode} > NEVER_RETRY_CODES


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.value)
def test_each_error_code_retries_exactly_when_the_set_allows(code: ErrorCode) -> None:
    """Under a retry-everything policy, a code retries iff it is not in NEVER_RETRY_CODES."""
    info = ErrorInfo(code=code.value, type="RuntimeError", module="builtins", message="x")
    decision = decide_retry(
        [RetryPolicy(retry_on=("BaseException",))], AttemptView(attempt=1, error=info), seed=SEED
    )
    assert (decision is None) == (code.value in NEVER_RETRY_CODES)


# --- conditions -----------------------------------------------------------------------------


def test_stop_when_stops_and_retry_when_narrows() -> None:
    """stop_when true refuses the retry; retry_when false refuses it too."""
    stop = RetryPolicy(stop_when=lambda v: "fatal" in v.error.message)
    assert delay(stop, ConnectionError("fatal: gone")) is None
    assert delay(stop, ConnectionError("blip")) == 1.0
    only_503 = RetryPolicy(retry_when=lambda v: v.error.message == "503")
    assert delay(only_503, ConnectionError("503")) == 1.0
    assert delay(only_503, ConnectionError("404")) is None


def test_conditions_see_the_attempt_and_elapsed_time() -> None:
    """Conditions get the AttemptView: attempt number and elapsed seconds."""
    p = RetryPolicy(max_attempts=10, retry_when=lambda v: v.attempt < 3 and v.elapsed_seconds < 5)
    assert delay(p, OSError(), attempt=2, elapsed=1) == 2.0
    assert delay(p, OSError(), attempt=3, elapsed=1) is None
    assert delay(p, OSError(), attempt=1, elapsed=9) is None


def test_a_condition_returning_a_delay_sets_it_capped() -> None:
    """retry_when may return seconds or a timedelta: that is the next delay, capped."""
    assert delay(RetryPolicy(retry_when=lambda v: 12.5), OSError()) == 12.5
    assert delay(RetryPolicy(retry_when=lambda v: timedelta(seconds=3)), OSError()) == 3.0
    assert delay(RetryPolicy(retry_when=lambda v: 0), OSError()) == 0.0
    assert delay(RetryPolicy(max_delay=10, retry_when=lambda v: 99), OSError()) == 10.0
    assert delay(RetryPolicy(retry_when=lambda v: "4s"), OSError()) == 4.0


def test_a_condition_delay_wins_over_a_hint() -> None:
    """The predicate's delay is used even when the action sent a RetryAfter hint."""
    assert delay(RetryPolicy(retry_when=lambda v: 2), RetryAfter(30)) == 2.0


def test_a_condition_that_raises_means_no_retry() -> None:
    """A broken condition never crashes the decision: it refuses the retry."""

    def broken(_view: AttemptView) -> bool:
        raise RuntimeError("bug")

    why = explain_retry([RetryPolicy(retry_when=broken)], view_of(OSError()), seed=SEED)
    assert why.decision is None
    assert (why.reason, why.text) == (RetryReason.RETRY_WHEN_FAILED, "retry_when failed: bug")
    assert delay(RetryPolicy(stop_when=broken), OSError()) is None
    assert delay(RetryPolicy(retry_when=lambda v: "maybe"), OSError()) is None


def test_condition_strings_read_as_booleans() -> None:
    """'true'/'false' answers (as from text templates) are booleans, not delays."""
    assert delay(RetryPolicy(retry_when=lambda v: "true"), OSError()) == 1.0
    assert delay(RetryPolicy(retry_when=lambda v: "false"), OSError()) is None
    assert delay(RetryPolicy(retry_when=lambda v: None), OSError()) is None
    assert delay(RetryPolicy(retry_when=lambda v: [1]), OSError()) == 1.0


def is_pending(output: Any) -> bool:
    """A module-level predicate: data names it only once it is registered."""
    return isinstance(output, dict) and output.get("status") == "pending"


def test_module_references_are_names_never_imported() -> None:
    """'module:qualname' text is kept as a name (DESIGN §7): never imported or called.

    Unresolved, it cannot run: the engine resolves names on the registry at validation.
    """
    p = RetryPolicy(retry_on_result=f"{__name__}:is_pending")
    assert p.retry_on_result == f"{__name__}:is_pending"
    view = AttemptView(attempt=1, error=None, output={"status": "pending"})
    assert not rejects_result([p], view)  # an unresolved name never holds
    why = explain_retry([RetryPolicy(stop_when="some_name")], view_of(OSError()), seed=SEED)
    assert why.reason is RetryReason.STOP_WHEN_FAILED
    assert "not resolved" in why.text


# --- retry_on_result --------------------------------------------------------------------------


def test_rejects_result_uses_the_first_policy_with_a_predicate() -> None:
    """The first enabled policy with retry_on_result decides whether the output fails."""
    policies = [
        RetryPolicy(retry_on=("OSError",)),
        RetryPolicy(retry_on_result=lambda out: out == "pending"),
        RetryPolicy(retry_on_result=lambda out: True),
    ]
    assert rejects_result(policies, AttemptView(attempt=1, error=None, output="pending"))
    assert not rejects_result(policies, AttemptView(attempt=1, error=None, output="done"))
    assert not rejects_result([RetryPolicy()], AttemptView(attempt=1, error=None, output="x"))


def test_rejects_result_accepts_when_the_predicate_raises() -> None:
    """A predicate that raises accepts the output rather than crash the run."""
    p = RetryPolicy(retry_on_result=lambda out: out["missing"])
    assert not rejects_result([p], AttemptView(attempt=1, error=None, output={}))


def test_a_rejected_result_retries_under_the_policy_that_rejected_it() -> None:
    """ResultRejected is decided by the retry_on_result policy, whatever its retry_on."""
    poll = RetryPolicy(
        retry_on=("OSError",),
        retry_on_result=lambda out: out == "pending",
        backoff="constant",
        initial_delay=5,
        max_attempts=4,
    )
    error = ErrorInfo(
        code="result_rejected", type="ResultRejected", module="prana", message="rejected"
    )
    view = AttemptView(attempt=2, error=error, output="pending")
    decision = decide_retry([RetryPolicy(retry_on=("KeyError",)), poll], view, seed=SEED)
    assert decision is not None
    assert (decision.policy_index, decision.delay_seconds) == (1, 5.0)
    done = AttemptView(attempt=4, error=error, output="pending")
    assert decide_retry([poll], done, seed=SEED) is None


# --- budget ----------------------------------------------------------------------------------


def test_retry_timeout_refuses_a_retry_that_would_end_past_the_budget() -> None:
    """elapsed + delay > retry_timeout means no retry; equal is still allowed."""
    p = RetryPolicy(max_attempts=10, backoff="constant", initial_delay=10, retry_timeout=60)
    assert delay(p, OSError(), attempt=3, elapsed=50) == 10.0
    assert delay(p, OSError(), attempt=3, elapsed=50.5) is None


def test_unlimited_attempts_stop_at_the_budget() -> None:
    """With max_attempts=None only the budget stops retries."""
    p = RetryPolicy(max_attempts=None, retry_timeout="1m", backoff="constant", initial_delay=5)
    assert delay(p, OSError(), attempt=500, elapsed=30) == 5.0
    assert delay(p, OSError(), attempt=2, elapsed=56) is None


def test_budget_applies_to_hints() -> None:
    """A RetryAfter hint that would end past the budget is not scheduled."""
    p = RetryPolicy(retry_timeout=60, max_delay=120)
    assert delay(p, RetryAfter(90)) is None
    assert delay(p, RetryAfter(30), elapsed=20) == 30.0


# --- set_testing -----------------------------------------------------------------------------


def test_set_testing_zeroes_delays_and_restores() -> None:
    """Inside set_testing every delay is 0; leaving the block restores the old state."""
    p = RetryPolicy(initial_delay=30, max_delay=60)
    assert not is_testing()
    with set_testing(True):
        assert is_testing()
        assert delay(p, OSError()) == 0.0
        assert delay(p, RetryAfter(40)) == 0.0
        assert delay(RetryPolicy(retry_when=lambda v: 9), OSError()) == 0.0
    assert not is_testing()
    assert delay(p, OSError()) == 30.0


def test_set_testing_caps_attempts() -> None:
    """set_testing(attempts=2) allows at most two attempts under any policy."""
    p = RetryPolicy(max_attempts=10)
    with set_testing(True, attempts=2):
        first = decide_retry([p], view_of(OSError(), 1), seed=SEED)
        assert first is not None
        assert first.max_attempts == 2
        assert decide_retry([p], view_of(OSError(), 2), seed=SEED) is None
        unlimited = RetryPolicy(max_attempts=None, retry_timeout=60)
        assert decide_retry([unlimited], view_of(OSError(), 2), seed=SEED) is None
    assert decide_retry([p], view_of(OSError(), 2), seed=SEED) is not None


def test_set_testing_applies_without_a_with_block_and_nests() -> None:
    """set_testing takes effect on call; nested blocks restore their own previous state."""
    try:
        set_testing(True)
        assert is_testing()
        with set_testing(False):
            assert not is_testing()
            assert delay(RetryPolicy(), OSError()) == 1.0
        assert is_testing()
    finally:
        set_testing(False)
    assert not is_testing()


def test_set_testing_still_respects_the_budget() -> None:
    """Testing zeroes delays but a spent budget still stops retries."""
    p = RetryPolicy(retry_timeout=10)
    with set_testing(True):
        assert delay(p, OSError(), elapsed=10) == 0.0
        assert delay(p, OSError(), elapsed=11) is None


@pytest.mark.parametrize("bad", [{"on": "yes"}, {"attempts": 0}, {"attempts": True}])
def test_set_testing_validates(bad: dict[str, Any]) -> None:
    """Bad arguments to set_testing raise and leave the state untouched."""
    with pytest.raises(InvalidSettingsError, match="set_testing"):
        set_testing(**bad)
    assert not is_testing()


# --- coerce_policies -----------------------------------------------------------------------


def test_coerce_accepts_every_shorthand() -> None:
    """Policies, bracket text, True/False, an attempt count, mappings and lists all coerce."""
    p = RetryPolicy(max_attempts=5)
    assert coerce_policies(None, field="f") is None
    assert coerce_policies(p, field="f") == (p,)
    every = ("Exception",)  # NoETL's shorthands: NoETL has no exception filter
    assert coerce_policies(True, field="f") == (RetryPolicy(retry_on=every),)
    assert coerce_policies(False, field="f") == (RetryPolicy(enabled=False),)
    assert coerce_policies(3, field="f") == (RetryPolicy(max_attempts=3, retry_on=every),)
    assert coerce_policies(0, field="f") == (RetryPolicy(max_attempts=1, retry_on=every),)
    text = coerce_policies("[retry: 2, backoff: 10s]", field="f")
    assert text is not None
    assert text[0].max_attempts == 3
    assert text[0].initial_delay == 10.0
    mixed = coerce_policies([p, "[OSError -> retry: 1]", {"max_retries": 2}], field="f")
    assert mixed is not None
    assert [q.max_attempts for q in mixed] == [5, 2, 3]


def test_coerce_reads_noetl_mappings_with_aliases() -> None:
    """A NoETL mapping maps backoff_multiplier, max_retries and jitter: true."""
    coerced = coerce_policies(
        {
            "max_attempts": 5,
            "initial_delay": "2s",
            "backoff_multiplier": 3,
            "max_delay": "1m",
            "jitter": True,
            "retry_when": "{{ $error.code == 'action_error' }}",
            "stop_when": "{{ $attempt > 3 }}",
        },
        field="retry",
    )
    assert coerced is not None
    (policy,) = coerced
    assert (policy.max_attempts, policy.initial_delay, policy.multiplier, policy.jitter) == (
        5,
        2.0,
        3.0,
        "full",
    )
    assert policy.retry_when == "{{ $error.code == 'action_error' }}"


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ([], "empty list"),
        (-1, ">= 0"),
        ({"max_tries": 3}, "unknown retry setting 'max_tries'"),
        ({"max_retries": -2}, "max_retries"),
        ({"max_retries": 2, "max_attempts": 3}, "given twice"),
        (2.5, "expected a RetryPolicy"),
        ([[RetryPolicy()]], "expected a RetryPolicy"),
        ("retry: 3", "column 1"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_coerce_refuses_bad_values_naming_the_field(value: Any, needle: str) -> None:
    """Bad retry settings raise InvalidSettingsError prefixed with the field name."""
    with pytest.raises(InvalidSettingsError) as caught:
        coerce_policies(value, field="NodeSettings.retry")
    assert str(caught.value).startswith("NodeSettings.retry")
    assert needle in str(caught.value)


def test_node_settings_take_text_and_shorthands() -> None:
    """NodeSettings(retry=...) goes through coerce_policies."""
    assert NodeSettings(retry="[retry: 1]").retry == (
        RetryPolicy(max_attempts=2, initial_delay=1, max_delay=1, retry_on=("Exception",)),
    )
    assert NodeSettings(retry=2).retry == (RetryPolicy(max_attempts=2, retry_on=("Exception",)),)


# --- seam helpers ----------------------------------------------------------------------------


def test_simple_policy_is_prana_s_simple_form() -> None:
    """max_retries=3, retry_delay_ms=1000: 4 attempts, 1s constant, every error retried."""
    p = simple_policy(3, 1000)
    assert (p.max_attempts, p.backoff, p.initial_delay) == (4, "constant", 1.0)
    assert delay(p, ValueError("even this")) == 1.0
    assert delay(p, NonRetryable("not this")) is None
    assert simple_policy(1, 0).initial_delay == 0.0


def test_attempt_timeout_is_the_first_policy_timeout() -> None:
    """The per-attempt timeout is the first policy's that sets one."""
    assert attempt_timeout([RetryPolicy(), RetryPolicy(timeout="2m")]) == 120.0
    assert attempt_timeout([RetryPolicy()]) is None


def test_scope_holds_error_output_attempt_elapsed() -> None:
    """Templates see $error (type, message, details, code), $output, $attempt, $elapsed."""
    view = view_of(ConnectionError("down"), attempt=2, elapsed=1.5, output={"a": 1})
    scope = view.scope()
    assert scope["error"]["type"] == "ConnectionError"
    assert scope["error"]["message"] == "down"
    assert scope["error"]["code"] == "action_error"
    assert scope["error"]["details"] is None
    assert (scope["output"], scope["attempt"], scope["elapsed"]) == ({"a": 1}, 2, 1.5)
    assert AttemptView(attempt=1, error=None).scope()["error"] is None


# --- precedence ------------------------------------------------------------------------------

NODE_P = RetryPolicy(max_attempts=2)
TYPE_P = RetryPolicy(max_attempts=3)
STAR_P = RetryPolicy(max_attempts=4)
SPEC_P = RetryPolicy(max_attempts=5)
SIMPLE_P = simple_policy(2, 500)
OFF = RetryPolicy(enabled=False)


@pytest.mark.parametrize(
    ("node_retry", "simple", "type_default", "star_default", "spec", "expected"),
    [
        # the node's own policy wins over everything
        (NODE_P, True, TYPE_P, STAR_P, SPEC_P, (NODE_P,)),
        (NODE_P, False, None, None, None, (NODE_P,)),
        # then the simple form
        (None, True, TYPE_P, STAR_P, SPEC_P, (SIMPLE_P,)),
        (None, True, None, None, None, (SIMPLE_P,)),
        # then the workflow's default for the node type
        (None, False, TYPE_P, STAR_P, SPEC_P, (TYPE_P,)),
        (None, False, TYPE_P, None, None, (TYPE_P,)),
        # then the workflow's "*" default
        (None, False, None, STAR_P, SPEC_P, (STAR_P,)),
        (None, False, None, STAR_P, None, (STAR_P,)),
        # then the action's registered default
        (None, False, None, None, SPEC_P, (SPEC_P,)),
        # otherwise no retry
        (None, False, None, None, None, ()),
        # a disabled policy switches retry off at its level, no merging with lower ones
        (OFF, True, TYPE_P, STAR_P, SPEC_P, (OFF,)),
        (None, False, OFF, STAR_P, SPEC_P, (OFF,)),
        (None, False, None, OFF, SPEC_P, (OFF,)),
        (None, False, None, None, OFF, (OFF,)),
        (None, True, OFF, OFF, OFF, (SIMPLE_P,)),
    ],
)
def test_precedence_table(
    node_retry: RetryPolicy | None,
    simple: bool,
    type_default: RetryPolicy | None,
    star_default: RetryPolicy | None,
    spec: RetryPolicy | None,
    expected: tuple[RetryPolicy, ...],
) -> None:
    """The most specific level that says anything wins, whole (DESIGN §5)."""
    settings = NodeSettings(
        retry=node_retry, retry_on_failed=simple, max_retries=2, retry_delay_ms=500
    )
    node = Node(key="n", type="http.request", settings=settings)
    defaults: dict[str, RetryPolicy] = {}
    if type_default is not None:
        defaults["http.request"] = type_default
    if star_default is not None:
        defaults["*"] = star_default
    workflow = Workflow(id="w", nodes=[node], connections=[], retry_defaults=defaults)
    resolved = resolve(node, workflow, (spec,) if spec is not None else None)
    assert resolved == expected
    if expected and not expected[0].enabled:
        assert decide_retry(resolved, view_of(OSError()), seed=SEED) is None


def test_precedence_ignores_other_types_defaults() -> None:
    """retry_defaults for another node type does not apply."""
    node = Node(key="n", type="http.request")
    workflow = Workflow(
        id="w", nodes=[node], connections=[], retry_defaults={"db.query": RetryPolicy()}
    )
    assert resolve(node, workflow, None) == ()


# --- schedule ---------------------------------------------------------------------------------


def test_schedule_lists_each_retry_with_totals() -> None:
    """schedule() gives one row per retry with cumulative totals, before anything runs."""
    rows = RetryPolicy(max_attempts=4).schedule()
    assert rows == [
        ScheduleRow(retry=1, min_delay=1, typical_delay=1, max_delay=1, cumulative_min=1,
                    cumulative_typical=1, cumulative_max=1),
        ScheduleRow(retry=2, min_delay=2, typical_delay=2, max_delay=2, cumulative_min=3,
                    cumulative_typical=3, cumulative_max=3),
        ScheduleRow(retry=3, min_delay=4, typical_delay=4, max_delay=4, cumulative_min=7,
                    cumulative_typical=7, cumulative_max=7),
    ]  # fmt: skip


def test_schedule_ranges_reflect_the_jitter() -> None:
    """Full jitter rows run from 0 to the curve, typical at the middle."""
    rows = RetryPolicy(max_attempts=3, jitter="full", initial_delay=4).schedule()
    assert [(r.min_delay, r.typical_delay, r.max_delay) for r in rows] == [(0, 2, 4), (0, 4, 8)]
    assert rows[-1].cumulative_max == 12


def test_schedule_attempts_override_and_budget_truncation() -> None:
    """attempts overrides max_attempts; retries that cannot fit the budget are left out."""
    assert len(RetryPolicy().schedule(attempts=6)) == 5
    budget = RetryPolicy(max_attempts=None, retry_timeout=20, backoff="constant", initial_delay=3)
    rows = budget.schedule()
    assert len(rows) == 6
    assert rows[-1].cumulative_max == 18
    assert RetryPolicy(enabled=False).schedule() == []
    assert RetryPolicy(max_attempts=1).schedule() == []
    with pytest.raises(InvalidSettingsError, match="attempts"):
        RetryPolicy().schedule(attempts=0)


def test_format_schedule_is_a_readable_table() -> None:
    """The schedule prints as a table headed by a one-line summary."""
    text = RetryPolicy(max_attempts=3, jitter=0.1, retry_timeout="10m", timeout="30s")
    lines = text.format_schedule().splitlines()
    assert lines[0] == (
        "exponential 1.0s x2, cap 1m0s, jitter +/-10%, 3 attempts, budget 10m0s, "
        "timeout 30.0s/attempt"
    )
    assert lines[1].split() == ["retry", "min", "typical", "max", "total", "min", "total",
                                "typical", "total", "max"]  # fmt: skip
    assert lines[3].split() == ["1", "900ms", "1.0s", "1.1s", "900ms", "1.0s", "1.1s"]
    assert str(text.schedule()) == text.format_schedule()
    assert RetryPolicy(max_attempts=1).format_schedule().endswith("(no retries)")
    assert RetryPolicy(enabled=False).describe() == "retry disabled"
    assert (
        "on (OSError, NetworkError), except (KeyError)"
        in RetryPolicy(retry_on=("OSError", NetworkError), exclude=("KeyError",)).describe()
    )


# --- conditions as data (templates) -------------------------------------------------------


def _templates_see_policy_roots() -> bool:
    """Whether prana._templates.evaluate accepts $error/$output/$attempt/$elapsed yet."""
    from prana._templates import TemplateError, evaluate

    try:
        evaluate("{{ $attempt }}", {"attempt": 1, "error": None, "output": None, "elapsed": 0})
    except TemplateError:
        return False
    return True


needs_policy_roots = pytest.mark.skipif(
    not _templates_see_policy_roots(),
    reason="prana._templates.evaluate does not accept the policy roots ($error, $output, "
    "$attempt, $elapsed) yet",
)

HTTP_503 = ErrorInfo(
    code="action_error",
    type="ConnectionError",
    module="builtins",
    message="503 busy",
    details={"status_code": 503},
)


def template_view(attempt: int = 2, elapsed: float = 12.0) -> AttemptView:
    """A failed attempt with details a template can read."""
    return AttemptView(
        attempt=attempt,
        error=HTTP_503,
        exception=ConnectionError("503 busy"),
        elapsed_seconds=elapsed,
    )


@needs_policy_roots
@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("{{ $error.details.status_code in [429, 503] }}", 2.0),
        ("{{ $error.details.status_code == 429 }}", None),
        ("{{ $error.type == 'ConnectionError' and $error.code == 'action_error' }}", 2.0),
        ("{{ $attempt < 2 }}", None),
        ("{{ $elapsed * 2 }}", 24.0),
        ("{{ '5s' if $error.message.startswith('503') else false }}", 5.0),
        ("{{ $error.type }}", None),  # neither a bool nor a delay: refused
        ("{{ $nope }}", None),  # an unknown root: refused, never raised
    ],
)
def test_retry_when_templates(condition: str, expected: float | None) -> None:
    """A retry_when template sees $error, $attempt and $elapsed; a number is the delay."""
    decision = decide_retry([RetryPolicy(retry_when=condition)], template_view(), seed=SEED)
    assert (None if decision is None else decision.delay_seconds) == expected


@needs_policy_roots
def test_stop_when_template() -> None:
    """A stop_when template that is true refuses the retry."""
    stop = RetryPolicy(stop_when="{{ $error.message.startswith('503') }}")
    assert decide_retry([stop], template_view(), seed=SEED) is None
    go_on = RetryPolicy(stop_when="{{ $elapsed > 60 }}")
    assert decide_retry([go_on], template_view(), seed=SEED) is not None


@needs_policy_roots
def test_retry_on_result_template() -> None:
    """A retry_on_result template sees $output."""
    poll = RetryPolicy(retry_on_result="{{ $output.status == 'pending' }}")
    pending = AttemptView(attempt=1, error=None, output={"status": "pending"})
    done = AttemptView(attempt=1, error=None, output={"status": "done"})
    assert rejects_result([poll], pending)
    assert not rejects_result([poll], done)


@pytest.mark.parametrize("backoff", ["constant", "linear", "exponential", "fibonacci"])
def test_huge_retry_numbers_are_capped_not_overflowing(backoff: str) -> None:
    """A very late retry of any curve is capped at max_delay; no overflow escapes."""
    policy = RetryPolicy(
        max_attempts=None,
        retry_timeout=10**9,
        backoff=backoff,  # type: ignore[arg-type]
        initial_delay=1e-300,
        multiplier=2,
        max_delay=1e300,
    )
    for retry in (1, 100, 5000):
        delay = policy.delay_for(retry)
        assert 0 <= delay <= 1e300
    if backoff in ("exponential", "fibonacci"):
        assert policy.delay_for(5000) == 1e300
