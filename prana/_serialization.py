"""Serialization: one cattrs converter for every prana record, JSON through orjson.

Stores, workers and the CLI all go through ``dumps``/``loads`` (executions),
``dumps_workflow``/``loads_workflow`` (definitions) and ``dumps_outcome``/``loads_outcome``;
nobody hand-writes dicts. Every document carries ``schema_version`` so a future format
can be told apart from a corrupt record; this prana reads and writes schema 1 only.

Shape of the converter (cattrs' ``preconf/orjson`` plus):

- datetimes are ISO 8601 text and must carry a UTC offset (naive ones are refused);
  enums are stored by value;
- a ``Suspend``'s ``kind`` tags its ``data`` (``BUILTIN_SUSPEND_DATA``); its
  ``execution`` is never stored inside an execution (it would be the execution itself);
- data never names code to import (definitions are data): a callable in a policy is written as the
  name it is registered under (``registry.condition``) and read back as that name, which
  validation resolves on the registry; an exception class is written as its name (short
  for builtins, ``module.qualname`` otherwise) and read back as a name matched through
  an error's MRO. Nothing read is ever imported; an unregistered callable is refused when
  writing;
- primitives are strict: ``"3"`` is not an int and ``2.5`` is not silently truncated;
- unknown keys are refused, so a typo in a hand-written workflow is an error, not a no-op.

Reading is two-speed: the generated reader (the execution's body and its node runs as
``prana._compact``'s rows) structures first; only when it fails does a converter with
``detailed_validation`` run again, so ``cattrs.transform_error`` can name every bad field
in a ``RecordError``.
"""

from __future__ import annotations

import contextvars
import re
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, Final, Literal, TypeVar, Union

