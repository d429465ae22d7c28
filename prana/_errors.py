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
from datetime import timedelta


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
    """Raise from an action to retry after ``delay`` (seconds, a timedelta or ``"30s"``).

    Use it for a server's ``Retry-After``: the policy still decides *whether* to retry
    (``RetryAfter`` is retryable under the default classification), and the hint is capped
    by ``max_delay`` unless the policy sets ``hint_exceeds_max_delay=True``; a hard ceiling
    of one day always applies.
    """

    def __init__(self, delay: float | timedelta | str, message: str = "") -> None:
        from prana._durations import to_seconds

        self.delay_seconds = to_seconds(delay, field="RetryAfter.delay")
        self.message = message or f"retry after {self.delay_seconds:g}s"
        super().__init__(self.message)


class AttemptTimeout(TimeoutError):  # noqa: N818 - the contract's name
    """An attempt ran past the policy's per-attempt ``timeout``."""


class WebhookTimeout(TimeoutError):  # noqa: N818 - the contract's name
    """A webhook wait expired (``timeout_hours``) before resume data was delivered."""
