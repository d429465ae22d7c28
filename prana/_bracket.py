"""Rappel's bracket text for retry policies: ``"[NetworkError -> retry: 5, backoff: 2m]"``.

``parse_brackets`` reads the text into the keyword arguments of one ``RetryPolicy`` per
bracket, with Rappel's meaning; ``RetryPolicy.parse`` and ``prana.dialects`` build the
policies. A hand-written scanner, so an error names the exact line and column. It knows
nothing of the policy class, so the policy module may call it (no import cycle).
"""

from __future__ import annotations

import re
import sys
from typing import Any, NoReturn

from prana._durations import to_seconds
from prana._errors import DurationError, InvalidSettingsError
from prana._jsoncheck import MAX_INT

# --- Rappel bracket text ------------------------------------------------------------------

RAPPEL_TIMEOUT_RETRIES = 3
"""Rappel's ``timeout_retry_limit``: retries of timed-out attempts, apart from ``retry: N``."""

CATCH_ALL: tuple[str, ...] = ("Exception",)
"""The filter of a Rappel bracket without error types: "Catch all exceptions" (Rappel's
docs), programming errors included; ``NonRetryable`` still stops at once."""

_KEYS = ("retry", "backoff", "timeout")
_MAX_DIGITS = len(str(MAX_INT))
_NAME = re.compile(r"[A-Za-z_][\w.]*")
_VALUE = re.compile(r"[^\s,\]\[]+")