import attrs
import orjson
from cattrs import ClassValidationError, IterableValidationError
from cattrs.errors import (
    AttributeValidationNote,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.orjson import OrjsonConverter
from cattrs.preconf.orjson import make_converter as _make_orjson_converter
from cattrs.v import format_exception as _cattrs_format_exception
from cattrs.v import transform_error

from prana import _model
from prana._compact import gen_execution_codec, named_runs
from prana._durations import is_aware
from prana._errors import InvalidSettingsError, PranaError, RecordError
from prana._fast_hooks import (
    DATETIMES,
    FieldError,
    union_args,
)
from prana._model import (
    BUILTIN_SUSPEND_DATA,
    Completed,
    ErrorInfo,
    Failed,
    Outcome,
    RetryData,
    Suspend,
    WebhookData,
    Workflow,
    WorkflowExecution,
)
from prana._policy import CONDITION_NAME, RetryPolicy
from prana._registry import Registry, condition_name

__all__ = [
    "SCHEMA_VERSION",
    "dumps",
    "dumps_outcome",
    "dumps_workflow",
    "loads",
    "loads_outcome",
    "loads_workflow",
    "make_converter",
]

SCHEMA_VERSION: Final = 1
"""The version of the JSON layout written and read by ``dumps`` (and the other ``dumps_*``).

Node runs are compact rows, their times microseconds after the run's start and UTC as
``Z`` (``prana._compact``); everything else is an object of its fields. A later layout
gets the next number and a reader of this one.
"""

T = TypeVar("T")

_DUMPS_REGISTRY: contextvars.ContextVar[Registry | None] = contextvars.ContextVar(
    "prana_dumps_registry", default=None
)
"""The registry ``dumps_workflow`` was given, if any, to name callables by."""
_OUTCOME_TAGS: Final[dict[type[Any], str]] = {
    Completed: "completed",
    Suspend: "suspended",
    Failed: "failed",
}


_MISSING: Final = object()
UTC: Final = timezone.utc


# -- names: callables by their registered name, classes by their own ------------------------


def _name_of(obj: Any) -> str:
    """The text a class or callable is written as: a class's name, a callable's registered one.

    Raises ``InvalidSettingsError`` for a callable no registry knows, saying how to
    register it.
    """
    if isinstance(obj, type):
        if obj.__module__ == "builtins":
            return obj.__name__
        return f"{obj.__module__}.{obj.__qualname__}"
    name = condition_name(obj, _DUMPS_REGISTRY.get())
    if name is not None:
        return name
    label = getattr(obj, "__name__", "")
    suggested = label if isinstance(label, str) and CONDITION_NAME.match(label) else "name"
    raise InvalidSettingsError(
        f"the callable {obj!r} is not registered, so it cannot be written as data (data never "
        f"names code to import); register it with registry.condition({suggested!r}, "
        f"{suggested if suggested != 'name' else 'fn'}) and it is written as that name, or use "
        "a {{ }} template"
    )


def _no_code(value: Any, _: Any) -> Any:
    """A pure class or callable slot: data never holds one (it would name code to import)."""
    raise FieldError(
        f"cannot read {value!r} as a class or callable: definitions are data and name no code; "
        "use a registered condition's name or an exception's name"
    )


def _class_slot(t: Any) -> type[Any] | None:
    """The base class if ``t`` is ``type`` or ``type[X]``, else ``None``."""
    if t is type:
        return object
    if typing.get_origin(t) is type:
        (arg,) = typing.get_args(t)
        return arg if isinstance(arg, type) else object
    return None


def _is_callable_slot(t: Any) -> bool:
    """Whether ``t`` is ``Callable`` or ``Callable[...]``."""
    return t is Callable or typing.get_origin(t) is Callable


def _is_ref_union(t: Any) -> bool:
    """Whether ``t`` is a union with a class or callable member."""
    args = union_args(t)
    return args is not None and any(
        _class_slot(a) is not None or _is_callable_slot(a) for a in args
    )


def _structure_ref_union(conv: OrjsonConverter, t: Any) -> Callable[[Any, Any], Any]:
    """Structure a union such as ``str | type[BaseException]`` or ``Callable | str | None``.

    Text stays text: a condition's registered name or template, an exception's name. The
    class and callable members are for values built in Python; nothing is imported.
    """
    args = typing.get_args(t)
    rest = tuple(a for a in args if _class_slot(a) is None and not _is_callable_slot(a))
    accepts_str = str in rest
    accepts_none = type(None) in rest
    others = tuple(a for a in rest if a not in (str, type(None)))
    other_hook = conv.get_structure_hook(Union[others]) if others else None  # noqa: UP007

    def structure(value: Any, _: Any) -> Any:
        if value is None and accepts_none:
            return None
        if isinstance(value, str) and accepts_str:
            return value
        if other_hook is not None and not isinstance(value, str):
            return other_hook(value, Union[others])  # noqa: UP007
        raise FieldError(f"cannot read {value!r} as {t}")

    return structure


def _unstructure_ref_union(conv: OrjsonConverter) -> Callable[[Any], Any]:
    """Write a union value: classes and callables by name, anything else as usual."""

    def unstructure(value: Any) -> Any:
        if isinstance(value, type) or (callable(value) and not isinstance(value, str)):
            return _name_of(value)
        return conv.unstructure(value)

    return unstructure


# -- primitives and datetimes --------------------------------------------------------------


def _structure_str(value: Any, _: Any) -> str:
    """Text only: cattrs would turn ``3`` into ``"3"``."""
    if type(value) is not str:
        raise FieldError(f"expected text, got {value!r}")
    return value


def _structure_int(value: Any, _: Any) -> int:
    """Whole numbers only: cattrs would turn ``"3"`` into 3 and ``2.5`` into 2."""
    if type(value) is not int:
        raise FieldError(f"expected a whole number, got {value!r}")
    return value


def _structure_float(value: Any, _: Any) -> float:
    """Numbers only (an int is widened): cattrs would read ``"1.5"``."""
    if type(value) is not float:
        if type(value) is not int:
            raise FieldError(f"expected a number, got {value!r}")
        return float(value)
    return value


def _structure_bool(value: Any, _: Any) -> bool:
    """``true``/``false`` only: cattrs would read ``1`` or ``"no"`` as a bool."""
    if type(value) is not bool:
        raise FieldError(f"expected true or false, got {value!r}")
    return value


def _structure_datetime(value: Any, _: Any) -> datetime:
    """ISO 8601 text with a UTC offset; ``Z`` is accepted on every Python version."""
    if not isinstance(value, str):
        raise FieldError(f"expected an ISO 8601 date-time text, got {value!r}")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise FieldError(f"{value!r} is not an ISO 8601 date-time") from None
    if parsed.tzinfo is None:
        raise FieldError(
            f"{value!r} has no UTC offset; records hold aware datetimes only "
            "(write e.g. '2030-01-01T00:00:00+00:00')"
        )
    return parsed


# -- attrs classes ---------------------------------------------------------------------------

_SCALARS = (str, int, float, bool, type(None))


def _attrs_structure_factory(
    conv: OrjsonConverter,
) -> Callable[[type[Any]], Callable[[Any, Any], Any]]:
    """Generate each attrs class's structure hook, with two changes to cattrs' own.

    A field with an attrs converter (durations such as ``"500ms"``, the ``retry``
    shorthands) gets a scalar value raw, so its converter reads what users write; a
    reference text in a class or callable slot is imported first. And a settings error
    raised while building the instance is attached to the field it names
    (``NodeSettings.max_retries=...``) so the path reaches the field.
    """

    def factory(cl: type[Any]) -> Callable[[Any, Any], Any]:
        overrides = {}
        for a in attrs.fields(cl):
            if a.converter is not None and a.init:
                overrides[a.name] = override(struct_hook=_converter_field_hook(conv, a))
        inner = make_dict_structure_fn(cl, conv, **overrides)  # type: ignore[arg-type]
        if not conv.detailed_validation:
            return inner
        names = {a.name: a.type for a in attrs.fields(cl)}
        prefix = re.compile(rf"^{re.escape(cl.__name__)}\.(\w+)")

        def structure(obj: Any, t: Any) -> Any:
            if not isinstance(obj, Mapping):
                raise FieldError(f"expected an object for {cl.__name__}, got {obj!r}")
            try:
                return inner(obj, t)
            except ClassValidationError as exc:
                for sub in exc.exceptions:
                    if getattr(sub, "__notes__", None):
                        continue
                    match = prefix.match(str(sub))
                    if match and match.group(1) in names:
                        name = match.group(1)
                        sub.__notes__ = [
                            AttributeValidationNote(
                                f"Structuring class {cl.__qualname__} @ attribute {name}",
                                name,
                                names[name],
                            )
                        ]
                raise

        return structure

    return factory


def _converter_field_hook(
    conv: OrjsonConverter, a: attrs.Attribute[Any]
) -> Callable[[Any, Any], Any]:
    """The hook for a field with an attrs converter (``"500ms"``, ``retry: 3``, ...).

    Scalars are what users write for such fields, so they skip the type and go to the
    converter as they are (text is never imported). The converter runs here, so its
    error is reported at this field; ``__init__`` runs it again on its own output, which
    these normalizing converters leave unchanged.
    """
    t = a.type
    typed_hook = conv.get_structure_hook(t)
    convert = a.converter if callable(a.converter) else _identity

    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, _SCALARS):
            return convert(value)
        return convert(typed_hook(value, t))

    return structure


