"""``prana.lint``: retry settings that are valid but probably not what you meant.

Construction already refuses what is wrong (``InvalidSettingsError``); lint reports what
is legal yet suspicious, before anything runs: jitter clipped by the cap, hints allowed
past the cap, delays that cannot fit the budget, retrying programming errors, retrying a
side-effecting action that does not use its idempotency key, and several policies whose
meaning under prana's first-match rule differs from Waymark's maximum; given the data a
workflow was read from, a retry mapping that several designs' forms fit. Past retries, one
error-handling setting: ``on_error: continue_error_output`` with no edge leaving the node's
``error`` port, which turns the node's failure into the execution's completed output; and
a built-in's choice param (``wait.wait``'s ``mode``) written as a value its action refuses.
"""

from __future__ import annotations

import builtins
import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from prana import _errors
from prana._builtins import SUB_WORKFLOW_MODES, WAIT_MODES, WAIT_UNITS
from prana._decision import check_conditions
from prana._dialects import also_reads_as, reading
from prana._durations import format_duration as _fmt
from prana._model import ErrorInfo
from prana._policy import (
    HINT_CEILING_SECONDS,
    PROGRAMMING_ERRORS,
    RESULT_REJECTED,
    RetryPolicy,
)
from prana._resolve import resolve_level

if TYPE_CHECKING:
    from prana._model import Node, Workflow
    from prana._registry import Registry

_PROGRAMMING_CLASSES: tuple[type[BaseException], ...] = tuple(
    getattr(builtins, name) for name in PROGRAMMING_ERRORS
)


@attrs.frozen(kw_only=True)
class LintWarning:
    """One suspicious setting: which node, a stable ``code``, and what to do about it.

    Codes: ``jitter_clipped``, ``hint_uncapped``, ``delays_exceed_budget``,
    ``timeout_exceeds_budget``, ``unbounded_retries``, ``retries_programming_errors``,
    ``side_effects_without_idempotency``, ``first_match_differs_from_max``,
    ``invalid_condition`` (also a validation error), ``unknown_exception``,
    ``error_output_unconnected``, ``invalid_param``, ``ambiguous_dialect``.
    """

    node_key: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.node_key}: [{self.code}] {self.message}"


def lint(
    workflow: Workflow, registry: Registry | None = None, *, source: Any = None
) -> list[LintWarning]:
    """Every suspicious retry setting of ``workflow``, node by node, in node order.

    Each node is checked with the policies it would really use (the precedence on the
    docs' Retry policy page). Without a ``registry`` the actions' own defaults and
    ``side_effects`` declarations are unknown, so those checks are skipped. ``source`` is
    the data the workflow was read from (a file's JSON or YAML, as a mapping): a retry
    mapping in it without a ``dialect`` key that several designs' forms fit is reported
    (``ambiguous_dialect``), saying which it was read as (``prana lint`` passes it).
    """
    warnings: list[LintWarning] = _ambiguous_dialects(source)
    known = _known_exception_names(registry)
    error_sources = {c.from_node for c in workflow.connections if c.from_port == "error"}
    for node in workflow.nodes:
        spec = registry.get(node.type) if registry is not None else None
        level, policies = resolve_level(node, workflow, spec.retry if spec else None)
        for index, policy in enumerate(policies):
            where = f"policy {index + 1} " if len(policies) > 1 else ""
            warnings.extend(
                LintWarning(node_key=node.key, code=code, message=where + message)
                for code, message in _check_policy(policy, node, simple=level == "simple")
            )
        warnings.extend(
            LintWarning(node_key=node.key, code="first_match_differs_from_max", message=message)
            for message in _first_match_vs_max(policies)
        )
        for index, policy in enumerate(policies):
            where = f"policy {index + 1} " if len(policies) > 1 else ""
            warnings.extend(
                LintWarning(node_key=node.key, code="unknown_exception", message=where + message)
                for message in _unknown_exceptions(policy, known, registry)
            )
        warnings.extend(
            LintWarning(
                node_key=node.key,
                code="invalid_condition",
                message=f"{problem}; as written the condition never holds",
            )
            for problem in check_conditions(node, workflow, spec.retry if spec else None, registry)[
                1
            ]
        )
        retries = any(p.enabled and p.max_attempts != 1 for p in policies)
        if spec is not None and spec.side_effects and not spec.uses_idempotency_key and retries:
            warnings.append(
                LintWarning(
                    node_key=node.key,
                    code="side_effects_without_idempotency",
                    message=(
                        f"action {node.type!r} has side effects and is retried, but its spec "
                        "does not declare uses_idempotency_key=True: a retry may repeat the "
                        "effect; send ctx.idempotency_key to the remote side and register "
                        "with uses_idempotency_key=True, or switch retry off for this node"
                    ),
                )
            )
        warnings.extend(
            LintWarning(node_key=node.key, code="invalid_param", message=message)
            for message in _builtin_params(node)
        )
        if node.settings.on_error == "continue_error_output" and node.key not in error_sources:
            warnings.append(
                LintWarning(
                    node_key=node.key,
                    code="error_output_unconnected",
                    message=(
                        "on_error is continue_error_output but no connection leaves this "
                        "node's error port: a failure here goes nowhere and the execution "
                        "completes with the error as its output; connect a node with "
                        "from_port: error, or use stop_workflow to fail the execution"
                    ),
                )
            )
    return warnings