class _Parser:
    """A hand-written scanner for bracket text, so errors can name the exact column."""

    def __init__(self, text: Any) -> None:
        if not isinstance(text, str):
            raise InvalidSettingsError(
                f"RetryPolicy.parse: expected text such as '[retry: 3, backoff: 30s]', "
                f"got {type(text).__name__}"
            )
        self.text = text
        self.pos = 0

    def fail(self, message: str, pos: int | None = None) -> NoReturn:
        at = self.pos if pos is None else pos
        line_start = self.text.rfind("\n", 0, at) + 1
        line_end = self.text.find("\n", at)
        line = self.text[line_start : None if line_end < 0 else line_end]
        column = at - line_start + 1
        where = f"column {column}"
        if "\n" in self.text:
            where = f"line {self.text.count(chr(10), 0, at) + 1}, {where}"
        raise InvalidSettingsError(
            f"RetryPolicy.parse: at {where}: {message}\n  {line}\n  {' ' * (column - 1)}^"
        )

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def describe_here(self) -> str:
        return f"{self.peek()!r}" if self.pos < len(self.text) else "the end of the text"

    def parse(self) -> list[dict[str, Any]]:
        self.skip_ws()
        if self.pos >= len(self.text):
            self.fail("expected '[' to start a policy such as '[retry: 3, backoff: 30s]'")
        brackets: list[tuple[int, tuple[str, ...] | None, dict[str, tuple[int, Any]]]] = []
        while self.pos < len(self.text):
            if self.peek() != "[":
                self.fail(f"expected '[', got {self.describe_here()}")
            brackets.append(self.bracket())
            self.skip_ws()
        return self.build(brackets)

    def bracket(self) -> tuple[int, tuple[str, ...] | None, dict[str, tuple[int, Any]]]:
        start = self.pos
        self.pos += 1
        self.skip_ws()
        filters: tuple[str, ...] | None = None
        if self.peek() == "(":
            filters = self.group()
            self.skip_ws()
            self.arrow()
        else:
            name_at = self.pos
            name = self.name("a setting such as 'retry: 3' or an error type")
            self.skip_ws()
            if self.peek(2) == "->":
                filters = (name,)
                self.arrow()
            elif name not in _KEYS and self.peek() != ":":
                self.fail(
                    f"expected '->' after the error type {name!r}, got {self.describe_here()}"
                )
            else:
                self.pos = name_at
        settings: dict[str, tuple[int, Any]] = {}
        while True:
            self.skip_ws()
            key_at = self.pos
            key = self.name("a setting: retry, backoff or timeout")
            if key not in _KEYS:
                self.fail(f"unknown setting {key!r}; use retry, backoff or timeout", key_at)
            if key in settings:
                self.fail(f"{key!r} given twice in one bracket", key_at)
            self.skip_ws()
            if self.peek() != ":":
                self.fail(f"expected ':' after {key!r}")
            self.pos += 1
            self.skip_ws()
            settings[key] = (self.pos, self.value(key))
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1
                continue
            if self.peek() == "]":
                self.pos += 1
                return start, filters, settings
            self.fail(f"expected ',' or ']' after the value of {key!r}, got {self.describe_here()}")

    def group(self) -> tuple[str, ...]:
        self.pos += 1
        names: list[str] = []
        while True:
            self.skip_ws()
            names.append(self.name("an error type name"))
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1
                continue
            if self.peek() == ")":
                self.pos += 1
                return tuple(names)
            self.fail(f"expected ',' or ')' in the error type list, got {self.describe_here()}")

    def arrow(self) -> None:
        if self.peek(2) != "->":
            self.fail(f"expected '->' after the error types, got {self.describe_here()}")
        self.pos += 2

    def name(self, what: str) -> str:
        match = _NAME.match(self.text, self.pos)
        if match is None:
            self.fail(f"expected {what}, got {self.describe_here()}")
        self.pos = match.end()
        return match.group()

    def value(self, key: str) -> Any:
        at = self.pos
        match = _VALUE.match(self.text, self.pos)
        if match is None:
            self.fail(f"expected a value after '{key}:', got {self.describe_here()}")
        token = match.group()
        self.pos = match.end()
        if key == "retry":
            # No bound of its own: Limits.max_attempts caps the attempts that run; this is
            # only the most a stored definition holds (max_attempts = N + 1 <= MAX_INT).
            if not token.isdigit() or len(token) > _MAX_DIGITS or int(token) >= MAX_INT:
                self.fail(
                    f"expected a whole number of retries (0 to {MAX_INT - 1:,}) after "
                    f"'retry:', got {token[:40]!r}",
                    at,
                )
            return int(token)
        try:
            seconds = to_seconds(token, field=key)
        except DurationError:
            self.fail(
                f"cannot read {token!r} as a duration; use seconds (30) or text such as "
                "500ms, 30s, 2m, 1h",
                at,
            )
        if key == "timeout" and seconds <= 0:
            self.fail("a timeout must be positive", at)
        return seconds

    def build(
        self, brackets: list[tuple[int, tuple[str, ...] | None, dict[str, tuple[int, Any]]]]
    ) -> list[dict[str, Any]]:
        timeout: float | None = None
        shapes: list[tuple[tuple[str, ...] | None, int, float]] = []
        for start, filters, settings in brackets:
            if "timeout" in settings:
                at, seconds = settings["timeout"]
                if timeout is not None:
                    self.fail("the per-attempt timeout is given twice", at)
                timeout = seconds
            if "retry" not in settings and "backoff" not in settings:
                if filters is not None:
                    self.fail(
                        "a bracket with error types needs 'retry: N'; write the timeout in "
                        "its own bracket such as [timeout: 2m]",
                        start,
                    )
                continue
            if "retry" not in settings:
                self.fail("a bracket with 'backoff' needs 'retry: N' too", start)
            retries = settings["retry"][1]
            backoff = settings["backoff"][1] if "backoff" in settings else 1.0
            shapes.append((filters, retries, backoff))
        # Rappel gives timed-out attempts their own budget: "timeout_retry_limit: 3"
        timed = {} if timeout is None else {"timeout_retries": RAPPEL_TIMEOUT_RETRIES}
        if not shapes:
            return [{"max_attempts": 1, "timeout": timeout, **timed}]
        policies = []
        for filters, retries, backoff in shapes:
            try:
                largest = backoff * 2.0 ** max(retries - 1, 0) if backoff else 0.0
            except OverflowError:  # thousands of doublings: no cap below the last is "none"
                largest = sys.float_info.max
            policies.append(
                {
                    "max_attempts": retries + 1,
                    "backoff": "exponential",
                    "initial_delay": backoff,
                    "multiplier": 2.0,
                    "max_delay": max(largest, backoff),
                    "retry_on": filters if filters is not None else CATCH_ALL,
                    "timeout": timeout,
                    **timed,
                }
            )
        return policies


def parse_brackets(text: Any) -> list[dict[str, Any]]:
    """The keyword arguments of each policy bracket ``text`` describes (``RetryPolicy.parse``)."""
    return _Parser(text).parse()
