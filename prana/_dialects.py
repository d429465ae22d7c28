"""Readers for the retry designs prana grew from (public as ``prana.dialects``).

A ``RetryPolicy`` knows only its own fields. What users write in the form of the designs
prana implements (docs: Coming from Rappel, Waymark, NoETL, rh_agents or Prana) is read
here, in one place, into ``RetryPolicy`` values:

- ``read_policies(value, field=...)``: whatever a node's ``retry`` takes (a policy, a list,
  Rappel's bracket text, NoETL's ``true`` / ``3`` / mapping, an rh_agents ``RetryConfig``
  mapping); ``NodeSettings``, ``Workflow.retry_defaults`` and ``Registry.register`` read
  through it;
- ``rappel(attempts=3, exception_types=[...], backoff_seconds=60)``: Rappel's Python
  ``RetryPolicy``; ``rappel_brackets(text)``: its bracket text (``RetryPolicy.parse``);
  ``waymark(...)``: the same, a returned exception-shaped payload failing the attempt;
- ``noetl(value)``: a NoETL step's ``retry:`` value; ``noetl_names(view)``: the names
  NoETL's ``retry_when`` / ``stop_when`` templates read;
- ``rh_agents(config)``: rh_agents' ``RetryConfig`` as a mapping;
- ``prana_simple(max_retries, retry_delay_ms)``: Prana's (ADR-008) simple form.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from prana._bracket import CATCH_ALL, RAPPEL_TIMEOUT_RETRIES, parse_brackets
from prana._durations import to_seconds
from prana._errors import InvalidSettingsError
from prana._policy import RESULT_REJECTED, RetryPolicy

if TYPE_CHECKING:
    from prana._decision import AttemptView

# --- any form: what a node's ``retry`` takes ----------------------------------------------


def read_policies(value: Any, *, field: str = "retry") -> tuple[RetryPolicy, ...] | None:
    """Turn what users write into a tuple of policies (``None`` stays ``None``).

    Accepted: a ``RetryPolicy``; Rappel bracket text; NoETL shorthands (``True``: the
    default curve, ``False``: retry off, an int N: N attempts in all, the first try
    included, as NoETL's ``retry: 3`` means "max attempts only"; every error retries under
    them, as NoETL has no exception filter); a mapping of policy fields, where
    ``backoff_multiplier`` and ``max_retries`` are aliases (one with NoETL's keys alone,
    ``backoff_multiplier`` among them, is NoETL's: every error retries), or rh_agents'
    ``RetryConfig`` (a mapping with one of its own keys); or a non-empty list of these.
    ``field`` names the setting in error messages.
    """
    if value is None:
        return None
    try:
        return tuple(_read_one(value, field=field, top=True))
    except InvalidSettingsError as exc:
        message = str(exc)
        if message.startswith(field):
            raise
        raise InvalidSettingsError(f"{field}: {message}") from exc


def _read_one(value: Any, *, field: str, top: bool) -> list[RetryPolicy]:
    if isinstance(value, RetryPolicy):
        return [value]
    if isinstance(value, bool | int):
        return [_noetl_shorthand(value, field=field)]
    if isinstance(value, str):
        return rappel_brackets(value)
    if isinstance(value, Mapping):
        return [_read_mapping(value, field=field)]
    if top and isinstance(value, list | tuple):
        if not value:
            raise InvalidSettingsError(f"{field}: an empty list; give at least one RetryPolicy")
        out: list[RetryPolicy] = []
        for i, item in enumerate(value):
            out.extend(_read_one(item, field=f"{field}[{i}]", top=False))
        return out
    raise InvalidSettingsError(
        f"{field}: expected a RetryPolicy, a list of them, bracket text such as "
        f"'[retry: 3, backoff: 30s]', True, a number of retries or a mapping; got {value!r}"
    )


DIALECTS: tuple[str, ...] = ("prana", "noetl", "rh_agents", "rappel", "waymark")
"""The values of a retry mapping's ``dialect`` key: which design's form it is written in."""


def _read_mapping(value: Mapping[Any, Any], *, field: str) -> RetryPolicy:
    """A retry mapping in the form its ``dialect`` key names, with that design's defaults;
    without the key, in the form ``reading(value)`` finds (an unmarked NoETL mapping keeps
    prana's jitter reading, ``jitter: true`` being full jitter, but retries every error)."""
    marked = "dialect" in value
    name = value["dialect"] if marked else reading(value)
    rest = {k: v for k, v in value.items() if k != "dialect"}
    if name == "prana":
        return _mapping(rest, field=field)
    if name == "noetl":
        if not marked:
            return _mapping(rest, field=field, retry_on=CATCH_ALL)
        return _noetl_mapping(rest, field=field)
    if name == "rh_agents":
        return rh_agents(rest, field=field)
    if name == "rappel":
        return rappel(**_keywords(rest, field=field))
    if name == "waymark":
        return waymark(**_keywords(rest, field=field))
    raise InvalidSettingsError(
        f"{field}: dialect={name!r}: use one of {', '.join(DIALECTS)} (the design whose form "
        "the mapping is written in), or leave dialect out for prana's own field names"
    )


def reading(value: Mapping[Any, Any]) -> str:
    """The dialect an unmarked retry mapping is read in (see ``also_reads_as``).

    rh_agents' ``RetryConfig`` when it has one of that design's own keys
    (``backoff_strategy``, ``retry_on_exceptions``, ``exclude_exceptions``); Rappel's when it
    has one of Rappel's (``attempts``, ``exception_types``, ``backoff_seconds``); NoETL's
    when it has NoETL's keys alone, ``backoff_multiplier`` among them; else prana's.
    """
    if not _RH_AGENTS_KEYS.isdisjoint(value):
        return "rh_agents"
    if not _RAPPEL_KEYS.isdisjoint(value):
        return "rappel"
    if "backoff_multiplier" in value and _NOETL_KEYS.issuperset(value):
        return "noetl"
    return "prana"


def also_reads_as(value: Mapping[Any, Any]) -> tuple[str, ...]:
    """The other designs whose keys an unmarked mapping also fits, their defaults differing.

    ``{max_attempts: 5}`` reads as prana's form, but is also a NoETL retry mapping and an
    rh_agents ``RetryConfig``: each of those would jitter it, and retry other errors. A
    marked mapping (``dialect: ...``) fits only its own.
    """
    if "dialect" in value:
        return ()
    read = reading(value)
    fits = {
        "prana": _FIELDS | _ALIASES.keys() | {"max_retries"},
        "noetl": _NOETL_KEYS,
        "rh_agents": _RH_AGENTS_FIELDS | _RH_AGENTS_KEYS | {"backoff_multiplier"},
    }
    return tuple(name for name, keys in fits.items() if name != read and keys.issuperset(value))


def _keywords(value: Mapping[Any, Any], *, field: str) -> dict[str, Any]:
    bad = next((k for k in value if not isinstance(k, str)), None)
    if bad is not None:
        raise InvalidSettingsError(f"{field}: setting names are text, got {bad!r}")
    return dict(value)


_ALIASES = {
    "backoff_multiplier": "multiplier",
    "delay": "initial_delay",
    "wait_initial": "initial_delay",
    "wait_max": "max_delay",
    "exceptions": "retry_on",
    "non_retryable": "exclude",
}
_FIELDS = frozenset(a.name for a in attrs.fields(RetryPolicy))


def _mapping(value: Mapping[Any, Any], *, field: str, **defaults: Any) -> RetryPolicy:
    """A mapping of policy fields, with NoETL's and tenacity's names as aliases."""
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
    return RetryPolicy(**{**defaults, **kwargs})


def _cap_below_initial(kwargs: dict[str, Any], *, field: str) -> None:
    """NoETL and rh_agents cap every delay, the first too: ``max_delay`` below
    ``initial_delay`` is the delay (each curve starts at ``initial_delay`` and only grows)."""
    if "max_delay" in kwargs and "initial_delay" in kwargs:
        cap = to_seconds(kwargs["max_delay"], field=f"{field}.max_delay")
        if cap < to_seconds(kwargs["initial_delay"], field=f"{field}.initial_delay"):
            kwargs["initial_delay"] = cap


# --- Rappel and Waymark -------------------------------------------------------------------


def rappel_brackets(text: str) -> list[RetryPolicy]:
    """Rappel's bracket text, one policy per bracket (the same as ``RetryPolicy.parse``)."""
    return [RetryPolicy(**settings) for settings in parse_brackets(text)]


_RAPPEL_FIELDS = {
    "attempts": "max_attempts",
    "exception_types": "retry_on",
    "backoff_seconds": "initial_delay",
}
_RAPPEL_KEYS = frozenset(_RAPPEL_FIELDS)
_RAPPEL_DEFAULT_RETRIES = 100
"""Waymark's IR builder: "`RetryPolicy()` (no `attempts`) maps to `max_retries = 100`"."""


def rappel(**settings: Any) -> RetryPolicy:
    """Rappel's Python ``RetryPolicy(attempts, exception_types, backoff_seconds)``.

    As Rappel documents it (piercefreeman/rappel docs/Action-Retries.md): ``attempts`` is
    "Total attempts (initial try + retries)", and left out is Waymark's 100 retries;
    ``exception_types`` "empty/None catches all"; ``backoff_seconds`` (default 1) is the
    base of an exponential backoff, ``backoff * 2 ** (k - 1)`` before retry k with no cap
    below the last one, as bracket text means. Any of prana's own fields (``timeout``...)
    may be given beside them; the policy keeps prana's names, in ``repr`` and serialized.
    With a ``timeout``, timed-out attempts retry on Rappel's own budget of 3
    (``timeout_retries``), apart from ``attempts``.
    """
    out = dict(settings)
    for alias, name in _RAPPEL_FIELDS.items():
        if alias in out and name in out:
            raise InvalidSettingsError(
                f"RetryPolicy: {alias}= is Rappel's name for {name}=; give one of them"
            )
    attempts = out.pop("attempts", None)
    if attempts is None:
        attempts = out.get("max_attempts", _RAPPEL_DEFAULT_RETRIES + 1)
    out["max_attempts"] = attempts
    if out.get("timeout") is not None:
        out.setdefault("timeout_retries", RAPPEL_TIMEOUT_RETRIES)
    if "exception_types" in out:
        types = out.pop("exception_types")
        out["retry_on"] = types if types else CATCH_ALL
    else:
        out.setdefault("retry_on", CATCH_ALL)
    base = out.pop("backoff_seconds", out.get("initial_delay", 1.0))
    seconds = to_seconds(base, field="RetryPolicy.backoff_seconds")
    out["initial_delay"] = seconds
    out.setdefault("backoff", "exponential")
    out.setdefault("multiplier", 2.0)
    if "max_delay" not in out:
        whole = isinstance(attempts, int) and not isinstance(attempts, bool)
        retries = attempts - 1 if whole else 0
        try:
            largest = seconds * 2.0 ** max(retries - 1, 0)
        except OverflowError:  # pragma: no cover - a thousand doublings of a positive delay
            largest = sys.float_info.max
        out["max_delay"] = max(largest, seconds)
    return RetryPolicy(**out)


WAYMARK_PAYLOAD = "waymark.exception_payload"
"""The built-in condition for ``retry_on_result``: a payload shaped like an exception."""


def exception_payload(output: Any) -> bool:
    """Whether ``output`` looks like an exception object: a mapping with text ``type`` and
    ``message`` (Waymark: "Action result is treated as failure if payload looks like an
    exception object (`type` / `message`)")."""
    return (
        isinstance(output, Mapping)
        and isinstance(output.get("type"), str)
        and isinstance(output.get("message"), str)
    )


BUILTIN_CONDITIONS: Mapping[str, Callable[..., Any]] = {WAYMARK_PAYLOAD: exception_payload}
"""Conditions every workflow may name without registering them (a registry's own wins)."""


def waymark(**settings: Any) -> RetryPolicy:
    """Waymark's ``RetryPolicy(attempts, exception_types, backoff_seconds)``, read as
    Waymark's runner reads an action's result: a returned payload shaped like an exception
    (``type`` and ``message``) is a failed attempt (``retry_on_result`` is
    ``"waymark.exception_payload"``). Otherwise ``rappel(...)``: Waymark is Rappel's
    successor and takes the same spelling.
    """
    settings.setdefault("retry_on_result", WAYMARK_PAYLOAD)
    return rappel(**settings)


# --- NoETL --------------------------------------------------------------------------------


def noetl(value: Any, *, field: str = "retry") -> tuple[RetryPolicy, ...]:
    """A NoETL step's ``retry:`` value, with NoETL's defaults exactly (``dialect: noetl``).

    noetl/noetl noetl/plugin/runtime/retry.py: ``max_attempts`` 3, ``initial_delay`` 1,
    ``max_delay`` 60, ``backoff_multiplier`` 2, ``jitter`` true (the capped delay times
    0.5 to 1.5), ``retry_when`` and ``stop_when``; every error retries. ``true`` is that
    policy, ``false`` retry off, a number N is N attempts in all ("# Integer (max attempts
    only)"), a mapping sets any of those keys (prana's field names work too).
    """
    if isinstance(value, bool):
        return (_noetl_mapping({}, field=field) if value else RetryPolicy(enabled=False),)
    if isinstance(value, int):
        if value < 0:
            _noetl_shorthand(value, field=field)  # the same error as NoETL's shorthand
        return (_noetl_mapping({"max_attempts": max(value, 1)}, field=field),)
    if isinstance(value, Mapping):
        return (_noetl_mapping(value, field=field),)
    raise InvalidSettingsError(f"{field}={value!r}: use true, a number of attempts or a mapping")


_NOETL_JITTER = 0.5
"""NoETL's jitter: "delay = delay * (0.5 + random.random())", after the cap."""


def _noetl_mapping(value: Mapping[Any, Any], *, field: str) -> RetryPolicy:
    kwargs = dict(value)
    jitter = kwargs.pop("jitter", True)
    defaults: dict[str, Any] = {"retry_on": CATCH_ALL}
    if jitter is True:
        defaults.update(jitter=_NOETL_JITTER, jitter_after_cap=True)
    else:
        kwargs["jitter"] = jitter
    for key, default in (("initial_delay", 1.0), ("max_delay", 60.0)):
        kwargs.setdefault(key, default)
    _cap_below_initial(kwargs, field=field)
    return _mapping(kwargs, field=field, **defaults)


_NOETL_KEYS = frozenset(
    {"max_attempts", "initial_delay", "max_delay", "backoff_multiplier", "jitter"}
    | {"retry_when", "stop_when"}
)
"""The keys of NoETL's retry mapping (noetl/plugin/runtime/retry.py)."""


def _noetl_shorthand(value: bool | int, *, field: str) -> RetryPolicy:
    """``retry: true`` / ``retry: N`` unmarked: prana's curve, and every error retries as
    NoETL has no exception filter (``dialects.noetl`` gives NoETL's jitter too)."""
    if isinstance(value, bool):
        return RetryPolicy(retry_on=CATCH_ALL) if value else RetryPolicy(enabled=False)
    if value < 0:
        raise InvalidSettingsError(
            f"{field}={value!r}: use a whole number >= 0, the attempts in all with the "
            "first try included (0 or 1 = no retry)"
        )
    return RetryPolicy(max_attempts=max(value, 1), retry_on=CATCH_ALL)


NOETL_SCOPE: Mapping[str, str] = {
    "result": "NoETL: the output, or {success: false, error, error_type} if the attempt raised",
    "status_code": "NoETL: status_code (or status) from the error's details or the output",
    "error": "NoETL: the error message, or None",
    "success": "NoETL: false if the attempt raised, else the output's success (default true)",
    "data": "NoETL: the result's data, or None",
    "attempt": "NoETL: the number of the attempt that just ended, 1-based",
    "execution_id": "NoETL: the execution id",
    "node_id": "NoETL: the node's key",
}
"""NoETL's retry context variables (noetl/noetl docs, "Retry Context Variables"), which a
retry condition template may use bare, as NoETL's playbooks write them."""

NOETL_NAMES: tuple[str, ...] = tuple(NOETL_SCOPE)
"""The bare names a condition may use, as NoETL's templates write them."""


def noetl_names(view: AttemptView) -> dict[str, Any]:
    """NoETL's names for the attempt ``view`` (see ``NOETL_SCOPE``), written without ``$``.

    As NoETL builds them: an attempt that raised has the result ``{"success": False,
    "error": message, "error_type": type}``; otherwise the result is the output.
    ``status_code`` comes from the error's details, else from the output.
    """
    info = view.error
    raised = info is not None and info.type != RESULT_REJECTED
    if raised:
        assert info is not None
        result: Any = {"success": False, "error": info.message, "error_type": info.type}
    else:
        result = view.output
    status_code = _status_code(info.details) if info is not None else None
    if status_code is None:
        status_code = _status_code(view.output)
    mapping = result if isinstance(result, Mapping) else {}
    return {
        "result": result,
        "status_code": status_code,
        "error": info.message if raised and info is not None else None,
        "success": mapping.get("success", True),
        "data": mapping.get("data"),
        "attempt": view.attempt,
        "execution_id": view.execution_id,
        "node_id": view.node_key,
    }


def _status_code(value: Any) -> Any:
    """``status_code`` (or an int ``status``, as ``http.request`` records it) of a mapping."""
    if not isinstance(value, Mapping):
        return None
    code = value.get("status_code")
    if code is None and isinstance(value.get("status"), int):
        code = value["status"]
    return code


# --- rh_agents ----------------------------------------------------------------------------

_RH_AGENTS_KEYS = frozenset({"backoff_strategy", "retry_on_exceptions", "exclude_exceptions"})
"""Keys only rh_agents' ``RetryConfig`` uses: a mapping with one of them is in its form."""
_RH_AGENTS_FIELDS = frozenset(
    {"max_attempts", "initial_delay", "max_delay", "jitter", "retry_timeout", "enabled"}
)
_RH_AGENTS_RETRYABLE = ("TimeoutError", "ConnectionError")
"""rh_agents' ``DEFAULT_RETRYABLE_EXCEPTIONS`` (its asyncio and Connection* errors are
subclasses of these)."""
_RH_AGENTS_NON_RETRYABLE = (
    "ValidationError",
    "ValueError",
    "TypeError",
    "KeyError",
    "AttributeError",
)
"""rh_agents' ``DEFAULT_NON_RETRYABLE_EXCEPTIONS`` (its retry mechanism spec), merged
with the config's own exclusions; ``ValidationError`` is pydantic's, matched by name."""
_RH_AGENTS_JITTER = 0.25
"""rh_agents' jitter: "Add ±25% jitter" (``delay * (0.75 + random() * 0.5)``), after the cap."""


def rh_agents(config: Mapping[Any, Any], *, field: str = "RetryConfig") -> RetryPolicy:
    """rh_agents' ``RetryConfig`` (as a mapping) with rh_agents' meaning and defaults.

    rhodief/rh-agents rh_agents/core/retry.py: ``max_attempts`` (3) includes the first try;
    the linear strategy is ``initial_delay * attempt`` (the multiplier is ignored);
    ``jitter`` (default true) is +/-25% of the capped delay, so a delay may pass
    ``max_delay`` by a quarter; ``max_delay`` below ``initial_delay`` caps every delay;
    without ``retry_on_exceptions`` only timeouts and connection errors retry;
    ``exclude_exceptions`` adds to its five exclusions, which are checked first.
    """
    value = config
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
    if kwargs["jitter"] == _RH_AGENTS_JITTER:
        kwargs["jitter_after_cap"] = True
    _cap_below_initial(kwargs, field=field)
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


def RetryConfig(**settings: Any) -> RetryPolicy:  # noqa: N802 - rh_agents' own class name
    """rh_agents' ``RetryConfig(...)`` in Python: ``rh_agents(settings)`` (its defaults exactly)."""
    return rh_agents(settings, field="RetryConfig")


# --- Prana (ADR-008) ----------------------------------------------------------------------


def prana_simple(max_retries: int, retry_delay_ms: int) -> RetryPolicy:
    """Prana's simple form: ``max_retries`` retries, a constant delay, every error retried."""
    delay = retry_delay_ms / 1000
    return RetryPolicy(
        max_attempts=max_retries + 1,
        backoff="constant",
        initial_delay=delay,
        max_delay=max(delay, 60.0),
        retry_on=("BaseException",),
    )