_DIALECT_NAMES = {"prana": "prana's own form", "noetl": "NoETL's", "rh_agents": "rh_agents'"}


def _ambiguous_dialects(source: Any) -> list[LintWarning]:
    """``ambiguous_dialect`` for each unmarked retry mapping of ``source`` that fits several
    designs' keys (``prana.dialects.also_reads_as``)."""
    if not isinstance(source, Mapping):
        return []
    document = source.get("workflow", source)
    if not isinstance(document, Mapping):
        return []
    found: list[tuple[str, Any]] = []
    nodes = document.get("nodes")
    for node in nodes if isinstance(nodes, list) else ():
        settings = node.get("settings") if isinstance(node, Mapping) else None
        if isinstance(settings, Mapping) and "retry" in settings:
            found.append((str(node.get("key", "?")), settings["retry"]))
    defaults = document.get("retry_defaults")
    if isinstance(defaults, Mapping):
        found += [(f"retry_defaults[{key!r}]", value) for key, value in defaults.items()]
    out: list[LintWarning] = []
    for where, retry in found:
        items = retry if isinstance(retry, list) else [retry]
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                continue
            others = also_reads_as(item)
            if not others:
                continue
            read = reading(item)
            also = " or ".join(_DIALECT_NAMES.get(name, name) for name in others)
            place = f"policy {index + 1} " if len(items) > 1 else ""
            out.append(
                LintWarning(
                    node_key=where,
                    code="ambiguous_dialect",
                    message=(
                        f"{place}retry mapping without a dialect key was read as "
                        f"{_DIALECT_NAMES.get(read, read)}; it is also {also}, whose defaults "
                        f"differ (jitter, which errors retry): add dialect: {read} to keep "
                        f"this reading, or dialect: {' / '.join(others)} for theirs"
                    ),
                )
            )
    return out


def _builtin_params(node: Node) -> list[str]:
    """A built-in's choice params whose literal value is none of its choices.

    Only what the action itself would refuse when the node runs (``wait.wait``'s ``mode``
    and, for an interval, ``unit``; a sub-workflow's ``mode``); a template is known only
    then, so it is not checked.
    """
    params = node.params
    if not isinstance(params, dict):
        return []
    checks: list[tuple[str, tuple[str, ...], str | None]]
    if node.type == "wait.wait":
        checks = [("mode", WAIT_MODES, None)]
        if params.get("mode") == "interval":
            checks.append(("unit", tuple(WAIT_UNITS), "seconds"))
    elif node.type == "workflow.execute_workflow":
        checks = [("mode", SUB_WORKFLOW_MODES, "sync")]
    else:
        return []
    found: list[str] = []
    for field, choices, default in checks:
        value = params.get(field, default)
        if value in choices or (isinstance(value, str) and ("{{" in value or "{%" in value)):
            continue
        close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(choices)}"
        found.append(
            f"{node.type}: {field}={value!r} is not one of its choices; {hint} "
            "(as written the node fails when it runs)"
        )
    return found


def _class_names(classes: Iterable[type[BaseException]]) -> set[str]:
    """Each class's name and ``module.qualname``, and those of its bases."""
    names: set[str] = set()
    for cls in classes:
        for base in cls.__mro__:
            names.add(base.__name__)
            names.add(f"{base.__module__}.{base.__qualname__}")
    return names


def _exceptions_in(namespace: dict[str, object]) -> list[type[BaseException]]:
    return [v for v in namespace.values() if isinstance(v, type) and issubclass(v, BaseException)]


_BUILTIN_EXCEPTIONS: frozenset[str] = frozenset(
    _class_names(_exceptions_in(vars(builtins)) + _exceptions_in(vars(_errors))) | {RESULT_REJECTED}
)
"""Every built-in exception name, prana's own, and ``ResultRejected``."""


_RECORDED_TYPES = frozenset(
    {
        "Cancelled",
        "InvalidPort",
        "InvalidSuspend",
        "IterationLimitExceeded",
        "LimitExceeded",
        "OutputNotJSON",
        "ParamsInvalid",
        "StateNotJSON",
        "TemplateError",
        "Interrupted",
    }
)
"""The ``ErrorInfo.type`` names prana records for failures it finds itself (not exceptions)."""

