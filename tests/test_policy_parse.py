"""RetryPolicy.parse: Rappel's bracket text, valid and malformed (with error positions)."""

from __future__ import annotations

from typing import Any

import pytest

from prana import InvalidSettingsError, RetryPolicy

CATCH_ALL = ("Exception",)
"""A bracket without error types: "Catch all exceptions" (Rappel's docs)."""


def shape(p: RetryPolicy) -> tuple[Any, ...]:
    """The fields the bracket text sets, for compact comparisons."""
    return (p.retry_on, p.max_attempts, p.initial_delay, p.max_delay, p.timeout)


VALID: list[tuple[str, list[tuple[Any, ...]]]] = [
    ("[retry: 3, backoff: 60]", [(CATCH_ALL, 4, 60.0, 240.0, None)]),
    ("[retry: 3]", [(CATCH_ALL, 4, 1.0, 4.0, None)]),
    ("[retry: 0, backoff: 5s]", [(CATCH_ALL, 1, 5.0, 5.0, None)]),
    ("[retry: 1, backoff: 500ms]", [(CATCH_ALL, 2, 0.5, 0.5, None)]),
    ("[NetworkError -> retry: 5, backoff: 2m]", [(("NetworkError",), 6, 120.0, 1920.0, None)]),
    (
        "[(ValueError, KeyError) -> retry: 3, backoff: 30s]",
        [(("ValueError", "KeyError"), 4, 30.0, 120.0, None)],
    ),
    (
        "[RateLimitError -> retry: 10, backoff: 1m] [NetworkError -> retry: 3, backoff: 30s]",
        [
            (("RateLimitError",), 11, 60.0, 60.0 * 2**9, None),
            (("NetworkError",), 4, 30.0, 120.0, None),
        ],
    ),
    ("[timeout: 2m]", [(None, 1, 1.0, 60.0, 120.0)]),
    (
        "[NetworkError -> retry: 2, backoff: 1s] [timeout: 30s]",
        [(("NetworkError",), 3, 1.0, 2.0, 30.0)],
    ),
    (
        "[timeout: 1h][retry: 2, backoff: 10][mod.sub.Err -> retry: 1, backoff: 1]",
        [(CATCH_ALL, 3, 10.0, 20.0, 3600.0), (("mod.sub.Err",), 2, 1.0, 1.0, 3600.0)],
    ),
    ("[retry: 2, backoff: 1s, timeout: 5s]", [(CATCH_ALL, 3, 1.0, 2.0, 5.0)]),
    ("  [ retry :3 ,backoff:  1.5s ]  ", [(CATCH_ALL, 4, 1.5, 6.0, None)]),
    ("[ ( A ,B ) -> retry: 1 ]", [(("A", "B"), 2, 1.0, 1.0, None)]),
    ("[retry: 2]\n[X -> retry: 1]", [(CATCH_ALL, 3, 1.0, 2.0, None), (("X",), 2, 1.0, 1.0, None)]),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_bracket_text(text: str, expected: list[tuple[Any, ...]]) -> None:
    """Each valid text gives the policies Rappel means, in order."""
    assert [shape(p) for p in RetryPolicy.parse(text)] == expected


def test_backoff_is_exponential_doubling_without_jitter() -> None:
    """backoff: D waits D * 2 ** (k - 1) before retry k, exactly, with no jitter."""
    (p,) = RetryPolicy.parse("[retry: 5, backoff: 2m]")
    assert (p.backoff, p.multiplier, p.jitter) == ("exponential", 2.0, "none")
    assert [p.delay_for(k, seed="any") for k in range(1, 6)] == [120, 240, 480, 960, 1920]


def test_parsed_brackets_without_types_catch_all_exceptions() -> None:
    """A bracket without error types retries every exception, programming errors too."""
    (p,) = RetryPolicy.parse("[retry: 3, backoff: 60]")
    assert p.matches(ConnectionError("x"))
    assert p.matches(ValueError("x"))


INVALID: list[tuple[str, str]] = [
    ("", "at column 1: expected '['"),
    ("   ", "at column 4: expected '['"),
    ("retry: 3", "at column 1: expected '[', got 'r'"),
    ("[retry 3]", "at column 8: expected ':' after 'retry'"),
    ("[NetworkError -> retry 5]", "at column 24: expected ':' after 'retry'"),
    ("[]", "at column 2: expected a setting such as 'retry: 3' or an error type, got ']'"),
    ("[retry: ]", "at column 9: expected a value after 'retry:', got ']'"),
    ("[retry: three]", "at column 9: expected a whole number of retries"),
    ("[retry: -1]", "at column 9: expected a whole number of retries"),
    ("[retry: 18446744073709551615]", "at column 9: expected a whole number of retries"),
    ("[retry: 3, backoff: 3x]", "at column 21: cannot read '3x' as a duration"),
    ("[retry: 3, backof: 3]", "at column 12: unknown setting 'backof'"),
    ("[retry: 3, retry: 4]", "at column 12: 'retry' given twice"),
    ("[retry: 3 backoff: 1]", "at column 11: expected ',' or ']' after the value of 'retry'"),
    ("[retry: 3", "at column 10: expected ',' or ']' after the value of 'retry'"),
    ("[retry: 3,]", "at column 11: expected a setting: retry, backoff or timeout, got ']'"),
    ("[Err retry: 3]", "at column 6: expected '->' after the error type 'Err', got 'r'"),
    ("[Err - retry: 3]", "at column 6: expected '->' after the error type 'Err', got '-'"),
    ("[Err: 3]", "at column 2: unknown setting 'Err'; use retry, backoff or timeout"),
    ("[(A, B retry: 3]", "at column 8: expected ',' or ')' in the error type list"),
    ("[(A, ) -> retry: 3]", "at column 6: expected an error type name, got ')'"),
    ("[(A) retry: 3]", "at column 6: expected '->' after the error types"),
    ("[3 -> retry: 1]", "at column 2: expected a setting such as 'retry: 3'"),
    ("[retry: 1] x", "at column 12: expected '[', got 'x'"),
    ("[backoff: 5s]", "at column 1: a bracket with 'backoff' needs 'retry: N' too"),
    ("[Err -> timeout: 5s]", "at column 1: a bracket with error types needs 'retry: N'"),
    ("[timeout: 1m] [timeout: 2m]", "at column 25: the per-attempt timeout is given twice"),
    ("[timeout: 0]", "at column 11: a timeout must be positive"),
    ("[retry: 1]\n[retry 2]", "at line 2, column 8: expected ':' after 'retry'"),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_malformed_text_names_the_column(text: str, message: str) -> None:
    """Malformed text raises InvalidSettingsError pointing at the exact character."""
    with pytest.raises(InvalidSettingsError) as caught:
        RetryPolicy.parse(text)
    assert str(caught.value).startswith("RetryPolicy.parse: ")
    assert message in str(caught.value)


def test_error_shows_a_caret_under_the_column() -> None:
    """The error quotes the line and puts a caret under the offending character."""
    with pytest.raises(InvalidSettingsError) as caught:
        RetryPolicy.parse("[retry 3]")
    _, line, caret = str(caught.value).splitlines()
    assert line == "  [retry 3]"
    assert caret == "         ^"
    assert line[caret.index("^")] == "3"  # where the ':' should have been


def test_parse_refuses_non_text() -> None:
    """Only strings are bracket text."""
    with pytest.raises(InvalidSettingsError, match="expected text"):
        RetryPolicy.parse(3)  # type: ignore[arg-type]
