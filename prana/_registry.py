"""Actions: the registry that maps a node ``type`` to code, and the context code receives."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar, overload

import attrs

from prana._dialects import read_policies
from prana._errors import InvalidSettingsError
from prana._limits import DEFAULT_LIMITS, Limits
from prana._policy import CONDITION_NAME, RetryPolicy

ActionFn = Callable[[Any, "ActionContext"], Any]
ResumeFn = Callable[[Any, "ActionContext", Any], Any]
F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=type[BaseException])


@attrs.frozen(kw_only=True)
class ActionSpec:
    """A registered action: its code, how it resumes, and what it declares about itself.

    ``params`` is an optional attrs class the rendered params are structured into;
    ``output_ports`` (``None``: any port) lists the ports it may complete on; ``trigger``
    marks an entry action; ``retry`` is its default policy, the last in precedence;
    ``side_effects`` says retries should use ``ctx.idempotency_key`` (``prana.lint`` checks).
    """

    type: str
    fn: ActionFn
    resume: ResumeFn | None = None
    params: builtins.type[Any] | None = None
    output_ports: tuple[str, ...] | None = None
    trigger: bool = False
    retry: tuple[RetryPolicy, ...] | None = None
    side_effects: bool = False
    uses_idempotency_key: bool = False


_CONDITION_NAMES: dict[int, tuple[Callable[..., Any], str]] = {}
"""Every condition registered on any ``Registry`` in this process, by ``id`` of the
callable: lets ``dumps_workflow`` write a callable's name without being handed the
registry (the stores write definitions deep inside the runner). The most recent
registration of a callable wins."""


def condition_name(fn: Callable[..., Any], registry: Registry | None = None) -> str | None:
    """The name ``fn`` is registered under: on ``registry`` first, else on any registry."""
    if registry is not None:
        for name, registered in registry._conditions.items():
            if registered is fn:
                return name
    entry = _CONDITION_NAMES.get(id(fn))
    return entry[1] if entry is not None and entry[0] is fn else None


class Registry:
    """Maps node types (``"<integration>.<action>"``) to actions; starts with the built-ins.

    It also holds the named conditions (``condition``) a workflow's data may refer to, and
    the exception classes ``lint`` should know (``exception``). Nothing read from data can
    run code that is not registered here (definitions are data). ``limits`` bounds what
    each execution run with it may run and keep (``prana.Limits``; defaults without it).
    """

    def __init__(
        self,
        *,
        builtins: bool = True,
        limits: Limits | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        if limits is not None and not isinstance(limits, Limits):
            raise InvalidSettingsError(
                f"Registry(limits={limits!r}): use prana.Limits(...), or leave it out for "
                "the defaults"
            )
        self.limits: Limits = DEFAULT_LIMITS if limits is None else limits
        """What one execution run with this registry may run and keep (``prana.Limits``)."""
        self._secrets: dict[str, str] = {}
        self.secrets: Mapping[str, str] = MappingProxyType(self._secrets)
        """``$secrets`` for templates: values redacted wherever a record would keep them."""
        if secrets is not None:
            self.add_secrets(secrets)
        self._specs: dict[str, ActionSpec] = {}
        self._exceptions: dict[str, type[BaseException]] = {}
        self._conditions: dict[str, Callable[..., Any]] = {}
        self.generation = 0
        """Bumped on every ``register``, so compiled workflows know when to revalidate."""
        if builtins:
            from prana._builtins import register_builtins

            register_builtins(self)

    def add_secrets(self, secrets: Mapping[str, str]) -> None:
        """Add (or replace) secrets templates read as ``$secrets.<name>``.

        Each value is redacted, as written and in common encodings (percent-encoded,
        base64, hex, HTML- and JSON-escaped), from everything the
        executor records of every execution run with this registry: params, outputs, state
        updates, errors and suspension data. The action still gets the real value. A value
        must be text of at least 8 characters (a shorter one would redact ordinary text).
        """
        if not isinstance(secrets, Mapping):
            raise InvalidSettingsError(
                f"Registry secrets: {type(secrets).__name__}; use a mapping of names to text"
            )
        checked: dict[str, str] = {}
        for name, value in secrets.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise InvalidSettingsError(
                    f"Registry secrets: name {name!r}; use a name templates can write as "
                    "$secrets.<name> (letters, digits, _)"
                )
            if not isinstance(value, str) or len(value) < 8:
                raise InvalidSettingsError(
                    f"Registry secrets: {name}: use text of at least 8 characters (a shorter "
                    "value would be redacted wherever it appears in ordinary text)"
                )
            checked[name] = value
        self._secrets.update(checked)

    def register(
        self,
        type_name: str,
        fn: ActionFn,
        resume: ResumeFn | None = None,
        *,
        params: type[Any] | None = None,
        output_ports: Iterable[str] | None = None,
        trigger: bool = False,
        retry: Any = None,
        side_effects: bool = False,
        uses_idempotency_key: bool = False,
    ) -> ActionSpec:
        """Add (or replace) the action ``type_name``; returns its spec."""
        if not isinstance(type_name, str) or not type_name:
            raise InvalidSettingsError(
                f"Registry.register: type_name={type_name!r}; use a non-empty string such as "
                "'http.request'"
            )
        if not callable(fn):
            raise InvalidSettingsError(f"Registry.register({type_name!r}): fn is not callable")
        if resume is not None and not callable(resume):
            raise InvalidSettingsError(f"Registry.register({type_name!r}): resume is not callable")
        if params is not None and not attrs.has(params):
            raise InvalidSettingsError(
                f"Registry.register({type_name!r}): params={params!r} is not an attrs class; "
                "declare the params schema with @attrs.define"
            )
        spec = ActionSpec(
            type=type_name,
            fn=fn,
            resume=resume,
            params=params,
            output_ports=tuple(output_ports) if output_ports is not None else None,
            trigger=trigger,
            retry=read_policies(retry, field=f"Registry.register({type_name!r}).retry"),
            side_effects=side_effects,
            uses_idempotency_key=uses_idempotency_key,
        )
        self._specs[type_name] = spec
        self.generation += 1
        return spec

    def action(self, type_name: str, **options: Any) -> Callable[[F], F]:
        """Decorator form of ``register``: ``@registry.action("http.request")``."""

        def decorate(fn: F) -> F:
            self.register(type_name, fn, **options)
            return fn

        return decorate

    def get(self, type_name: str) -> ActionSpec | None:
        """The spec registered under ``type_name``, or ``None``."""
        return self._specs.get(type_name)

    def __contains__(self, type_name: object) -> bool:
        return type_name in self._specs

    def types(self) -> list[str]:
        """Every registered type name, sorted."""
        return sorted(self._specs)

    @overload
    def condition(self, name: str) -> Callable[[F], F]: ...

    @overload
    def condition(self, name: str, fn: F) -> F: ...

    def condition(self, name: str, fn: F | None = None) -> F | Callable[[F], F]:
        """Register a retry condition under ``name``: ``@registry.condition("name")`` or
        ``registry.condition("name", fn)``; returns ``fn``.

        Data refers to it by that name (``retry_on_result: is_rate_limited``); validation
        resolves the name here, and an unknown name is an error. ``retry_when`` and
        ``stop_when`` call it with the ``AttemptView``, ``retry_on_result`` with the output.
        """
        if not isinstance(name, str) or not CONDITION_NAME.match(name):
            raise InvalidSettingsError(
                f"Registry.condition: name={name!r}; use a plain name such as "
                "'is_rate_limited' (letters, digits, '_', '.', ':' or '-'; not a template)"
            )
        if fn is None:

            def decorate(function: F) -> F:
                return self.condition(name, function)

            return decorate
        if not callable(fn):
            raise InvalidSettingsError(f"Registry.condition({name!r}): {fn!r} is not callable")
        self._conditions[name] = fn
        _CONDITION_NAMES[id(fn)] = (fn, name)
        self.generation += 1
        return fn

    def get_condition(self, name: str) -> Callable[..., Any] | None:
        """The condition registered under ``name``, or ``None``."""
        return self._conditions.get(name)

    def conditions(self) -> list[str]:
        """Every registered condition name, sorted."""
        return sorted(self._conditions)

    def exception(self, cls: E) -> E:
        """Make an exception class known by name (decorator or plain call); returns it.

        ``retry_on``/``exclude`` match names through an error's MRO whether or not its class
        is registered; registering lets ``prana.lint`` tell a real name from a typo.
        """
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise InvalidSettingsError(
                f"Registry.exception: expected an exception class, got {cls!r}; pass the class "
                "itself, e.g. registry.exception(RateLimitError)"
            )
        self._exceptions[cls.__name__] = cls
        return cls

    def exceptions(self) -> list[str]:
        """The names of the registered exception classes, sorted."""
        return sorted(self._exceptions)


class ActionContext:
    """What an action sees besides its params: input, identity, attempt, state and time.

    ``state`` is a read-only view of the shared workflow state; ``update_state`` stages
    changes that are applied only if this attempt completes, so a failed attempt leaves
    no trace. ``idempotency_key`` is stable across retries of the same node run.

    ``input`` holds the upstream nodes' recorded outputs themselves, not copies (copying
    every input would cost every node): treat it as read-only, and build new values
    instead of changing it in place, or the change leaks into the execution's records.
    """

    __slots__ = (
        "_state_updates",
        "attempt",
        "env",
        "execution_id",
        "input",
        "node_key",
        "now",
        "run_index",
        "state",
        "variables",
        "workflow_id",
    )

    def __init__(
        self,
        input: Mapping[str, Any],
        execution_id: str,
        node_key: str,
        attempt: int,
        run_index: int,
        state: Mapping[str, Any],
        now: datetime,
        env: Mapping[str, Any],
        variables: Mapping[str, Any],
        workflow_id: str,
    ) -> None:
        self.input = input
        self.execution_id = execution_id
        self.node_key = node_key
        self.attempt = attempt
        self.run_index = run_index
        self.state: Mapping[str, Any] = MappingProxyType(state) if state else _EMPTY
        self.now = now
        self.env = env
        self.variables = variables
        self.workflow_id = workflow_id
        self._state_updates: dict[str, Any] | None = None

    @property
    def idempotency_key(self) -> str:
        """``"{execution_id}:{node_key}:{run_index}"``: the same for every retry of this run."""
        return f"{self.execution_id}:{self.node_key}:{self.run_index}"

    @property
    def staged_state(self) -> Mapping[str, Any]:
        """The changes ``update_state`` staged so far (applied if the attempt completes)."""
        return MappingProxyType(self._state_updates) if self._state_updates else _EMPTY

    def update_state(self, changes: Mapping[str, Any]) -> None:
        """Stage changes to the shared state, applied when this attempt completes."""
        if self._state_updates is None:
            self._state_updates = {}
        self._state_updates.update(changes)


_EMPTY: Mapping[str, Any] = MappingProxyType({})
