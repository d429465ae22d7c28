"""Which retry policies a node runs with: what users write, and which level wins.

``coerce_policies`` turns what users write (a ``RetryPolicy``, a list, Rappel's bracket
text, NoETL's shorthands, rh_agents' ``RetryConfig`` mapping) into a tuple of policies;
``resolve`` picks a node's policies by precedence (docs: Retry policy); ``simple_policy`` is
Prana's simple form and ``attempt_timeout`` the per-attempt timeout of a node run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from prana._errors import InvalidSettingsError
from prana._policy import RetryPolicy

if TYPE_CHECKING:
    from prana._model import Node, Workflow


def coerce_policies(value: Any, *, field: str) -> tuple[RetryPolicy, ...] | None:
    """Turn what users write into a tuple of policies (``None`` stays ``None``).

    Accepted: a ``RetryPolicy``; Rappel bracket text; NoETL shorthands (``True``: the
    default policy, ``False``: retry off, an int N: N attempts in all, the first try
    included, as NoETL's ``retry: 3`` means "max attempts only"; a mapping of policy
    fields, where ``backoff_multiplier`` and ``max_retries`` are aliases); or a non-empty
    list of any of these.
    """
    if value is None:
        return None
    try:
        return tuple(_coerce_one(value, field=field, top=True))
    except InvalidSettingsError as exc:
        message = str(exc)
        if message.startswith(field):
            raise
        raise InvalidSettingsError(f"{field}: {message}") from exc


_ALIASES = {
    "backoff_multiplier": "multiplier",
    "delay": "initial_delay",
    "wait_initial": "initial_delay",
    "wait_max": "max_delay",
    "exceptions": "retry_on",
    "non_retryable": "exclude",
}
_FIELDS = frozenset(a.name for a in attrs.fields(RetryPolicy))


def _coerce_one(value: Any, *, field: str, top: bool) -> list[RetryPolicy]:
    if isinstance(value, RetryPolicy):
        return [value]
    if isinstance(value, bool):
        return [RetryPolicy() if value else RetryPolicy(enabled=False)]
    if isinstance(value, int):
        if value < 0:
            raise InvalidSettingsError(
                f"{field}={value!r}: use a whole number >= 0, the attempts in all with the "
                "first try included (0 or 1 = no retry)"
            )
        return [RetryPolicy(max_attempts=max(value, 1))]
    if isinstance(value, str):
        return RetryPolicy.parse(value)
    if isinstance(value, Mapping):
        return [_from_mapping(value, field=field)]
    if top and isinstance(value, list | tuple):
        if not value:
            raise InvalidSettingsError(f"{field}: an empty list; give at least one RetryPolicy")
        out: list[RetryPolicy] = []
        for i, item in enumerate(value):
            out.extend(_coerce_one(item, field=f"{field}[{i}]", top=False))
        return out
    raise InvalidSettingsError(
        f"{field}: expected a RetryPolicy, a list of them, bracket text such as "
        f"'[retry: 3, backoff: 30s]', True, a number of retries or a mapping; got {value!r}"
    )


_RH_AGENTS_KEYS = frozenset({"backoff_strategy", "retry_on_exceptions", "exclude_exceptions"})
"""Keys only rh_agents' ``RetryConfig`` uses: a mapping with one of them is in its form."""
_RH_AGENTS_RETRYABLE = ("TimeoutError", "ConnectionError")
"""rh_agents' ``DEFAULT_RETRYABLE_EXCEPTIONS`` (its asyncio and Connection* errors are
subclasses of these)."""
_RH_AGENTS_NON_RETRYABLE = (
    "ValueError",
    "TypeError",
    "KeyError",
    "AttributeError",
    "AssertionError",
)
"""rh_agents' ``DEFAULT_NON_RETRYABLE_EXCEPTIONS``, merged with the config's own exclusions."""
_RH_AGENTS_JITTER = 0.25
"""rh_agents' jitter: "Add ±25% jitter" (``delay * (0.75 + random() * 0.5)``)."""


def _from_rh_agents(value: Mapping[Any, Any], *, field: str) -> RetryPolicy:
    """rh_agents' ``RetryConfig`` (as a mapping) with rh_agents' meaning.

    rhodief/rh-agents rh_agents/core/retry.py: ``max_attempts`` includes the first try;
    the linear strategy is ``initial_delay * attempt`` (the multiplier is ignored);
    ``jitter`` (default true) is +/-25%; without ``retry_on_exceptions`` only timeouts and
    connection errors retry; ``exclude_exceptions`` adds to its own exclusions.
    """
    rest = {k: v for k, v in value.items() if k not in _RH_AGENTS_KEYS}
    kwargs: dict[str, Any] = {"jitter": _RH_AGENTS_JITTER}
    for key, item in rest.items():
        if key == "backoff_multiplier":
            key = "multiplier"
        elif key not in _RH_AGENTS_FIELDS:
            raise InvalidSettingsError(
                f"{field}: unknown RetryConfig setting {key!r}; rh_agents' RetryConfig has "
                f"{', '.join(sorted(_RH_AGENTS_FIELDS | _RH_AGENTS_KEYS | {'backoff_multiplier'}))}"
            )
        kwargs[key] = item
    if kwargs["jitter"] is True:
        kwargs["jitter"] = _RH_AGENTS_JITTER
    strategy = value.get("backoff_strategy", "exponential")
    strategy = getattr(strategy, "value", strategy)
    kwargs["backoff"] = strategy
    if strategy == "linear":
        kwargs["multiplier"] = 1.0
    retry_on = value.get("retry_on_exceptions")
    kwargs["retry_on"] = _RH_AGENTS_RETRYABLE if retry_on is None else retry_on
    exclude = value.get("exclude_exceptions") or ()
    if isinstance(exclude, str | type):
        exclude = (exclude,)
    kwargs["exclude"] = (*_RH_AGENTS_NON_RETRYABLE, *exclude)
    return RetryPolicy(**kwargs)


_RH_AGENTS_FIELDS = frozenset(
    {"max_attempts", "initial_delay", "max_delay", "jitter", "retry_timeout", "enabled"}
)


def _from_mapping(value: Mapping[Any, Any], *, field: str) -> RetryPolicy:
    if not _RH_AGENTS_KEYS.isdisjoint(value):
        return _from_rh_agents(value, field=field)
    kwargs: dict[str, Any] = {}
    for raw_key, item in value.items():
        key = _ALIASES.get(raw_key, raw_key)
        if key == "max_retries":
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise InvalidSettingsError(f"{field}.max_retries={item!r}: use a whole number >= 0")
            key, item = "max_attempts", item + 1
        if key not in _FIELDS:
            raise InvalidSettingsError(
                f"{field}: unknown retry setting {raw_key!r}; use any of "
                f"{', '.join(sorted(_FIELDS | {'max_retries', 'backoff_multiplier'}))}"
            )
        if key in kwargs:
            raise InvalidSettingsError(f"{field}: {raw_key!r} given twice (through an alias)")
        kwargs[key] = item
    return RetryPolicy(**kwargs)


def simple_policy(max_retries: int, retry_delay_ms: int) -> RetryPolicy:
    """Prana's simple form: ``max_retries`` retries, a constant delay, every error retried."""
    delay = retry_delay_ms / 1000
    return RetryPolicy(
        max_attempts=max_retries + 1,
        backoff="constant",
        initial_delay=delay,
        max_delay=max(delay, 60.0),
        retry_on=("BaseException",),
    )


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
        return "simple", (simple_policy(settings.max_retries, settings.retry_delay_ms),)
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
