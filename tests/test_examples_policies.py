"""examples/policies.py runs, and each example means what its source design means."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from prana import ErrorInfo, RetryPolicy
from prana._decision import AttemptView, decide_retry
from prana._resolve import attempt_timeout

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "policies.py"
SEED = "exec-1:node:0"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    """The example module, imported from its file."""
    spec = importlib.util.spec_from_file_location("examples_policies", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def found(example: ModuleType) -> dict[str, tuple[RetryPolicy, ...]]:
    """What main() returns."""
    result: dict[str, tuple[RetryPolicy, ...]] = example.main()
    return result


def fail(exc: BaseException, attempt: int = 1, **kw: Any) -> AttemptView:
    """The view of an attempt failing with ``exc``."""
    cls = type(exc)
    info = ErrorInfo(
        code="action_error", type=cls.__name__, module=cls.__module__, message=str(exc)
    )
    return AttemptView(attempt=attempt, error=info, exception=exc, **kw)


def delays(policy: RetryPolicy) -> list[float]:
    """The typical delay before each retry."""
    return [row.typical_delay for row in policy.schedule()]


def test_main_prints_a_schedule_per_example(
    example: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """main() prints a header and a schedule table for every example."""
    result = example.main()
    out = capsys.readouterr().out
    assert len(result) == 16
    for name in result:
        assert f"== {name}\n" in out
    assert out.count("(no retries)") == 1  # only the timeout-only example
    tables = [line for line in out.splitlines() if line.startswith("retry ")]
    assert len(tables) == sum(len(p) for p in result.values()) - 1
    assert all(line.endswith("total max") for line in tables)


def test_rappel_brackets(found: dict[str, tuple[RetryPolicy, ...]], example: ModuleType) -> None:
    """Rappel's texts: N retries after the first try, doubling from the backoff."""
    (plain,) = found["rappel: retry 3, backoff 60"]
    assert delays(plain) == [60, 120, 240]
    (network,) = found["rappel: network errors"]
    assert network.max_attempts == 6
    decision = decide_retry([network], fail(example.NetworkError("reset"), 5), seed=SEED)
    assert decision is not None
    assert decision.delay_seconds == 1920
    assert decide_retry([network], fail(example.NetworkError("reset"), 6), seed=SEED) is None
    assert decide_retry([network], fail(TimeoutError()), seed=SEED) is None
    (group,) = found["rappel: a group of types"]
    assert decide_retry([group], fail(KeyError("k")), seed=SEED) is not None


def test_rappel_several_brackets_match_in_order(
    found: dict[str, tuple[RetryPolicy, ...]], example: ModuleType
) -> None:
    """A rate limit uses the first bracket, a network error the second."""
    policies = found["rappel: rate limit then network"]
    limited = decide_retry(policies, fail(example.RateLimitError(), 10), seed=SEED)
    assert limited is not None
    assert (limited.policy_index, limited.delay_seconds) == (0, 60 * 2**9)
    net = decide_retry(policies, fail(example.NetworkError(), 3), seed=SEED)
    assert net is not None
    assert (net.policy_index, net.delay_seconds) == (1, 120)
    assert decide_retry(policies, fail(example.NetworkError(), 4), seed=SEED) is None


def test_rappel_timeouts(found: dict[str, tuple[RetryPolicy, ...]], example: ModuleType) -> None:
    """[timeout: D] sets the per-attempt timeout; alone it means no retry."""
    only = found["rappel: per-attempt timeout"]
    assert attempt_timeout(only) == 120
    assert decide_retry(only, fail(example.NetworkError()), seed=SEED) is None
    both = found["rappel: retries and a timeout"]
    assert attempt_timeout(both) == 30
    assert delays(both[0]) == [10, 20]


def test_rappel_python_policy_equals_its_bracket_text(
    found: dict[str, tuple[RetryPolicy, ...]],
) -> None:
    """RetryPolicy(attempts=3, [NetworkError], 5s) + timeout is 2 retries in bracket text.

    Rappel: "`RetryPolicy.attempts`: Total attempts (initial try + retries)".
    """
    (mapped,) = found["rappel: RetryPolicy(attempts=3, NetworkError, 5s, timeout 1m)"]
    assert [mapped] == RetryPolicy.parse("[NetworkError -> retry: 2, backoff: 5s] [timeout: 1m]")


def test_noetl_blocks(found: dict[str, tuple[RetryPolicy, ...]]) -> None:
    """retry: true is the default curve, every error; retry: 3 three attempts; the mapping."""
    assert found["noetl: retry true"] == (RetryPolicy(retry_on=("Exception",)),)
    assert found["noetl: retry 3"] == (RetryPolicy(max_attempts=3, retry_on=("Exception",)),)
    (full,) = found["noetl: full mapping"]
    assert (full.max_attempts, full.initial_delay, full.multiplier, full.max_delay) == (
        5,
        2.0,
        2.0,
        60.0,
    )
    assert full.jitter == "full"
    assert full.retry_on == ("ConnectionError", "TimeoutError")
    assert full.stop_when == "{{ $elapsed > 300 }}"
    assert [row.max_delay for row in full.schedule()] == [2, 4, 8, 16]


def test_rh_agents_configs(found: dict[str, tuple[RetryPolicy, ...]], example: ModuleType) -> None:
    """Each rh_agents RetryConfig keeps rh_agents' meaning: +/-25% jitter, transient errors."""
    (default,) = found["rh_agents: global default"]
    assert (default.max_attempts, default.jitter, default.max_delay) == (3, 0.25, 30.0)
    first = decide_retry([default], fail(ConnectionError()), seed=SEED)
    assert first is not None
    assert 0.75 <= first.delay_seconds <= 1.25
    assert decide_retry([default], fail(RuntimeError()), seed=SEED) is None
    (tools,) = found["rh_agents: tool calls"]
    assert decide_retry([tools], fail(TimeoutError()), seed=SEED) is not None
    (aggressive,) = found["rh_agents: aggressive per-event"]
    assert delays(aggressive) == [2.0, 6.0, 18.0, 54.0]
    (linear,) = found["rh_agents: linear"]
    assert delays(linear) == [2.0, 4.0, 6.0]
    (api,) = found["rh_agents: API calls within a minute"]
    assert api.retry_timeout == 60.0
    assert decide_retry([api], fail(example.RateLimitError()), seed=SEED) is not None
    assert decide_retry([api], fail(example.AuthError()), seed=SEED) is None


def test_prana_simple_form(found: dict[str, tuple[RetryPolicy, ...]]) -> None:
    """max_retries=3, retry_delay_ms=1000: four attempts one second apart, any error."""
    (simple,) = found["prana: retry_on_failed, 3 x 1000 ms"]
    assert simple.max_attempts == 4
    assert delays(simple) == [1.0, 1.0, 1.0]
    assert decide_retry([simple], fail(ValueError("even this"), 3), seed=SEED) is not None
    assert decide_retry([simple], fail(ValueError("even this"), 4), seed=SEED) is None