def _identity(value: Any) -> Any:
    """Stand-in for a converter that cannot be called on its own (``attrs.Converter``)."""
    return value


# -- the retry slot: policies, or the shorthands users write --------------------------------


def _structure_policies(conv: OrjsonConverter) -> Callable[[Any, Any], Any]:
    """``NodeSettings.retry`` and ``retry_defaults`` values: policies as objects.

    An object whose keys are all policy fields (or a list of them) structures into
    ``RetryPolicy``, with class and callable references imported; anything else
    (bracket text, ``True``, a number of retries, a mapping with aliases) is left for
    ``prana.dialects.read_policies``, which the records' own converters call.
    """
    policy_fields = frozenset(a.name for a in attrs.fields(RetryPolicy))

    def is_policy(value: Any) -> bool:
        return isinstance(value, Mapping) and policy_fields.issuperset(value)

    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, list | tuple) and value and all(map(is_policy, value)):
            return _structure_items(conv, value, RetryPolicy)
        if is_policy(value):
            return (conv.structure(value, RetryPolicy),)
        return value

    return structure


def _structure_items(conv: OrjsonConverter, items: Any, cl: type[T]) -> tuple[T, ...]:
    """Structure each item as ``cl``; with detailed validation, errors carry their index."""
    if not conv.detailed_validation:
        return tuple(conv.structure(item, cl) for item in items)
    out: list[T] = []
    errors: list[Exception] = []
    for index, item in enumerate(items):
        try:
            out.append(conv.structure(item, cl))
        except Exception as exc:  # noqa: BLE001 - collected, raised with its index
            exc.__notes__ = [  # type: ignore[attr-defined]
                *getattr(exc, "__notes__", []),
                IterableValidationNote(f"Structuring {cl.__name__} @ index {index}", index, cl),
            ]
            errors.append(exc)
    if errors:
        raise IterableValidationError(f"While structuring {cl.__name__} items", errors, tuple)
    return tuple(out)