_SUGGESTIONS: tuple[str, ...] = tuple(
    sorted(
        {cls.__name__ for cls in _exceptions_in(vars(builtins)) if not cls.__name__.startswith("_")}
        | {"AttemptTimeout", "NonRetryable", "RetryAfter", "WebhookTimeout", RESULT_REJECTED}
    )
)
"""What a "did you mean" may offer: Python's public exceptions and those an attempt of a
node can fail with in prana, never a private name or one prana uses only internally."""


def _known_exception_names(registry: Registry | None) -> frozenset[str]:
    if registry is None or not registry.exceptions():
        return _BUILTIN_EXCEPTIONS | _RECORDED_TYPES
    return _BUILTIN_EXCEPTIONS | _RECORDED_TYPES | _class_names(registry._exceptions.values())


def _stem(name: str) -> str:
    """A name without its ``Error``/``Exception`` ending, so endings do not make names close."""
    for ending in ("Error", "Exception"):
        if name.endswith(ending) and name != ending:
            return name[: -len(ending)].lower()
    return name.lower()


def _closest(name: str, registry: Registry | None) -> str | None:
    """The public built-in or registered exception name closest to ``name``, if one is close."""
    candidates = list(_SUGGESTIONS)
    if registry is not None:
        candidates += sorted(registry.exceptions())
    by_stem: dict[str, str] = {}
    for candidate in candidates:
        by_stem.setdefault(_stem(candidate), candidate)
    close = difflib.get_close_matches(_stem(name), list(by_stem), n=1, cutoff=0.7)
    if close:
        return by_stem[close[0]]
    whole = difflib.get_close_matches(name, candidates, n=1, cutoff=0.8)
    return whole[0] if whole else None


def _unknown_exceptions(
    policy: RetryPolicy, known: frozenset[str], registry: Registry | None
) -> list[str]:
    """A message for each name in ``retry_on``/``exclude`` that no known exception has."""
    found: list[str] = []
    for field in ("retry_on", "exclude"):
        for item in getattr(policy, field) or ():
            if not isinstance(item, str) or item in known:
                continue
            close = _closest(item.rsplit(".", 1)[-1], registry)
            guess = f"; did you mean {close!r}?" if close else ""
            short = item.rsplit(".", 1)[-1]
            found.append(
                f"{field}: no built-in or registered exception is named {item!r}{guess} "
                f"(a name matches an error whose class or a base class has it; if it is your "
                f"own, register it with registry.exception({short}) and pass the registry to "
                "lint, or to prana lint the --actions module that registers it)"
            )
    return found


def _check_policy(policy: RetryPolicy, node: Node, *, simple: bool) -> list[tuple[str, str]]:
    if not policy.enabled:
        return []
    found: list[tuple[str, str]] = []
    cap = policy.max_delay
    budget = policy.retry_timeout
    attempts = policy.max_attempts
    retries = min((attempts or 1) - 1, 1000) if attempts is not None else 0

    if isinstance(policy.jitter, float) and not policy.jitter_after_cap:
        clipped = [k for k in range(1, retries + 1) if policy._curve(k) * (1 + policy.jitter) > cap]
        if clipped:
            found.append(
                (
                    "jitter_clipped",
                    (
                        f"+/-{policy.jitter:.0%} jitter is clipped by max_delay={_fmt(cap)} from "
                        f"retry {clipped[0]} on, so those delays bunch up at the cap; raise "
                        "max_delay or use jitter='full'/'equal', which stay below it"
                    ),
                )
            )
    if policy.hint_exceeds_max_delay:
        found.append(
            (
                "hint_uncapped",
                (
                    f"hint_exceeds_max_delay=True lets a RetryAfter hint wait past "
                    f"max_delay={_fmt(cap)}, up to {_fmt(HINT_CEILING_SECONDS)}; make sure the "
                    "server's Retry-After is trusted"
                ),
            )
        )
    if budget is not None and retries:
        shortest = sum(policy._bounds(k)[0] for k in range(1, retries + 1))
        if shortest > budget:
            fit = len(policy.schedule())
            found.append(
                (
                    "delays_exceed_budget",
                    (
                        f"the delays of {retries} retries sum to at least {_fmt(shortest)}, past "
                        f"retry_timeout={_fmt(budget)}: only {fit} retries can run; lower "
                        "max_attempts or the delays, or raise retry_timeout"
                    ),
                )
            )
    timeout = policy.timeout if policy.timeout is not None else node.settings.timeout
    if budget is not None and timeout is not None and timeout > budget:
        found.append(
            (
                "timeout_exceeds_budget",
                (
                    f"the per-attempt timeout {_fmt(timeout)} is longer than retry_timeout="
                    f"{_fmt(budget)}: an attempt that times out leaves no budget for a retry"
                ),
            )
        )
    if attempts is None and budget is None:
        found.append(
            (
                "unbounded_retries",
                "max_attempts=None with no retry_timeout retries forever; set one of them",
            )
        )
    # A catch-all filter says "every exception" on purpose (Rappel's and Waymark's bracket
    # without a filter means exactly that): only a filter naming narrower classes that still
    # reach programming errors through a base is the likely mistake.
    if not simple and policy.retry_on is not None and not _only_catch_all(policy):
        caught = [
            cls.__name__
            for cls in _PROGRAMMING_CLASSES
            if policy.matches(cls("lint"))  # probe with an instance of each one
        ]
        if caught:
            filters = ", ".join(f if isinstance(f, str) else f.__name__ for f in policy.retry_on)
            found.append(
                (
                    "retries_programming_errors",
                    (
                        f"retry_on=({filters}) also retries programming errors "
                        f"({', '.join(caught)}), which fail the same way every time; name the "
                        "transient errors instead, or add the others to exclude"
                    ),
                )
            )
    return found


