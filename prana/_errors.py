"""Every exception prana raises or understands.

The tree::

    PranaError                          base of every error prana raises to a caller
    ├── InvalidWorkflowError(ValueError)  the workflow cannot run; lists every problem
    ├── InvalidSettingsError(ValueError)  a setting or policy value is out of range
    ├── ResumeError(ValueError)           resume called on the wrong execution or with bad data
    ├── RecordError(ValueError)           a stored record cannot be read (names the field)
    └── DurationError(ValueError)         a duration text such as "30x" cannot be parsed

    Raised *by actions* to steer retries (never raised to callers):
    NonRetryable(Exception)   stop retrying this error, whatever the policy says
    RetryAfter(Exception)     retry, and wait this long first (a server's Retry-After)

    Recorded as node errors (never raised to callers):
    AttemptTimeout(TimeoutError)   an attempt ran past its per-attempt timeout
    WebhookTimeout(TimeoutError)   a webhook wait expired before anything was delivered
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any


def rebuilt_exception(
    cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
) -> BaseException:
    """An exception as pickled by its ``__reduce__``: its ``args`` and attributes as they
    were, without calling an ``__init__`` whose arguments differ from ``args``."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class PranaError(Exception):
    """Base class of every error prana raises to a caller."""


class InvalidWorkflowError(PranaError, ValueError):
    """The workflow cannot run: ``problems`` lists every problem found, each naming its place."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid workflow ({len(self.problems)} problem(s)):\n{lines}")


class InvalidSettingsError(PranaError, ValueError):
    """A setting or retry policy value is out of range; the message names the field and the fix."""


class DurationError(InvalidSettingsError):
    """A duration could not be read; durations are seconds, a timedelta or text like ``"30s"``."""


class ResumeError(PranaError, ValueError):
    """``resume_workflow`` was called on an execution that cannot resume, or with bad data."""


class RecordError(PranaError, ValueError):
    """A stored record cannot be read; ``problems`` holds ``path: message`` lines."""

    def __init__(self, message: str, problems: Iterable[str] = ()) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        if self.problems:
            message = message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)


class NonRetryable(Exception):  # noqa: N818 - the name reads as the instruction it is
    """Raise from an action to fail the attempt with no further retries.

    Wrap another error to keep it as the recorded cause: ``raise NonRetryable(exc)``
    records ``exc``'s type and message.
    """

    def __init__(self, error: BaseException | str = "non-retryable error") -> None:
        self.error = error
        super().__init__(str(error))


class RetryAfter(Exception):  # noqa: N818 - the name reads as the instruction it is
    """Raise from an action to retry after ``delay``: a server's ``Retry-After``, as it came.

    ``delay`` is seconds, a ``timedelta``, duration text (``"30s"``), a ``Retry-After``
    header value (delta-seconds, or an HTTP-date such as ``"Wed, 21 Oct 2015 07:28:00
    GMT"``, RFC 9110), or an aware ``datetime``. A date becomes a delay by the executor's
    injected clock when the retry is decided, or at once with ``now=`` (see
    ``from_header``). The policy still decides *whether* to retry (``RetryAfter`` is
    retryable under the default classification); the hint is capped by ``max_delay``
    unless the policy sets ``hint_exceeds_max_delay=True``, and never passes one day.

    A hint that cannot be read never turns a retryable failure into a permanent one: the
    attempt retries on the policy's own delay, the message says so, and
    ``details["retry_after_ignored"]`` records why (kept in the attempt's error).
    """

    def __init__(self, delay: object, message: str = "", *, now: datetime | None = None) -> None:
        self.delay_seconds: float | None = None
        """The hint in seconds; ``None`` for a date not yet resolved, or an ignored hint."""
        self.retry_at: datetime | None = None
        """The time a date hint asks for, until a clock turns it into ``delay_seconds``."""
        self.hint_problem: str | None = None
        """Why the hint was ignored, or ``None``."""
        from prana._durations import is_aware  # _durations imports this module

        if now is not None and not is_aware(now):
            raise ValueError(f"RetryAfter(now={now!r}): use an aware datetime such as ctx.now")
        try:
            self.delay_seconds, self.retry_at = _read_hint(delay, now)
        except ValueError as exc:
            self.hint_problem = str(exc)
        if self.hint_problem is not None:
            shown = f"{message}: " if message else ""
            self.message = (
                f"{shown}Retry-After hint ignored ({self.hint_problem}); retrying on the "
                "policy's own delay"
            )
            details = getattr(self, "details", None)
            merged = dict(details) if isinstance(details, dict) else {}
            merged["retry_after_ignored"] = self.hint_problem
            self.details = merged
        elif message:
            self.message = message
        elif self.delay_seconds is not None:
            self.message = f"retry after {self.delay_seconds:g}s"
        else:
            assert self.retry_at is not None
            self.message = f"retry at {self.retry_at.isoformat()}"
        super().__init__(self.message)

    @classmethod
    def from_header(cls, value: object, *, now: datetime, message: str = "") -> RetryAfter:
        """A ``RetryAfter`` from a ``Retry-After`` header value, resolved against ``now``.

        ``now`` is the action's ``ctx.now``. Delta-seconds and every HTTP-date form RFC
        9110 names are read; anything else gives a hint that is ignored (and says why).
        """
        return cls(value, message, now=now)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and ``copy``) by state: ``__init__`` reads its first argument as a hint,
        so calling it again with the message (``Exception``'s default) would change it."""
        return (rebuilt_exception, (type(self), self.args, dict(vars(self))))

    def hint_seconds(self, now: datetime | None) -> float | None:
        """The delay this hint asks for, a date measured from ``now``; ``None``: no usable hint."""
        if self.delay_seconds is not None:
            return self.delay_seconds
        if self.retry_at is not None and now is not None:
            return max(0.0, (self.retry_at - now).total_seconds())
        return None


def _read_hint(value: object, now: datetime | None) -> tuple[float | None, datetime | None]:
    """Read a retry hint as ``(seconds, None)`` or ``(None, date)``; ``ValueError`` says why not."""
    from prana._durations import is_aware, to_seconds

    when: datetime | None = None
    if isinstance(value, datetime):
        if not is_aware(value):
            raise ValueError(f"a naive datetime ({value.isoformat()}); give an aware one")
        when = value
    elif isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return float(text), None
        try:
            return to_seconds(text, field="Retry-After"), None
        except ValueError:
            pass
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            raise ValueError(
                f"cannot read {text[:80]!r} as seconds, a duration such as '30s' or an "
                "HTTP-date such as 'Wed, 21 Oct 2015 07:28:00 GMT'"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)  # HTTP-dates are GMT (RFC 9110 5.6.7)
    elif isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise ValueError(
            f"a {type(value).__name__} is not a delay; give seconds, a timedelta, text such "
            "as '30s', an HTTP-date or an aware datetime"
        )
    else:
        seconds = to_seconds(value, field="Retry-After")  # refuses negative, NaN, infinity
        return seconds, None
    if now is not None:
        return max(0.0, (when - now).total_seconds()), None
    return None, when


class AttemptTimeout(TimeoutError):  # noqa: N818 - the contract's name
    """An attempt ran past the policy's per-attempt ``timeout``."""


class WebhookTimeout(TimeoutError):  # noqa: N818 - the contract's name
    """A webhook wait expired (``timeout_hours``) before resume data was delivered."""