# -- suspensions and outcomes ----------------------------------------------------------------


def _unstructure_suspend(conv: OrjsonConverter) -> Callable[[Suspend], dict[str, Any]]:
    """A suspension inside an execution: its ``kind`` and ``data``, never the execution."""

    def unstructure(suspend: Suspend) -> dict[str, Any]:
        data = suspend.data
        cls = BUILTIN_SUSPEND_DATA.get(suspend.kind)
        if cls is not None and data is not None:
            if not isinstance(data, cls):
                raise RecordError(
                    f"Suspend(kind={suspend.kind!r}) carries {type(data).__name__}, "
                    f"expected {cls.__name__}: built-in kinds carry their typed data"
                )
            data = conv.unstructure(data, cls)
        return {"kind": suspend.kind, "data": data}

    return unstructure


def _structure_suspend(conv: OrjsonConverter) -> Callable[[Any, Any], Suspend]:
    """Read a suspension: ``kind`` picks the class ``data`` structures into."""

    def structure(obj: Any, _: Any) -> Suspend:
        if not isinstance(obj, Mapping):
            raise FieldError(f"expected an object for Suspend, got {obj!r}")
        errors: list[Exception] = []
        extra = set(obj) - {"kind", "data"}
        if extra:
            errors.append(ForbiddenExtraKeysError("", Suspend, extra))
        kind = obj.get("kind")
        if not isinstance(kind, str) or not kind:
            errors.append(_note(FieldError(f"expected a non-empty kind, got {kind!r}"), "kind"))
        data = obj.get("data")
        cls = BUILTIN_SUSPEND_DATA.get(kind) if isinstance(kind, str) else None
        if cls is not None and data is not None:
            try:
                data = conv.structure(data, cls)
            except Exception as exc:  # noqa: BLE001 - reported with its path below
                errors.append(_note(exc, "data", cls))
        if errors:
            raise ClassValidationError("While structuring Suspend", errors, Suspend)
        return Suspend(kind, data)  # type: ignore[arg-type]

    return structure


def _note(exc: Exception, name: str, t: Any = None) -> Exception:
    """Mark ``exc`` as the error of ``Suspend`` field ``name``, for ``transform_error``."""
    exc.__notes__ = [  # type: ignore[attr-defined]
        *getattr(exc, "__notes__", []),
        AttributeValidationNote(f"Structuring class Suspend @ attribute {name}", name, t),
    ]
    return exc


# -- the converter ---------------------------------------------------------------------------


def _resolve_model_types() -> None:
    """Resolve the string annotations cattrs reads (``RetryPolicy`` is a forward reference)."""
    namespace = {**vars(_model), "RetryPolicy": RetryPolicy}
    for obj in list(vars(_model).values()):
        if isinstance(obj, type) and attrs.has(obj):
            attrs.resolve_types(obj, globalns=namespace)
    attrs.resolve_types(RetryPolicy)


