"""Properties of every backoff curve and jitter kind, checked with Hypothesis."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import BACKOFFS, JITTERS

from prana import ErrorInfo, NonRetryable, RetryAfter, RetryPolicy
from prana._decision import AttemptView, decide_retry
from prana._policy import CURVES
from prana.testing import set_testing

seeds = st.text(min_size=0, max_size=30)
jitters = st.one_of(
    st.sampled_from(JITTERS), st.floats(min_value=0.01, max_value=1.0, allow_nan=False)
)


@st.composite
def policies(
    draw: st.DrawFn, jitter: st.SearchStrategy[Any] | None = None, budget: bool | None = None
) -> RetryPolicy:
    """Any valid policy: every curve, every jitter kind, with or without a budget."""
    backoff = draw(st.sampled_from(BACKOFFS))
    initial = draw(st.floats(min_value=0, max_value=600, allow_nan=False))
    max_delay = initial + draw(st.floats(min_value=0, max_value=7200, allow_nan=False))
    low = CURVES[backoff].min_multiplier
    multiplier = draw(st.floats(min_value=low, max_value=10, allow_nan=False))
    has_budget = draw(st.booleans()) if budget is None else budget
    retry_timeout = draw(st.floats(min_value=0.001, max_value=86_400)) if has_budget else None
    unlimited = has_budget and draw(st.booleans())
    return RetryPolicy(
        backoff=backoff,
        initial_delay=initial,
        max_delay=max_delay,
        multiplier=multiplier,
        jitter=draw(jitter if jitter is not None else jitters),
        max_attempts=None if unlimited else draw(st.integers(min_value=1, max_value=30)),
        retry_timeout=retry_timeout,
    )


def failure(exc: BaseException, attempt: int, elapsed: float = 0.0) -> AttemptView:
    """The view of attempt ``attempt`` failing with ``exc``."""
    info = ErrorInfo(
        code="action_error", type=type(exc).__name__, module="builtins", message=str(exc)
    )
    return AttemptView(attempt=attempt, error=info, exception=exc, elapsed_seconds=elapsed)


@given(policies(), st.integers(min_value=1, max_value=200), seeds)
def test_delays_stay_within_the_schedule_bounds_and_the_cap(
    policy: RetryPolicy, retry: int, seed: str
) -> None:
    """Every delay lies in its schedule row's [min, max], and never above max_delay."""
    delay = policy.delay_for(retry, seed=seed)
    lo, typical, hi = policy._bounds(retry)
    assert 0 <= lo <= typical <= hi <= policy.max_delay
    assert lo <= delay <= hi
    assert delay <= policy.max_delay


@given(
    policies(jitter=st.floats(min_value=0.01, max_value=1.0, allow_nan=False)),
    st.integers(min_value=1, max_value=200),
    seeds,
)
def test_jitter_after_the_cap_spreads_the_capped_delay(
    policy: RetryPolicy, retry: int, seed: str
) -> None:
    """With ``jitter_after_cap`` a fraction f spreads the capped delay d: [d(1-f), d(1+f)]."""
    after = attrs.evolve(policy, jitter_after_cap=True)
    fraction = float(policy.jitter)
    capped = policy._curve(retry)
    lo, typical, hi = after._bounds(retry)
    assert (lo, typical, hi) == (capped * (1 - fraction), capped, capped * (1 + fraction))
    assert lo <= after.delay_for(retry, seed=seed) <= hi <= policy.max_delay * (1 + fraction)
    assert [(r.min_delay, r.max_delay) for r in after.schedule(4)] == [
        after._bounds(k)[::2] for k in range(1, len(after.schedule(4)) + 1)
    ]


@given(policies(jitter=st.just("none")), st.integers(min_value=1, max_value=300))
def test_curves_without_jitter_are_monotone(policy: RetryPolicy, retry: int) -> None:
    """Without jitter every curve is non-decreasing from one retry to the next."""
    assert policy.delay_for(retry) <= policy.delay_for(retry + 1)


@given(policies(jitter=st.just("none")), st.integers(min_value=1, max_value=60))
def test_curves_without_jitter_follow_the_formulas(policy: RetryPolicy, retry: int) -> None:
    """Without jitter the delay is DESIGN §5's formula, capped by max_delay."""
    d, m = policy.initial_delay, policy.multiplier
    fib = [1, 1]
    while len(fib) < retry:
        fib.append(fib[-1] + fib[-2])
    raw = {
        "constant": d,
        "linear": d * (1 + m * (retry - 1)),
        "exponential": d * m ** (retry - 1),
        "fibonacci": d * fib[retry - 1],
    }[policy.backoff]
    assert policy.delay_for(retry) == min(raw, policy.max_delay)


@given(policies(), st.integers(min_value=1, max_value=50), seeds)
def test_seeded_jitter_is_deterministic(policy: RetryPolicy, retry: int, seed: str) -> None:
    """The same seed text gives the same delay, from the policy or through decide_retry."""
    assert policy.delay_for(retry, seed=seed) == policy.delay_for(retry, seed=seed)
    if policy.max_attempts is None or retry < policy.max_attempts:
        one = decide_retry([policy], failure(OSError("x"), retry), seed=seed)
        two = decide_retry([policy], failure(OSError("x"), retry), seed=seed)
        assert one == two


