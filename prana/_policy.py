"""The retry policy: when a failed attempt retries, and how long it waits first.

This module holds ``RetryPolicy`` itself: its fields and their checks, the backoff curves
and jitter kinds (as tables), error matching, and the schedule table. The executor talks
to policies through a handful of functions only (the seam), in two modules beside it:

- ``prana._resolve``: ``resolve(node, workflow, spec_retry)`` picks the policies of a node
  (precedence, §5) and ``attempt_timeout(policies)`` the per-attempt timeout;
- ``prana._decision``: ``decide_retry(policies, view, seed=...)`` answers "retry, after
  how long?" or ``None``, and ``rejects_result(policies, view)`` says whether a
  successful output counts as a failure.

What users write in each seed design's form (Rappel's Python spelling, NoETL's
shorthands, rh_agents' ``RetryConfig``, Prana's simple form) is read into plain policies
by ``prana.dialects``; the policy itself knows only its own fields. Rappel's bracket text
(``RetryPolicy.parse``) is scanned by ``prana._bracket``.

Everything here is pure: no clock, no sleeping, and jitter comes from ``random.Random``
seeded with text (never ``hash()``), so the same execution always sees the same delays.
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import attrs

from prana._bracket import parse_brackets
from prana._durations import DAY, format_duration, optional_seconds, to_seconds
from prana._errors import InvalidSettingsError, RetryAfter

if TYPE_CHECKING:
    from prana._model import ErrorInfo

Backoff = Literal["constant", "linear", "exponential", "fibonacci"]
"""The curve names, for type checkers; ``CURVES`` is the truth (a test keeps them equal)."""

PROGRAMMING_ERRORS: tuple[str, ...] = (
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "AttributeError",
    "NameError",
    "NotImplementedError",
    "AssertionError",
)
"""Retrying these cannot help: under the smart defaults they never retry (through the MRO)."""

HINT_CEILING_SECONDS = DAY
"""No server hint (``RetryAfter``) may delay a retry by more than a day."""

RESULT_REJECTED = "ResultRejected"
"""``ErrorInfo.type`` of an attempt whose output ``retry_on_result`` rejected."""

_SCHEDULE_LIMIT = 1000
_DECORRELATED_WINDOW = 16
CONDITION_NAME = re.compile(r"^[A-Za-z_][\w.:\-]*$")
"""What a registered condition's name looks like (old ``module:qualname`` text fits, and is
read as a name, never imported)."""

Condition = Callable[..., Any] | str | None
ErrorFilter = tuple[str | type[BaseException], ...] | None
Duration = float | int | timedelta | str
"""A duration as ``RetryPolicy`` takes it: seconds, a ``timedelta`` or text (``"30s"``)."""
ErrorTypes = str | type[BaseException] | Sequence[str | type[BaseException]] | None
"""An error filter as ``RetryPolicy`` takes it: a class, a type name, or a list of them."""


# --- curves and jitter kinds: the tables ---------------------------------------------------
#
# Each backoff curve and each jitter kind is one row of a table below; the names the
# policy accepts, ``describe()``, the delay bounds and the test strategies are all read
# from these tables, so adding a curve is adding a row (and its name to ``Backoff``).


@attrs.frozen
class Curve:
    """One backoff curve: the delay before retry k, before the cap and jitter.

    ``delay(initial, multiplier, cap, k)`` may stop early once past ``cap`` (the caller
    caps it). ``uses_multiplier`` says whether ``describe()`` shows ``x<multiplier>``;
    ``min_multiplier`` is the smallest multiplier the curve accepts.
    """

    delay: Callable[[float, float, float, int], float]
    formula: str
    uses_multiplier: bool = True
    min_multiplier: float = 0.0


def _constant(initial: float, _multiplier: float, _cap: float, _retry: int) -> float:
    return initial


def _linear(initial: float, multiplier: float, _cap: float, retry: int) -> float:
    return initial * (1 + multiplier * (retry - 1))


def _exponential(initial: float, multiplier: float, _cap: float, retry: int) -> float:
    try:
        return initial * multiplier ** (retry - 1)
    except OverflowError:
        return math.inf


def _fibonacci(initial: float, _multiplier: float, cap: float, retry: int) -> float:
    previous, current = 0.0, 1.0  # F(0), F(1); floats reach inf instead of raising
    for _ in range(retry - 1):
        previous, current = current, previous + current
        if initial * current > cap:
            break
    return initial * current


CURVES: Mapping[str, Curve] = {
    "constant": Curve(_constant, "initial_delay", uses_multiplier=False),
    "linear": Curve(_linear, "initial_delay * (1 + multiplier * (k - 1))"),
    "exponential": Curve(_exponential, "initial_delay * multiplier ** (k - 1)", min_multiplier=1.0),
    "fibonacci": Curve(
        _fibonacci, "initial_delay * F(k), F = 1, 1, 2, 3, 5, ...", uses_multiplier=False
    ),
}
"""Every backoff curve by name (the docs' Retry policy page): the one place a curve is defined."""


@attrs.frozen
class JitterKind:
    """One jitter kind: the range it spreads a delay over, and a draw from that range.

    ``bounds(policy, k)`` is ``(lowest, typical, highest)`` before retry k (``highest``
    never past ``max_delay``); ``draw(policy, base, k, seed)`` is one seeded delay around
    the curve's ``base`` (the caller clamps it into the bounds).
    """

    bounds: Callable[[RetryPolicy, int], tuple[float, float, float]]
    draw: Callable[[RetryPolicy, float, int, str | None], float]


def _no_jitter_bounds(policy: RetryPolicy, retry: int) -> tuple[float, float, float]:
    base = policy._curve(retry)
    return base, base, base


def _no_jitter_draw(_policy: RetryPolicy, base: float, _retry: int, _seed: str | None) -> float:
    return base


def _full_bounds(policy: RetryPolicy, retry: int) -> tuple[float, float, float]:
    base = policy._curve(retry)
    return 0.0, base / 2, base


def _full_draw(policy: RetryPolicy, base: float, retry: int, seed: str | None) -> float:
    return policy._rng(seed, retry).uniform(0.0, base)


def _equal_bounds(policy: RetryPolicy, retry: int) -> tuple[float, float, float]:
    base = policy._curve(retry)
    return base / 2, base * 0.75, base


def _equal_draw(policy: RetryPolicy, base: float, retry: int, seed: str | None) -> float:
    return base / 2 + policy._rng(seed, retry).uniform(0.0, base / 2)


def _decorrelated_bounds(policy: RetryPolicy, retry: int) -> tuple[float, float, float]:
    initial, cap = policy.initial_delay, policy.max_delay
    try:
        hi = min(cap, initial * 3.0**retry)
    except OverflowError:
        hi = cap
    typical = initial
    for _ in range(min(retry, _DECORRELATED_WINDOW)):
        following = min(cap, (initial + min(3 * typical, cap)) / 2)
        if following == typical:
            break
        typical = following
    return initial, min(max(typical, initial), hi), hi


def _decorrelated_draw(policy: RetryPolicy, _base: float, retry: int, seed: str | None) -> float:
    # AWS's chain, replayed from the seed over its last few links only, so a late retry
    # costs O(1): older links no longer matter once the chain can reach the cap.
    value = policy.initial_delay
    for k in range(max(1, retry - _DECORRELATED_WINDOW + 1), retry + 1):
        upper = min(3 * value, policy.max_delay)
        value = policy._rng(seed, k).uniform(policy.initial_delay, upper)
    return value


def _fraction_bounds(policy: RetryPolicy, retry: int) -> tuple[float, float, float]:
    base = policy._curve(retry)
    fraction = float(policy.jitter)
    high = base * (1 + fraction)
    return (
        base * (1 - fraction),
        base,
        high if policy.jitter_after_cap else min(high, policy.max_delay),
    )


def _fraction_draw(policy: RetryPolicy, base: float, retry: int, seed: str | None) -> float:
    fraction = float(policy.jitter)
    return base * (1 + policy._rng(seed, retry).uniform(-fraction, fraction))


JITTER_KINDS: Mapping[str, JitterKind] = {
    "none": JitterKind(_no_jitter_bounds, _no_jitter_draw),
    "full": JitterKind(_full_bounds, _full_draw),
    "equal": JitterKind(_equal_bounds, _equal_draw),
    "decorrelated": JitterKind(_decorrelated_bounds, _decorrelated_draw),
}
"""Every named jitter kind (docs: Retry policy): ``full`` is uniform in [0, d], ``equal`` in
[d/2, d], ``decorrelated`` AWS's uniform in [initial_delay, 3 * previous delay]."""

FRACTION_JITTER = JitterKind(_fraction_bounds, _fraction_draw)
"""The jitter of a fraction f (``jitter=0.1``): uniform in [d(1-f), d(1+f)]."""


# --- converters (construction-time validation) -------------------------------------------


def _initial_delay(value: Duration) -> float:
    return to_seconds(value, field="RetryPolicy.initial_delay")


def _max_delay(value: Duration) -> float:
    return to_seconds(value, field="RetryPolicy.max_delay")


def _positive_seconds(value: Any, field: str) -> float | None:
    seconds = optional_seconds(value, field=f"RetryPolicy.{field}")
    if seconds is not None and seconds <= 0:
        raise InvalidSettingsError(
            f"RetryPolicy.{field}={value!r}: use a positive duration, or None for no limit"
        )
    return seconds


def _timeout(value: Duration | None) -> float | None:
    return _positive_seconds(value, "timeout")


def _retry_timeout(value: Duration | None) -> float | None:
    return _positive_seconds(value, "retry_timeout")


def _multiplier(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSettingsError(
            f"RetryPolicy.multiplier={value!r}: use a finite number such as 2"
        )
    if value < 0:
        raise InvalidSettingsError(f"RetryPolicy.multiplier={value!r}: use a number >= 0")
    return float(value)


def _jitter(value: str | float | bool | None) -> str | float:
    if value is True:
        return "full"
    if value is False or value is None:
        return "none"
    if isinstance(value, str):
        if value.lower() in JITTER_KINDS:
            return value.lower()
    elif isinstance(value, int | float) and math.isfinite(value) and 0 < value <= 1:
        return float(value)
    raise InvalidSettingsError(
        f"RetryPolicy.jitter={value!r}: use one of {', '.join(JITTER_KINDS)}, or a fraction in "
        "(0, 1] for +/- that share of each delay (0.1 = +/-10%)"
    )


def _type_names(value: Any, field: str) -> ErrorFilter:
    if value is None:
        return None
    if isinstance(value, str | type):
        value = (value,)
    if not isinstance(value, Sequence):
        raise InvalidSettingsError(
            f"RetryPolicy.{field}={value!r}: use a list of exception classes or type names"
        )
    out: list[str | type[BaseException]] = []
    for item in value:
        if isinstance(item, str) and item.strip():
            out.append(item.strip())  # a name, matched through the MRO: never imported
        elif isinstance(item, type) and issubclass(item, BaseException):
            out.append(item)
        else:
            raise InvalidSettingsError(
                f"RetryPolicy.{field}: {item!r} is neither an exception class nor a type "
                "name; use e.g. ConnectionError or 'ConnectionError'"
            )
    if not out and field == "retry_on":
        raise InvalidSettingsError(
            "RetryPolicy.retry_on=(): an empty filter retries nothing; use None for the "
            "smart defaults or enabled=False to switch retry off"
        )
    return tuple(out)


def _retry_on(value: ErrorTypes) -> ErrorFilter:
    return _type_names(value, "retry_on")


def _exclude(value: ErrorTypes) -> ErrorFilter:
    return _type_names(value, "exclude")


def is_template(text: str) -> bool:
    """Whether a condition string is a ``{{ }}`` template (otherwise it is a registered name)."""
    return "{{" in text and "}}" in text


def _condition(value: Any, field: str) -> Condition:
    """A callable (from code), a ``{{ }}`` template, or the name of a registered condition.

    A name is kept as text and resolved on the ``Registry`` when the workflow is validated;
    nothing here imports or calls anything (definitions are data).
    """
    if value is None or (callable(value) and not isinstance(value, str)):
        return value
    if isinstance(value, str) and (is_template(value) or CONDITION_NAME.match(value)):
        return value
    raise InvalidSettingsError(
        f"RetryPolicy.{field}={value!r}: use the name of a condition registered with "
        "registry.condition('name', fn), a template such as \"{{ $attempt < 3 }}\", or (in "
        "Python) a callable"
    )


def _retry_when(value: Condition) -> Condition:
    return _condition(value, "retry_when")


def _stop_when(value: Condition) -> Condition:
    return _condition(value, "stop_when")


def _retry_on_result(value: Condition) -> Condition:
    return _condition(value, "retry_on_result")


def _opt_str(value: str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InvalidSettingsError(f"RetryPolicy.seed={value!r}: use a string or None")


def _timeout_retries(_inst: Any, _attr: Any, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidSettingsError(
            f"RetryPolicy.timeout_retries={value!r}: use a whole number >= 0, or None to count "
            "a timed-out attempt as any other"
        )


def _bool(field: str) -> Callable[[Any, Any, Any], None]:
    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if not isinstance(value, bool):
            raise InvalidSettingsError(f"RetryPolicy.{field}={value!r}: use True or False")

    return check


# --- the policy ---------------------------------------------------------------------------

_RAPPEL_NAMES = frozenset({"attempts", "exception_types", "backoff_seconds"})
"""Rappel's ``RetryPolicy`` keywords, read by ``prana.dialects.rappel``."""


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """When to retry a failed attempt and how long to wait first (the docs' Retry policy page).

    Shape: ``max_attempts`` counts the first try (``None``: unlimited, allowed only with a
    ``retry_timeout``). The delay before retry k (k = 1 for the first retry) is, before
    the cap: constant ``initial_delay``; linear ``initial_delay * (1 + multiplier * (k -
    1))``; exponential ``initial_delay * multiplier ** (k - 1)``; fibonacci ``initial_delay
    * F(k)`` with F = 1, 1, 2, 3, 5, ... Durations are seconds, a ``timedelta`` or text
    (``"500ms"``, ``"30s"``, ``"2m"``, ``"1h"``), stored as float seconds.

    Jitter: ``"none"``; ``"full"`` (uniform in [0, d]); ``"equal"`` (uniform in [d/2, d]);
    ``"decorrelated"`` (AWS: uniform in [initial_delay, 3 * previous delay], the chain
    replayed over the last 16 retries; it ignores ``backoff`` and ``multiplier``); or a
    fraction f for uniform in [d(1-f), d(1+f)].
    It is seeded from the execution id, node key, run index and attempt (plus ``seed``),
    and applied before the cap: no delay ever exceeds ``max_delay``. With
    ``jitter_after_cap`` a fraction jitter spreads the capped delay instead, as NoETL and
    rh_agents do: a delay may pass ``max_delay`` by that fraction.

    Which errors retry: ``retry_on`` (classes or type names, matched through the MRO by
    ``__name__`` or ``module.qualname``, so ``"OSError"`` covers ``ConnectionError``);
    ``exclude`` narrows what ``retry_on`` (or the smart default) allows and always wins.
    The smart default retries everything except programming errors (``ValueError``,
    ``TypeError``, ``KeyError``, ... and their subclasses); ``RetryAfter`` always retries
    under it. ``NonRetryable`` never retries, whatever the filter says.

    ``AttemptTimeout`` (an attempt that ran past ``timeout``) IS retried by the smart
    default: it is a ``TimeoutError``, not a programming error. To stop retrying timeouts,
    add it to ``exclude``: ``exclude=("AttemptTimeout",)`` (or ``"TimeoutError"`` for
    every timeout).

    Exception names are never imported: ``"httpx.ConnectError"`` (or old
    ``"httpx:ConnectError"`` text) matches an error whose class or a base class has that
    dotted name.

    Conditions (callables get the ``AttemptView``; in data, the name of a callable
    registered with ``registry.condition(name, fn)``, resolved when the workflow is
    validated, or a ``{{ }}`` template over ``$error`` (type, message, details, code),
    ``$output``, ``$attempt``, ``$elapsed`` and NoETL's names):
    ``stop_when`` true means no retry; ``retry_when`` false means no retry, and a number
    (seconds) or ``timedelta`` it returns is the next delay (still capped). A condition
    that raises counts as "do not retry". ``retry_on_result`` gets the output (templates:
    ``$output``); true turns a successful attempt into a failed one (polling).

    ``timeout_retries`` (Rappel's ``timeout_retry_limit``) gives timed-out attempts a budget
    of their own: a timeout retries while the run's timeouts are at most that many, and
    does not count against ``max_attempts`` (``None``: a timeout is an error like any).

    ``timeout`` is per attempt (the executor enforces it); ``retry_timeout`` is the total
    budget from the start of the node run's first attempt: a retry whose delay would end
    past it is not scheduled. ``RetryAfter`` hints are capped by ``max_delay`` unless
    ``hint_exceeds_max_delay`` is set, and never exceed ``HINT_CEILING_SECONDS``.
    ``enabled=False`` switches retry off at the level it is given.

    Each seed design's own spelling (Rappel's ``RetryPolicy(attempts=3, ...)``, NoETL's
    shorthands, rh_agents' ``RetryConfig``) is read into a policy by ``prana.dialects``.
    """

    max_attempts: int | None = 3
    backoff: Backoff = "exponential"

    def __new__(cls, **settings: Any) -> RetryPolicy:
        """Refuse Rappel's names with the fix: attrs' ``__init__`` would raise a bare
        ``TypeError`` (``unexpected keyword argument 'attempts'``)."""
        rappel = sorted(settings.keys() & _RAPPEL_NAMES)
        if rappel:
            raise InvalidSettingsError(
                f"RetryPolicy: {rappel[0]}= is Rappel's name; write "
                f"prana.dialects.rappel({rappel[0]}=...) for Rappel's meaning, or prana's "
                "own fields (max_attempts, retry_on, initial_delay)"
            )
        return super().__new__(cls)

    initial_delay: float = attrs.field(default=1.0, converter=_initial_delay)
    multiplier: float = attrs.field(default=2.0, converter=_multiplier)
    max_delay: float = attrs.field(default=60.0, converter=_max_delay)
    jitter: str | float = attrs.field(default="none", converter=_jitter)
    jitter_after_cap: bool = attrs.field(default=False, validator=_bool("jitter_after_cap"))
    seed: str | None = attrs.field(default=None, converter=_opt_str)
    retry_on: tuple[str | type[BaseException], ...] | None = attrs.field(
        default=None, converter=_retry_on
    )
    exclude: tuple[str | type[BaseException], ...] | None = attrs.field(
        default=None, converter=_exclude
    )
    retry_when: Callable[..., Any] | str | None = attrs.field(default=None, converter=_retry_when)
    stop_when: Callable[..., Any] | str | None = attrs.field(default=None, converter=_stop_when)
    retry_on_result: Callable[..., Any] | str | None = attrs.field(
        default=None, converter=_retry_on_result
    )
    timeout: float | None = attrs.field(default=None, converter=_timeout)
    retry_timeout: float | None = attrs.field(default=None, converter=_retry_timeout)
    timeout_retries: int | None = attrs.field(default=None, validator=_timeout_retries)
    hint_exceeds_max_delay: bool = attrs.field(
        default=False, validator=_bool("hint_exceeds_max_delay")
    )
    enabled: bool = attrs.field(default=True, validator=_bool("enabled"))

    def __attrs_post_init__(self) -> None:
        if self.max_attempts is None:
            if self.retry_timeout is None:
                raise InvalidSettingsError(
                    "RetryPolicy.max_attempts=None (unlimited) needs a retry_timeout: set "
                    "retry_timeout (e.g. '1h') or give a whole number of attempts"
                )
        elif (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise InvalidSettingsError(
                f"RetryPolicy.max_attempts={self.max_attempts!r}: use a whole number >= 1 "
                "(the first try included), or None with a retry_timeout"
            )
        curve = CURVES.get(self.backoff) if isinstance(self.backoff, str) else None
        if curve is None:
            raise InvalidSettingsError(
                f"RetryPolicy.backoff={self.backoff!r}: use one of {', '.join(CURVES)}"
            )
        if self.multiplier < curve.min_multiplier:
            raise InvalidSettingsError(
                f"RetryPolicy.multiplier={self.multiplier:g}: an {self.backoff} backoff needs a "
                f"multiplier >= {curve.min_multiplier:g} (use 1 for a constant delay)"
            )
        if self.max_delay < self.initial_delay:
            raise InvalidSettingsError(
                f"RetryPolicy.max_delay={self.max_delay:g}s is below initial_delay="
                f"{self.initial_delay:g}s: raise max_delay or lower initial_delay"
            )

    # --- text form -------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> list[RetryPolicy]:
        """Read Rappel's bracket text: ``"[NetworkError -> retry: 5, backoff: 2m]"``.

        ``retry: N`` allows N retries after the first try; ``backoff: D`` waits ``D * 2 **
        (k - 1)`` before retry k, no jitter, no cap below that; ``[timeout: D]`` is the
        per-attempt timeout of every policy of the text. A bracket without a filter catches
        every exception, as in Rappel (``retry_on=("Exception",)``). Malformed text raises
        ``InvalidSettingsError`` naming the column.
        """
        return [cls(**settings) for settings in parse_brackets(text)]

    # --- delays ----------------------------------------------------------------------

    def delay_for(self, retry: int, *, seed: str | None = None) -> float:
        """The delay in seconds before retry ``retry`` (1 = the first retry), jittered, capped.

        ``seed`` is the text jitter is seeded from (the executor passes
        ``"{execution_id}:{node_key}:{run_index}"``); without it jitter uses ``""``.
        """
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 1:
            raise InvalidSettingsError(
                f"RetryPolicy.delay_for({retry!r}): give the retry number, a whole number from 1"
            )
        return self._delay(retry, seed)

    def _delay(self, retry: int, seed: str | None) -> float:
        """``delay_for`` without checking ``retry`` (the retry decision's: it counts them)."""
        kind = self._jitter_kind()
        lo, _typical, hi = kind.bounds(self, retry)
        if lo == hi:
            return hi
        value = kind.draw(self, self._curve(retry), retry, seed)
        return min(max(value, lo), hi)

    def _jitter_kind(self) -> JitterKind:
        jitter = self.jitter
        return JITTER_KINDS[jitter] if isinstance(jitter, str) else FRACTION_JITTER

    def _rng(self, seed: str | None, retry: int) -> random.Random:
        text = f"{seed or ''}:{retry}"
        if self.seed:
            text = f"{text}:{self.seed}"
        return random.Random(text)

    def _curve(self, retry: int) -> float:
        """The curve's delay before retry ``retry``, capped at ``max_delay``, no jitter."""
        initial, cap = self.initial_delay, self.max_delay
        if initial == 0:
            return 0.0
        return min(CURVES[self.backoff].delay(initial, self.multiplier, cap, retry), cap)

    def _bounds(self, retry: int) -> tuple[float, float, float]:
        """(lowest, typical, highest) delay jitter can give before retry ``retry``."""
        return self._jitter_kind().bounds(self, retry)

    def schedule(self, attempts: int | None = None) -> Schedule:
        """Every retry's delay (min / typical / max with jitter) and the running totals.

        ``attempts`` (first try included) overrides ``max_attempts``. Retries that could
        never start inside ``retry_timeout`` (even at their shortest delays, with the
        policy's own ``timeout`` still to fit after them) are left out; the table assumes
        attempts take no time themselves. ``set_testing`` does not change it: it describes
        the policy, not a run.
        """
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise InvalidSettingsError(
                f"RetryPolicy.schedule(attempts={attempts!r}): use a whole number >= 1"
            )
        total = attempts if attempts is not None else self.max_attempts
        if not self.enabled:
            return Schedule([], self)
        limit = _SCHEDULE_LIMIT if total is None else min(total - 1, _SCHEDULE_LIMIT)
        rows: list[ScheduleRow] = []
        cum_lo = cum_typical = cum_hi = 0.0
        for k in range(1, limit + 1):
            lo, typical, hi = self._bounds(k)
            if (
                self.retry_timeout is not None
                and cum_lo + lo + (self.timeout or 0.0) > self.retry_timeout
            ):
                break
            cum_lo, cum_typical, cum_hi = cum_lo + lo, cum_typical + typical, cum_hi + hi
            rows.append(
                ScheduleRow(
                    retry=k,
                    min_delay=lo,
                    typical_delay=typical,
                    max_delay=hi,
                    cumulative_min=cum_lo,
                    cumulative_typical=cum_typical,
                    cumulative_max=cum_hi,
                )
            )
        return Schedule(rows, self)

    def format_schedule(self, attempts: int | None = None) -> str:
        """The schedule as a text table (for READMEs and the CLI)."""
        return str(self.schedule(attempts))

    def describe(self) -> str:
        """One line summing the policy up, e.g. ``exponential 1s x2, cap 1m, 3 attempts``."""
        if not self.enabled:
            return "retry disabled"
        curve = f"{self.backoff} {format_duration(self.initial_delay)}"
        if CURVES[self.backoff].uses_multiplier:
            curve += f" x{self.multiplier:g}"
        parts = [curve, f"cap {format_duration(self.max_delay)}"]
        if self.jitter != "none":
            jitter = self.jitter
            parts.append(
                f"jitter +/-{float(jitter):.0%}{' after the cap' if self.jitter_after_cap else ''}"
                if isinstance(jitter, float)
                else f"{jitter} jitter"
            )
        parts.append(
            "unlimited attempts"
            if self.max_attempts is None
            else f"{self.max_attempts} attempt{'s' if self.max_attempts > 1 else ''}"
        )
        if self.retry_timeout is not None:
            parts.append(f"budget {format_duration(self.retry_timeout)}")
        if self.timeout is not None:
            parts.append(f"timeout {format_duration(self.timeout)}/attempt")
        if self.timeout_retries is not None:
            parts.append(f"{self.timeout_retries} timeout retries")
        if self.retry_on is not None:
            parts.append(f"on ({', '.join(_filter_name(f) for f in self.retry_on)})")
        if self.exclude:
            parts.append(f"except ({', '.join(_filter_name(f) for f in self.exclude)})")
        return ", ".join(parts)

    # --- error classification --------------------------------------------------------

    def matches(self, error: BaseException | None, info: ErrorInfo | None = None) -> bool:
        """Whether this policy's error filter covers the error (live, or as ``ErrorInfo``).

        A disabled policy without filters covers everything, so it switches retry off.
        """
        cls: type[BaseException] | None = type(error) if error is not None else None
        if cls is None and info is not None:
            cls = error_class(info)
        return self._matches(cls, info)

    def _matches(self, cls: type[BaseException] | None, info: ErrorInfo | None) -> bool:
        if not self.enabled and self.retry_on is None and self.exclude is None:
            return True
        names = _names(cls, info)
        if self.exclude and _any_match(self.exclude, cls, names):
            return False
        if self.retry_on is not None:
            return _any_match(self.retry_on, cls, names)
        return _smart_default(cls, names)


def _filter_name(item: str | type[BaseException]) -> str:
    return item if isinstance(item, str) else item.__name__


def error_class(info: ErrorInfo) -> type[BaseException] | None:
    """The class an ``ErrorInfo`` names, if its module is already loaded (never imports)."""
    module = sys.modules.get(info.module or "builtins")
    target: Any = module
    for part in info.type.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    if isinstance(target, type) and issubclass(target, BaseException):
        return target
    return None


def _names(cls: type[BaseException] | None, info: ErrorInfo | None) -> frozenset[str]:
    """Every name a string filter may use for the error: short and dotted, through the MRO."""
    if cls is not None:
        return _class_names(cls)
    if info is None:
        return frozenset()
    return frozenset({info.type, f"{info.module}.{info.type}"})


_CLASS_NAMES: dict[type[BaseException], frozenset[str]] = {}


def _class_names(cls: type[BaseException]) -> frozenset[str]:
    """``_names`` for a live class, cached: the MRO of a class never changes."""
    names = _CLASS_NAMES.get(cls)
    if names is None:
        out: set[str] = set()
        for c in cls.__mro__:
            out.update((c.__name__, c.__qualname__, f"{c.__module__}.{c.__qualname__}"))
        if len(_CLASS_NAMES) > 1024:
            _CLASS_NAMES.clear()
        names = _CLASS_NAMES[cls] = frozenset(out)
    return names


def _any_match(
    filters: Sequence[str | type[BaseException]],
    cls: type[BaseException] | None,
    names: frozenset[str],
) -> bool:
    for item in filters:
        if isinstance(item, str):
            if item.replace(":", ".") in names:
                return True
        elif cls is not None:
            if issubclass(cls, item):
                return True
        elif item.__name__ in names or f"{item.__module__}.{item.__qualname__}" in names:
            return True
    return False


def _smart_default(cls: type[BaseException] | None, names: frozenset[str]) -> bool:
    if (cls is not None and issubclass(cls, RetryAfter)) or "RetryAfter" in names:
        return True
    return not any(name in names for name in PROGRAMMING_ERRORS)


# --- schedule -----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ScheduleRow:
    """One retry of a policy's schedule, in seconds: its delay range and the running totals."""

    retry: int
    min_delay: float
    typical_delay: float
    max_delay: float
    cumulative_min: float
    cumulative_typical: float
    cumulative_max: float


def schedule_head(policy: RetryPolicy, rows: int) -> Schedule:
    """The first ``rows`` rows of ``policy.schedule()``, computing no more.

    A schedule's first rows do not depend on how many follow, and ``schedule()`` computes
    every retry (up to 1,000): a preview (lint, the web view) of a policy from an untrusted
    file asks for the rows it shows alone. ``schedule(attempts)`` overrides
    ``max_attempts``, so the policy's own bound still caps the attempts asked for.
    """
    attempts = rows + 1  # the first try, then the retries shown
    if policy.max_attempts is not None:
        attempts = min(attempts, policy.max_attempts)
    return policy.schedule(attempts)


class Schedule(list[ScheduleRow]):
    """A policy's schedule: a list of ``ScheduleRow`` whose ``str()`` is a text table."""

    def __init__(self, rows: Sequence[ScheduleRow] = (), policy: RetryPolicy | None = None):
        super().__init__(rows)
        self.policy = policy

    def __str__(self) -> str:
        title = self.policy.describe() if self.policy is not None else "retry schedule"
        if not self:
            return f"{title}\n(no retries)"
        header = ("retry", "min", "typical", "max", "total min", "total typical", "total max")
        lines = [
            (
                str(r.retry),
                format_duration(r.min_delay),
                format_duration(r.typical_delay),
                format_duration(r.max_delay),
                format_duration(r.cumulative_min),
                format_duration(r.cumulative_typical),
                format_duration(r.cumulative_max),
            )
            for r in self
        ]
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        rendered = [
            "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *lines]
        ]
        rule = "  ".join("-" * w for w in widths)
        return "\n".join([title, rendered[0], rule, *rendered[1:]])