def make_converter(*, detailed_validation: bool = False) -> OrjsonConverter:
    """A new converter for every prana record (``dumps``/``loads`` use a cached one).

    ``detailed_validation`` collects every error with its path (slower; ``loads`` uses it
    only to explain a record that failed).
    """
    _resolve_model_types()
    conv = _make_orjson_converter(detailed_validation=detailed_validation, forbid_extra_keys=True)
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook(bool, _structure_bool)
    conv.register_structure_hook(datetime, _structure_datetime)
    conv.register_unstructure_hook_func(lambda t: t is Any, lambda v: v)

    # Code is written by name and never read back as code (definitions are data).
    conv.register_unstructure_hook_func(
        lambda t: (
            _class_slot(t) is not None
            or _is_callable_slot(t)
            or (isinstance(t, type) and issubclass(t, type | types.FunctionType))
        ),
        _name_of,
    )
    conv.register_unstructure_hook(types.BuiltinFunctionType, _name_of)
    conv.register_structure_hook_func(lambda t: _class_slot(t) is not None, _no_code)
    conv.register_structure_hook_func(_is_callable_slot, _no_code)
    conv.register_structure_hook_factory(_is_ref_union, lambda t: _structure_ref_union(conv, t))
    conv.register_unstructure_hook_factory(_is_ref_union, lambda _: _unstructure_ref_union(conv))

    policies = _structure_policies(conv)
    policy_slots = (tuple[RetryPolicy, ...], tuple[RetryPolicy, ...] | None)
    conv.register_structure_hook_func(lambda t: t in policy_slots, policies)

    conv.register_structure_hook_factory(attrs.has, _attrs_structure_factory(conv))
    conv.register_unstructure_hook(Suspend, _unstructure_suspend(conv))
    conv.register_structure_hook(Suspend, _structure_suspend(conv))
    # A webhook token's plaintext is never written (only its digest), nor read back; unset
    # fields are left out, so a wait without a token reads and writes as before tokens.
    conv.register_unstructure_hook(
        WebhookData,
        make_dict_unstructure_fn(
            WebhookData, conv, _cattrs_omit_if_default=True, token=override(omit=True)
        ),
    )
    conv.register_structure_hook(
        WebhookData,
        make_dict_structure_fn(
            WebhookData,
            conv,
            _cattrs_forbid_extra_keys=True,
            _cattrs_detailed_validation=detailed_validation,
            token=override(omit=True),
        ),
    )
    # ``redrive`` is written only when set, so a policy's retry reads and writes as before.
    conv.register_unstructure_hook(
        RetryData,
        make_dict_unstructure_fn(RetryData, conv, redrive=override(omit_if_default=True)),
    )
    return conv


# -- errors ------------------------------------------------------------------------------------


def _format_exception(exc: BaseException, t: Any) -> str:
    """One problem's message: our own errors as they are, cattrs' with their detail."""
    if isinstance(exc, FieldError | PranaError):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required field missing"
    if typing.get_origin(t) is Literal:
        return f"expected one of {', '.join(map(repr, typing.get_args(t)))}"
    base = _cattrs_format_exception(exc, t)
    detail = str(exc)
    if detail and not isinstance(exc, ForbiddenExtraKeysError) and detail not in base:
        return f"{base} ({detail})"
    return base


def _problems(exc: BaseException, path: str) -> list[str]:
    """``path: message`` lines for a structuring failure (cattrs writes ``message @ path``)."""
    lines = transform_error(exc, path, _format_exception)
    out = []
    for line in lines:
        message, sep, where = line.rpartition(" @ ")
        out.append(f"{where}: {message}" if sep else line)
    return out


_FAST: OrjsonConverter | None = None
_DETAILED: OrjsonConverter | None = None


def _fast() -> OrjsonConverter:
    """The cached converter (``loads`` tries it first)."""
    global _FAST
    if _FAST is None:
        _FAST = make_converter()
    return _FAST