# --- several policies: prana's first match against Waymark's maximum ----------------------

_CATCH_ALL_NAMES = frozenset({"Exception", "BaseException", "builtins.Exception"})


def _first_match_vs_max(policies: Sequence[RetryPolicy]) -> list[str]:
    """Pairs of policies where an error matches both and the later one allows more attempts.

    prana lets the first policy whose filter matches decide (docs: Retry policy); Waymark
    takes "the max across matching retry brackets"
    (piercefreeman/waymark docs/_internal/Action-Retries.md). The two agree unless a later
    matching policy allows more attempts.
    """
    found: list[str] = []
    enabled = [(i, p) for i, p in enumerate(policies) if p.enabled]
    for n, (i, first) in enumerate(enabled):
        for j, later in enabled[n + 1 :]:
            if _more_attempts(later, first):
                shared = _shared_error(first, later)
                if shared is not None:
                    found.append(
                        f"policies {i + 1} and {j + 1} both match {shared}: prana uses the first "
                        f"that matches ({_attempts(first)}), Waymark the largest count of all "
                        f"that match ({_attempts(later)}); put the narrower policy first, or "
                        "give them the same max_attempts"
                    )
    return found


def _more_attempts(later: RetryPolicy, first: RetryPolicy) -> bool:
    if first.max_attempts is None:
        return False
    return later.max_attempts is None or later.max_attempts > first.max_attempts


def _attempts(policy: RetryPolicy) -> str:
    n = policy.max_attempts
    return "unlimited attempts" if n is None else f"{n} attempt{'s' if n != 1 else ''}"


def _shared_error(a: RetryPolicy, b: RetryPolicy) -> str | None:
    """An error type both policies would retry, named for the message, or ``None``."""
    probes: list[str | type[BaseException]] = [*(a.retry_on or ()), *(b.retry_on or ())]
    if a.retry_on is None or b.retry_on is None or _catches_all(a) or _catches_all(b):
        probes.append(RuntimeError)  # any error the filters do not name
    for probe in probes:
        if _might_match(a, probe) and _might_match(b, probe):
            return probe if isinstance(probe, str) else probe.__name__
    return None


def _catches_all(policy: RetryPolicy) -> bool:
    return any(
        (item in _CATCH_ALL_NAMES) if isinstance(item, str) else item in (Exception, BaseException)
        for item in policy.retry_on or ()
    )


def _only_catch_all(policy: RetryPolicy) -> bool:
    return all(
        (item in _CATCH_ALL_NAMES) if isinstance(item, str) else item in (Exception, BaseException)
        for item in policy.retry_on or ()
    )


def _might_match(policy: RetryPolicy, probe: str | type[BaseException]) -> bool:
    """Whether ``policy`` retries errors of type ``probe`` (a class, or a type's name).

    A name lint cannot resolve to a class (the application's own ``NetworkError``) is taken
    to be some ``Exception``: a catch-all filter or the smart default matches it.
    """
    cls: type[BaseException] | None
    if isinstance(probe, str):
        found = getattr(builtins, probe, None)
        is_error = isinstance(found, type) and issubclass(found, BaseException)
        cls = found if is_error else None
    else:
        cls = probe
    if cls is not None:
        info = ErrorInfo(
            code="action_error", type=cls.__qualname__, module=cls.__module__, message="lint"
        )
        return policy.matches(None, info)
    assert isinstance(probe, str)
    if probe in (policy.exclude or ()):
        return False
    if policy.retry_on is None:
        return True
    return probe in policy.retry_on or _catches_all(policy)