@given(
    policies(jitter=st.sampled_from(["full", "equal", "decorrelated", 0.5])),
    st.integers(min_value=1, max_value=20),
)
def test_different_seeds_spread(policy: RetryPolicy, retry: int) -> None:
    """With a real jitter range, different executions get different delays."""
    lo, _, hi = policy._bounds(retry)
    if hi - lo < 1e-3:
        return
    delays = {policy.delay_for(retry, seed=f"exec-{i}:node:0") for i in range(20)}
    assert len(delays) >= 5  # a +/- jitter at the cap clips about half of them to the cap
    if policy.jitter != "decorrelated":  # its chained draws skew low, with no fixed spread
        assert max(delays) - min(delays) >= (hi - lo) / 4


@given(
    policies(budget=True),
    st.integers(min_value=1, max_value=100),
    st.floats(min_value=0, max_value=100_000, allow_nan=False),
    seeds,
    st.one_of(st.none(), st.floats(min_value=0, max_value=200_000, allow_nan=False)),
)
def test_never_a_retry_past_the_budget(
    policy: RetryPolicy, attempt: int, elapsed: float, seed: str, hint: float | None
) -> None:
    """A retry is only scheduled when elapsed + delay stays within retry_timeout."""
    exc: BaseException = OSError("x") if hint is None else RetryAfter(hint)
    decision = decide_retry([policy], failure(exc, attempt, elapsed), seed=seed)
    assert policy.retry_timeout is not None
    if decision is not None:
        assert elapsed + decision.delay_seconds <= policy.retry_timeout
        assert decision.delay_seconds <= max(policy.max_delay, 0)


@given(policies(), seeds)
@settings(max_examples=60, deadline=None)
def test_attempts_never_exceed_max_attempts(policy: RetryPolicy, seed: str) -> None:
    """Running until no retry, a node never makes more than max_attempts attempts."""
    attempt, elapsed = 1, 0.0
    while True:
        decision = decide_retry([policy], failure(OSError("x"), attempt, elapsed), seed=seed)
        if decision is None or attempt > 2000:
            break
        elapsed += decision.delay_seconds + 0.25  # each attempt takes a quarter second
        attempt += 1
    if policy.max_attempts is not None:
        assert attempt <= policy.max_attempts
        if policy.retry_timeout is None:
            assert attempt == policy.max_attempts
    else:
        assert policy.retry_timeout is not None
        assert elapsed <= policy.retry_timeout + 0.25


@given(policies(), st.integers(min_value=1, max_value=5))
def test_set_testing_caps_attempts_and_zeroes_delays(policy: RetryPolicy, cap: int) -> None:
    """Under set_testing(attempts=n) delays are 0 and at most n attempts run."""
    with set_testing(True, attempts=cap):
        attempt = 1
        while True:
            decision = decide_retry([policy], failure(OSError("x"), attempt), seed="s")
            if decision is None:
                break
            assert decision.delay_seconds == 0
            attempt += 1
        assert attempt <= cap


@given(
    st.lists(policies(), min_size=1, max_size=4),
    st.integers(min_value=1, max_value=10),
    st.sampled_from(["ValueError", "BaseException", "Exception", "NonRetryable", "OSError"]),
)
def test_non_retryable_never_retries(base: list[RetryPolicy], attempt: int, retry_on: str) -> None:
    """NonRetryable never retries, whatever the policies' filters say."""
    catch_all = [RetryPolicy(retry_on=(retry_on,), max_attempts=50), *base]
    assert decide_retry(catch_all, failure(NonRetryable("no"), attempt), seed="s") is None
    wrapped = NonRetryable(ConnectionError("wrapped"))
    assert decide_retry(catch_all, failure(wrapped, attempt), seed="s") is None


@given(policies(), st.integers(min_value=1, max_value=30))
def test_schedule_is_consistent(policy: RetryPolicy, attempts: int) -> None:
    """Schedule rows count retries from 1 and their totals are running sums."""
    rows = policy.schedule(attempts=attempts)
    assert len(rows) <= attempts - 1
    total = 0.0
    for number, row in enumerate(rows, start=1):
        assert row.retry == number
        assert row.min_delay <= row.typical_delay <= row.max_delay <= policy.max_delay
        total += row.max_delay
        assert abs(row.cumulative_max - total) <= 1e-6 * max(1.0, total)
        assert row.cumulative_min <= row.cumulative_typical <= row.cumulative_max
        if policy.retry_timeout is not None:
            assert row.cumulative_min <= policy.retry_timeout


names = st.from_regex(r"[A-Z][A-Za-z]{0,10}", fullmatch=True).filter(
    lambda n: n not in {"retry", "backoff", "timeout"}
)


@given(
    st.lists(
        st.tuples(
            st.lists(names, min_size=0, max_size=3),
            st.integers(min_value=0, max_value=20),
            st.integers(min_value=1, max_value=600),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_parse_reads_what_was_written(brackets: list[tuple[list[str], int, int]]) -> None:
    """Bracket text built from random parts parses back to exactly those parts."""
    parts = []
    for filters, retries, seconds in brackets:
        head = ""
        if len(filters) == 1:
            head = f"{filters[0]} -> "
        elif filters:
            head = f"({', '.join(filters)}) -> "
        parts.append(f"[{head}retry: {retries}, backoff: {seconds}s]")
    parsed = RetryPolicy.parse(" ".join(parts))
    assert len(parsed) == len(brackets)
    for policy, (filters, retries, seconds) in zip(parsed, brackets, strict=True):
        assert policy.retry_on == (tuple(filters) if filters else ("Exception",))
        assert policy.max_attempts == retries + 1
        assert [policy.delay_for(k) for k in range(1, retries + 1)] == [
            seconds * 2 ** (k - 1) for k in range(1, retries + 1)
        ]