def _detailed() -> OrjsonConverter:
    """The cached converter that explains failures (``detailed_validation``)."""
    global _DETAILED
    if _DETAILED is None:
        _DETAILED = make_converter(detailed_validation=True)
    return _DETAILED


def _structure(obj: Any, cl: type[T], path: str, what: str, found: list[str] | None = None) -> T:
    """Structure fast; on failure, explain with the detailed converter.

    ``found`` are problems already met (``named_runs``): with any, the record is refused.
    """
    if not found:
        try:
            return _fast().structure(obj, cl)
        except Exception:  # noqa: BLE001, S110 - any failure is explained just below
            pass
    problems = list(found or ())
    try:
        value = _detailed().structure(obj, cl)
    except (ClassValidationError, IterableValidationError) as exc:
        problems += _problems(exc, path)
    except Exception as exc:  # noqa: BLE001 - a hook's own error, reported with its path
        problems.append(f"{path}: {_format_exception(exc, cl)}")
    else:
        if not problems:
            return value
    raise RecordError(f"cannot read the {what}", problems) from None


_CODEC: tuple[Callable[[Any], dict[str, Any]], Callable[[Any, Any], Any]] | None = None


def _codec() -> tuple[Callable[[Any], dict[str, Any]], Callable[[Any, Any], Any]]:
    """The cached ``(write, read)`` of an execution body (``prana._compact``)."""
    global _CODEC
    if _CODEC is None:
        _CODEC = gen_execution_codec(_fast())
    return _CODEC


def _structure_execution(body: Any, path: str, what: str) -> WorkflowExecution:
    """Read an execution body; a bad one raises ``RecordError``.

    The generated reader reads it; anything it does not expect takes the slow path: runs
    rewritten as objects of named fields, which the detailed converter reads and explains.
    """
    try:
        return _codec()[1](body, None)  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001, S110 - any failure is explained just below
        pass
    found: list[str] = []
    if isinstance(body, dict) and "node_executions" in body:
        runs, found = named_runs(body["node_executions"], f"{path}.node_executions")
        body = {**body, "node_executions": runs}
    return _structure(body, WorkflowExecution, path, what, found)


def _parse(data: str | bytes | bytearray | memoryview, what: str) -> Any:
    """Parse JSON text or bytes, or raise ``RecordError``."""
    if not isinstance(data, str | bytes | bytearray | memoryview):
        raise RecordError(
            f"cannot read the {what}: expected JSON text or bytes, got {type(data).__name__}"
        )
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        looks_like_yaml = what == "workflow" and not _text(data).lstrip().startswith(("{", "["))
        hint = _YAML_HINT if looks_like_yaml else ""
        raise RecordError(f"cannot read the {what}: not valid JSON ({exc}){hint}") from None


_YAML_HINT = "; for YAML text, parse it first: loads_workflow(yaml.safe_load(text))"


def _text(data: str | bytes | bytearray | memoryview) -> str:
    """The start of ``data`` as text, for a hint (undecodable bytes replaced)."""
    head = data[:64]
    return head if isinstance(head, str) else bytes(head).decode("utf-8", "replace")


def _open_envelope(doc: Any, key: str, what: str) -> Any:
    """Check ``{"schema_version": 1, key: ...}`` and return the body."""
    if not isinstance(doc, dict):
        raise RecordError(
            f"cannot read the {what}: expected a JSON object with schema_version and {key}",
            [f"$: got {type(doc).__name__}"],
        )
    version = doc.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        found = "missing" if "schema_version" not in doc else f"{version!r}"
        if type(version) is int and version > SCHEMA_VERSION:
            fix = "written by a newer prana: upgrade prana-workflows to read it"
        elif what == "workflow":
            fix = "set it to 1, or leave schema_version out"
        else:
            fix = f"not written by this prana's dumps: write the {what} again with it"
        raise RecordError(
            f"cannot read the {what}: unsupported schema version",
            [f"$.schema_version: {found}; this prana reads version {SCHEMA_VERSION} only ({fix})"],
        )
    extra = set(doc) - {"schema_version", key}
    if key not in doc or extra:
        problems = [f"$.{key}: required field missing"] if key not in doc else []
        problems += [f"$.{k}: unknown field" for k in sorted(extra)]
        raise RecordError(f"cannot read the {what}", problems)
    return doc[key]


