"""Retry policies from the designs prana learns from, written as prana policies.

Run ``python examples/policies.py`` to print every policy's schedule (the delay before
each retry, min / typical / max with jitter, and the running totals) before anything runs.

- Rappel: bracket text such as ``[NetworkError -> retry: 5, backoff: 2m]``, and its Python
  ``RetryPolicy(attempts, exception_types, backoff_seconds)`` with a timeout;
- NoETL: YAML ``retry:`` blocks (``true``, a number of attempts, the full mapping);
- rh_agents: ``RetryConfig`` objects (max_retries, initial_delay, backoff_multiplier, ...);
- Prana: ``NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=1000)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import yaml

from prana import Node, NodeSettings, RetryPolicy, Workflow
from prana._decision import AttemptView
from prana._policy import coerce_policies, resolve


class NetworkError(ConnectionError):
    """A transient network failure (the name Rappel's examples use)."""


class RateLimitError(Exception):
    """The remote side asked us to slow down."""


class AuthError(Exception):
    """Credentials were refused: retrying cannot help."""


# --- Rappel --------------------------------------------------------------------------------

RAPPEL_TEXTS = {
    "rappel: retry 3, backoff 60": "[retry: 3, backoff: 60]",
    "rappel: network errors": "[NetworkError -> retry: 5, backoff: 2m]",
    "rappel: a group of types": "[(ValueError, KeyError) -> retry: 3, backoff: 30s]",
    "rappel: rate limit then network": (
        "[RateLimitError -> retry: 10, backoff: 1m] [NetworkError -> retry: 3, backoff: 30s]"
    ),
    "rappel: per-attempt timeout": "[timeout: 2m]",
    "rappel: retries and a timeout": "[NetworkError -> retry: 2, backoff: 10s] [timeout: 30s]",
}


RAPPEL_PYTHON = RetryPolicy(
    attempts=3, exception_types=["NetworkError"], backoff_seconds=5, timeout=60
)
"""Rappel's Python spelling, which ``RetryPolicy`` takes as it is: ``attempts`` counts every
attempt (the first try included), so this is ``[NetworkError -> retry: 2, backoff: 5s]``."""


# --- NoETL ---------------------------------------------------------------------------------

NOETL_YAML = {
    "noetl: retry true": "retry: true",
    "noetl: retry 3": "retry: 3",
    "noetl: full mapping": """
retry:
  max_attempts: 5
  initial_delay: 2s
  backoff_multiplier: 2.0
  max_delay: 1m
  jitter: true
  retry_on: [ConnectionError, TimeoutError]
  retry_when: "{{ $error.details.status_code in [429, 502, 503] }}"
  stop_when: "{{ $elapsed > 300 }}"
""",
}


def noetl_policies(text: str) -> tuple[RetryPolicy, ...]:
    """The policies a NoETL step's YAML ``retry:`` block means."""
    step = yaml.safe_load(text)
    policies = coerce_policies(step["retry"], field="step.retry")
    assert policies is not None
    return policies


# --- rh_agents ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RetryConfig:
    """rh_agents' retry settings for an agent step, as its users write them."""

    max_retries: int = 3
    initial_delay: float = 1.0
    backoff_multiplier: float = 2.0
    max_delay: float = 60.0
    jitter: bool = True
    retry_on: tuple[type[BaseException], ...] | None = None
    exclude: tuple[type[BaseException], ...] | None = None
    retry_on_result: Callable[[Any], bool] | None = None
    retry_when: Callable[[AttemptView], Any] | None = None

    def to_policy(self) -> RetryPolicy:
        """The same settings as a prana policy."""
        return RetryPolicy(
            max_attempts=self.max_retries + 1,
            initial_delay=self.initial_delay,
            multiplier=self.backoff_multiplier,
            backoff="exponential",
            max_delay=self.max_delay,
            jitter="full" if self.jitter else "none",
            retry_on=self.retry_on,
            exclude=self.exclude,
            retry_on_result=self.retry_on_result,
            retry_when=self.retry_when,
        )


def still_running(output: Any) -> bool:
    """A job-status poll is not done while the job is pending or running."""
    return isinstance(output, dict) and output.get("status") in ("pending", "running")


def overloaded(view: AttemptView) -> bool:
    """Retry a model call only when the provider says it is overloaded."""
    return view.error is not None and "overloaded" in view.error.message


RH_AGENTS = {
    "rh_agents: LLM call": RetryConfig(max_retries=3, initial_delay=1, max_delay=30),
    "rh_agents: tool call on network errors": RetryConfig(
        max_retries=5,
        initial_delay=0.5,
        backoff_multiplier=1.5,
        max_delay=10,
        jitter=False,
        retry_on=(ConnectionError, TimeoutError),
    ),
    "rh_agents: rate limits, never auth": RetryConfig(
        max_retries=4,
        initial_delay=2,
        backoff_multiplier=3,
        max_delay=120,
        retry_on=(RateLimitError, ConnectionError),
        exclude=(AuthError,),
    ),
    "rh_agents: poll until done": RetryConfig(
        max_retries=10,
        initial_delay=5,
        backoff_multiplier=1,
        max_delay=5,
        jitter=False,
        retry_on_result=still_running,
    ),
    "rh_agents: only when overloaded": RetryConfig(
        max_retries=2, initial_delay=4, max_delay=8, jitter=False, retry_when=overloaded
    ),
}


# --- Prana --------------------------------------------------------------------------------


def prana_simple_form() -> tuple[RetryPolicy, ...]:
    """The policy of a node with Prana's simple settings (resolved as the executor does)."""
    settings = NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=1000)
    node = Node(key="call_api", type="http.request", settings=settings)
    workflow = Workflow(id="prana", nodes=[node], connections=[])
    return resolve(node, workflow, None)


# --- all of them ---------------------------------------------------------------------------


def examples() -> dict[str, tuple[RetryPolicy, ...]]:
    """Every example, by name, as the tuple of policies a node would get."""
    out: dict[str, tuple[RetryPolicy, ...]] = {}
    for name, text in RAPPEL_TEXTS.items():
        out[name] = tuple(RetryPolicy.parse(text))
    out["rappel: RetryPolicy(attempts=3, NetworkError, 5s, timeout 1m)"] = (RAPPEL_PYTHON,)
    for name, text in NOETL_YAML.items():
        out[name] = noetl_policies(text)
    for name, config in RH_AGENTS.items():
        out[name] = (config.to_policy(),)
    out["prana: retry_on_failed, 3 x 1000 ms"] = prana_simple_form()
    return out


def main() -> dict[str, tuple[RetryPolicy, ...]]:
    """Print every example's schedule and return the examples."""
    found = examples()
    for name, policies in found.items():
        print(f"== {name}")
        for policy in policies:
            print(policy.format_schedule())
        print()
    return found


if __name__ == "__main__":
    main()
