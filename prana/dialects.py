"""Readers for the retry designs prana grew from: each design's own form, as plain policies.

A ``RetryPolicy`` takes only prana's own field names. A config written for Rappel,
Waymark, NoETL, rh_agents or Prana is read here into plain ``RetryPolicy`` values, with
that design's meaning (docs: Coming from Rappel, Waymark, NoETL, rh_agents or Prana)::

    from prana import dialects

    dialects.rappel(attempts=3, exception_types=["NetworkError"], backoff_seconds=60)
    dialects.rappel_brackets("[NetworkError -> retry: 5, backoff: 2m]")
    dialects.waymark(attempts=3)  # a returned {"type", "message"} payload is a failure
    dialects.noetl({"max_attempts": 5, "backoff_multiplier": 2.0, "jitter": True})
    dialects.rh_agents({"max_attempts": 3, "backoff_strategy": "linear"})
    dialects.prana_simple(max_retries=3, retry_delay_ms=1000)

``read_policies`` is what ``NodeSettings(retry=...)``, ``Workflow(retry_defaults=...)``
and ``Registry.register(..., retry=...)`` read their value with.
"""

from prana._bracket import CATCH_ALL
from prana._dialects import (
    BUILTIN_CONDITIONS,
    DIALECTS,
    NOETL_NAMES,
    NOETL_SCOPE,
    RetryConfig,
    also_reads_as,
    noetl,
    noetl_names,
    prana_simple,
    rappel,
    rappel_brackets,
    read_policies,
    reading,
    rh_agents,
    waymark,
)

__all__ = [
    "BUILTIN_CONDITIONS",
    "CATCH_ALL",
    "DIALECTS",
    "NOETL_NAMES",
    "NOETL_SCOPE",
    "RetryConfig",
    "also_reads_as",
    "noetl",
    "noetl_names",
    "prana_simple",
    "rappel",
    "rappel_brackets",
    "read_policies",
    "reading",
    "rh_agents",
    "waymark",
]