def _encode(body: Any, what: str, option: int = 0) -> str:
    """Write JSON text, or raise ``RecordError`` for data that is not JSON-native."""
    try:
        return orjson.dumps(body, option=option).decode()
    except orjson.JSONEncodeError as exc:
        raise RecordError(
            f"cannot write the {what} as JSON ({exc}); outputs, params and state must be "
            "JSON-native (str-keyed dicts, lists, str, int, float, bool, None)"
        ) from None


# -- public API ----------------------------------------------------------------------------------


def dumps(execution: WorkflowExecution) -> str:
    """Serialize an execution to JSON text: ``{"schema_version": 1, "execution": {...}}``.

    Raises ``RecordError`` if something in it would not read back equal: data that is not
    JSON-native, or a built-in suspension kind without its typed data.
    """
    if not isinstance(execution, WorkflowExecution):
        raise RecordError(
            f"dumps() takes a prana.WorkflowExecution, got {type(execution).__name__} "
            "(use dumps_workflow for a Workflow)"
        )
    for value in (execution.started_at, execution.updated_at, execution.completed_at):
        # A datetime in UTC (what the clocks give) is aware: the usual times skip is_aware.
        if value is not None and (value.__class__ is not datetime or value.tzinfo is not UTC):
            _check_times(execution)
            break
    body = _codec()[0](execution)
    return _encode(
        {"schema_version": SCHEMA_VERSION, "execution": body}, "execution", orjson.OPT_UTC_Z
    )


def _check_times(execution: WorkflowExecution) -> None:
    """``RecordError`` for an execution time that is not an aware datetime."""
    for field in ("started_at", "updated_at", "completed_at"):
        value = getattr(execution, field)
        if value is not None and not is_aware(value):
            raise RecordError(
                f"$.execution.{field}: {value!r} is not an aware datetime; it would not read "
                "back (executions keep aware datetimes: check the clock you pass)"
            )


def loads(text: str | bytes | bytearray | memoryview) -> WorkflowExecution:
    """Read an execution written by ``dumps``.

    Invalid JSON, another schema version or a record that does not structure raises
    ``RecordError``, whose ``problems`` name each bad field (``$.execution.status: ...``).
    """
    body = _open_envelope(_parse(text, "execution"), "execution", "execution")
    DATETIMES.clear()
    return _structure_execution(body, "$.execution", "execution")


def dumps_workflow(workflow: Workflow, *, registry: Registry | None = None) -> str:
    """Serialize a workflow definition to JSON text: ``{"schema_version": 1, "workflow": {...}}``.

    A callable in a policy is written as the name it is registered under
    (``registry.condition``): on ``registry`` if given, else on any registry of this
    process. An unregistered one raises ``InvalidSettingsError`` naming the field and how
    to register it. Exception classes are written as their names.
    """
    if not isinstance(workflow, Workflow):
        raise RecordError(
            f"dumps_workflow() takes a prana.Workflow, got {type(workflow).__name__} "
            "(use dumps for a WorkflowExecution)"
        )
    token = _DUMPS_REGISTRY.set(registry)
    try:
        body = _fast().unstructure(workflow, Workflow)
    except InvalidSettingsError:
        problems = list(_find_bad_refs(workflow, "$.workflow"))
        if not problems:
            raise
        raise InvalidSettingsError(
            "cannot serialize the workflow:\n" + "\n".join(f"  - {p}" for p in problems)
        ) from None
    finally:
        _DUMPS_REGISTRY.reset(token)
    return _encode({"schema_version": SCHEMA_VERSION, "workflow": body}, "workflow")


