"""Retry policies from the designs prana learns from, written as prana policies.

Run ``python examples/policies.py`` to print every policy's schedule (the delay before
each retry, min / typical / max with jitter, and the running totals) before anything runs.

- Rappel: bracket text such as ``[NetworkError -> retry: 5, backoff: 2m]``, and its Python
  ``RetryPolicy(attempts, exception_types, backoff_seconds)`` (``prana.dialects.rappel``)
  with a timeout;
- NoETL: YAML ``retry:`` blocks (``true``, a number of attempts, the full mapping);
- rh_agents: ``RetryConfig`` settings in its own names (max_attempts, backoff_strategy, ...);
- Prana: ``NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=1000)``.
"""

from __future__ import annotations

from typing import Any

import yaml

from prana import Node, NodeSettings, RetryPolicy, Workflow
from prana._resolve import resolve
from prana.dialects import rappel, read_policies


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


RAPPEL_PYTHON = rappel(attempts=3, exception_types=["NetworkError"], backoff_seconds=5, timeout=60)
"""Rappel's Python spelling, read by ``prana.dialects.rappel`` as it is: ``attempts`` counts
every attempt (the first try included), so this is ``[NetworkError -> retry: 2, backoff: 5s]``."""


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
    policies = read_policies(step["retry"], field="step.retry")
    assert policies is not None
    return policies


# --- rh_agents ---------------------------------------------------------------------------

RH_AGENTS: dict[str, dict[str, Any]] = {
    "rh_agents: global default": {
        "max_attempts": 3,
        "backoff_strategy": "exponential",
        "initial_delay": 1.0,
        "max_delay": 30.0,
    },
    "rh_agents: tool calls": {
        "max_attempts": 5,
        "backoff_strategy": "exponential",
        "retry_on_exceptions": ["TimeoutError", "ConnectionError"],
    },
    "rh_agents: aggressive per-event": {
        "max_attempts": 5,
        "backoff_strategy": "exponential",
        "initial_delay": 2.0,
        "backoff_multiplier": 3.0,
    },
    "rh_agents: linear": {
        "max_attempts": 4,
        "backoff_strategy": "linear",
        "initial_delay": 2.0,
        "jitter": False,
    },
    "rh_agents: API calls within a minute": {
        "max_attempts": 5,
        "backoff_strategy": "exponential",
        "retry_on_exceptions": ["RateLimitError", "ConnectionError"],
        "exclude_exceptions": ["AuthError"],
        "retry_timeout": 60.0,
    },
}
"""rh_agents' ``RetryConfig`` examples (docs/RETRY_MECHANISM_SPEC.md) in its own field names.

A mapping with ``backoff_strategy``, ``retry_on_exceptions`` or ``exclude_exceptions`` is
read with rh_agents' meaning: +/-25% jitter by default, a linear curve of ``initial_delay *
attempt``, and only timeouts and connection errors retried unless told otherwise.
"""


def rh_agents_policies(config: dict[str, Any]) -> tuple[RetryPolicy, ...]:
    """The policy an rh_agents ``RetryConfig`` (as a mapping) means."""
    policies = read_policies(config, field="retry_config")
    assert policies is not None
    return policies


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
        out[name] = rh_agents_policies(config)
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
