"""Which retry policies a node runs with: which level wins.

``resolve`` picks a node's policies by precedence (docs: Retry policy) and
``attempt_timeout`` is the per-attempt timeout of a node run. What users write at each
level was read into policies by ``prana.dialects``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prana._dialects import prana_simple

if TYPE_CHECKING:
    from prana._model import Node, Workflow
    from prana._policy import RetryPolicy


def resolve(
    node: Node, workflow: Workflow, spec_retry: tuple[RetryPolicy, ...] | None
) -> tuple[RetryPolicy, ...]:
    """The policies of ``node``: the most specific level that says anything wins, no merging.

    Order: ``node.settings.retry``; the simple form when ``retry_on_failed``; the
    workflow's ``retry_defaults[node.type]``, then ``retry_defaults["*"]``; the action's
    registered default; otherwise ``()`` (no retry). A disabled policy at a level is
    returned as is: it switches retry off there.
    """
    return resolve_level(node, workflow, spec_retry)[1]


def resolve_level(
    node: Node, workflow: Workflow, spec_retry: tuple[RetryPolicy, ...] | None
) -> tuple[str, tuple[RetryPolicy, ...]]:
    settings = node.settings
    if settings.retry is not None:
        return "node", settings.retry
    if settings.retry_on_failed:
        return "simple", (prana_simple(settings.max_retries, settings.retry_delay_ms),)
    defaults = workflow.retry_defaults
    if node.type in defaults:
        return "workflow_type", defaults[node.type]
    if "*" in defaults:
        return "workflow_star", defaults["*"]
    if spec_retry:
        return "action", spec_retry
    return "none", ()


def attempt_timeout(policies: Sequence[RetryPolicy]) -> float | None:
    """The per-attempt timeout of a node run: the first policy's that sets one."""
    return next((p.timeout for p in policies if p.timeout is not None), None)