def loads_workflow(data: str | bytes | bytearray | memoryview | Mapping[str, Any]) -> Workflow:
    """Read a workflow from JSON text or bytes, or from a mapping (e.g. parsed YAML).

    The mapping may be the envelope ``dumps_workflow`` writes or the bare workflow; omitted
    fields take their defaults. A bad definition raises ``RecordError`` naming each field.
    """
    doc = data if isinstance(data, Mapping) else _parse(data, "workflow")
    if isinstance(doc, Mapping) and "schema_version" in doc:
        doc = _open_envelope(dict(doc), "workflow", "workflow")
        path = "$.workflow"
    else:
        path = "$"
    if not isinstance(doc, Mapping):
        raise RecordError(
            "cannot read the workflow", [f"{path}: expected an object, got {type(doc).__name__}"]
        )
    return _structure(doc, Workflow, path, "workflow")


def dumps_outcome(outcome: Outcome) -> str:
    """Serialize an outcome (``Completed``, ``Suspend`` with its execution, ``Failed``)."""
    conv = _fast()
    tag = _OUTCOME_TAGS.get(type(outcome))
    if tag is None or outcome.execution is None:
        raise RecordError(f"dumps_outcome: expected an executor outcome, got {outcome!r}")
    body: dict[str, Any] = {"type": tag}
    if isinstance(outcome, Suspend):
        body.update(conv.unstructure(outcome, Suspend))
    elif isinstance(outcome, Completed):
        body["output"] = outcome.output
    else:
        body["error"] = conv.unstructure(outcome.error, ErrorInfo)
    body["execution"] = _codec()[0](outcome.execution)
    return _encode({"schema_version": SCHEMA_VERSION, "outcome": body}, "outcome", orjson.OPT_UTC_Z)


def loads_outcome(text: str | bytes | bytearray | memoryview) -> Outcome:
    """Read an outcome written by ``dumps_outcome``."""
    body = _open_envelope(_parse(text, "outcome"), "outcome", "outcome")
    if not isinstance(body, dict):
        raise RecordError("cannot read the outcome", ["$.outcome: expected an object"])
    tags = {"completed": {"output"}, "suspended": {"kind", "data"}, "failed": {"error"}}
    tag = body.get("type")
    if tag not in tags:
        raise RecordError(
            "cannot read the outcome",
            [f"$.outcome.type: expected one of {', '.join(tags)}, got {tag!r}"],
        )
    expected = tags[tag] | {"type", "execution"}
    problems = [f"$.outcome.{k}: unknown field" for k in sorted(set(body) - expected)]
    problems += [f"$.outcome.{k}: required field missing" for k in sorted(expected - set(body))]
    if problems:
        raise RecordError("cannot read the outcome", problems)
    DATETIMES.clear()
    execution = _structure_execution(body["execution"], "$.outcome.execution", "outcome")
    if tag == "completed":
        return Completed(execution=execution, output=body["output"])
    if tag == "failed":
        error = _structure(body["error"], ErrorInfo, "$.outcome.error", "outcome")
        return Failed(execution=execution, error=error)
    suspend = _structure(
        {"kind": body["kind"], "data": body["data"]}, Suspend, "$.outcome", "outcome"
    )
    return Suspend(suspend.kind, suspend.data, execution)


def _find_bad_refs(obj: Any, path: str) -> list[str]:
    """Every class or callable under ``obj`` that cannot be stored by reference, with its path."""
    if attrs.has(type(obj)):
        return [
            p
            for a in attrs.fields(type(obj))
            for p in _find_bad_refs(getattr(obj, a.name), f"{path}.{a.name}")
        ]
    if isinstance(obj, list | tuple):
        return [p for i, item in enumerate(obj) for p in _find_bad_refs(item, f"{path}[{i}]")]
    if isinstance(obj, Mapping):
        return [p for k, v in obj.items() for p in _find_bad_refs(v, f"{path}[{k!r}]")]
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, str)):
        try:
            _name_of(obj)
        except InvalidSettingsError as exc:
            return [f"{path}: {exc}"]
    return []
