"""The hot records keep their fast paths, and generated code shows up in tracebacks."""

from __future__ import annotations

import inspect
import traceback
from typing import Any

import attrs
import pytest
from doubles import T0

from prana import (
    Activation,
    AttemptOutcome,
    ErrorInfo,
    RetryData,
    WorkflowExecution,
    make_converter,
)
from prana._decision import FAST_BUILT
from prana._fast_hooks import gen_fast_hooks
from prana._model import HOT_RECORDS, AttemptRecord, _fast_constructor, hot_record_problems


@pytest.mark.parametrize("cls", list(HOT_RECORDS), ids=lambda c: c.__name__)
def test_every_hot_record_keeps_the_rules(cls: type[Any]) -> None:
    """No validator, converter, post-init hook or weakref slot: the fast paths still apply."""
    assert hot_record_problems(cls) == []


def test_the_rule_check_catches_a_validator_and_a_weakref_slot() -> None:
    """A record shaped like a hot one but with a validator (or a weakref slot) is caught."""

    @attrs.frozen(kw_only=True, weakref_slot=False)
    class Checked:
        number: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.frozen(kw_only=True)
    class Weak:
        number: int

    @attrs.frozen(kw_only=True, weakref_slot=False)
    class PostInit:
        number: int

        def __attrs_post_init__(self) -> None:
            pass

    assert hot_record_problems(Checked) == ["field 'number' has a validator"]
    assert hot_record_problems(Weak) == ["it has a __weakref__ slot (use weakref_slot=False)"]
    assert hot_record_problems(PostInit) == ["it defines __attrs_post_init__"]


@pytest.mark.parametrize("cls", list(HOT_RECORDS), ids=lambda c: c.__name__)
def test_fast_constructors_take_the_fields_in_order_through_the_twin(cls: type[Any]) -> None:
    """Each fast constructor fills the fields positionally and builds through the slot twin."""
    build = HOT_RECORDS[cls]
    names = [a.name for a in attrs.fields(cls)]
    values = [f"v{i}" for i in range(len(names))]
    record = build(*values)
    assert type(record) is cls
    assert [getattr(record, n) for n in names] == values
    assert "_twin()" in inspect.getsource(build)


def test_the_generated_body_reader_builds_through_the_twin() -> None:
    """The execution body's generated reader fills its slot twin and gives it its class at
    the end (a plain store per field, not a call of the frozen slot's descriptor)."""
    assert WorkflowExecution in HOT_RECORDS
    structure = gen_fast_hooks(make_converter(), WorkflowExecution)[1]
    source = inspect.getsource(structure)
    assert "o = _twin()" in source
    assert "o.__class__ = _cl" in source
    assert "_set_" not in source


@pytest.mark.parametrize("cls", [ErrorInfo, RetryData, Activation], ids=lambda c: c.__name__)
def test_other_records_take_cattrs_own_hooks(cls: type[Any]) -> None:
    """Records but the execution body and its runs go through cattrs' generated hooks
    (generated ones of our own saved under 3% on their bench rows, so they went)."""
    conv = make_converter()
    assert conv.get_structure_hook(cls).__code__.co_filename.startswith("<cattrs generated")


def test_a_generated_reader_refuses_a_record_without_a_twin() -> None:
    """A record CPython refuses a twin (a weakref slot) gets no generated reader: its
    rules are broken, and a reader through the slots' setters would be a second path."""

    @attrs.frozen(kw_only=True)
    class Weak:
        number: int

    attrs.resolve_types(Weak)
    assert hot_record_problems(Weak) != []
    with pytest.raises(TypeError, match="no slot twin"):
        gen_fast_hooks(make_converter(), Weak)


def test_a_traceback_through_generated_code_shows_its_line() -> None:
    """Generated hooks are registered with linecache: a traceback prints their source line."""
    structure = gen_fast_hooks(make_converter(), ErrorInfo)[1]
    with pytest.raises(Exception) as caught:
        structure({"code": "x"}, ErrorInfo)
    text = "".join(traceback.format_exception(caught.value))
    assert "<prana generated fast hooks ErrorInfo #" in text
    assert "v = d['type']" in text


def test_generated_functions_have_distinct_file_names() -> None:
    """Each generated function has its own file name, so linecache never mixes sources."""
    conv = make_converter()
    names = {fn.__code__.co_filename for fn in HOT_RECORDS.values()}
    names.add(gen_fast_hooks(conv, WorkflowExecution)[1].__code__.co_filename)
    assert len(names) == len(HOT_RECORDS) + 1


def _defaults(cls: type[Any]) -> tuple[list[str], dict[str, Any]]:
    """The fields ``cls`` requires, and the values attrs gives the trailing defaulted ones."""
    fields = attrs.fields(cls)
    required = len(fields)
    while required and fields[required - 1].default is not attrs.NOTHING:
        required -= 1
    defaults = {}
    for a in fields[required:]:
        default = a.default
        defaults[a.name] = default.factory() if isinstance(default, attrs.Factory) else default  # type: ignore[arg-type]
    return [a.name for a in fields[:required]], defaults


@pytest.mark.parametrize("cls", [*HOT_RECORDS, *FAST_BUILT], ids=lambda c: c.__name__)
def test_fast_constructors_give_the_defaults_attrs_gives(cls: type[Any]) -> None:
    """Each fast constructor may leave out the trailing defaulted fields, as ``__init__``
    may, and fills them with attrs' defaults (a factory's value a new one each time)."""
    build = HOT_RECORDS.get(cls) or FAST_BUILT[cls]
    required, defaults = _defaults(cls)
    params = inspect.signature(build).parameters
    assert list(params) == [a.name for a in attrs.fields(cls)]
    record = build(*(f"v{i}" for i in range(len(required))))
    assert {name: getattr(record, name) for name in defaults} == defaults
    for name in defaults:
        if isinstance(attrs.fields_dict(cls)[name].default, attrs.Factory):  # type: ignore[arg-type]
            again = build(*(f"v{i}" for i in range(len(required))))
            assert getattr(again, name) is not getattr(record, name)


def test_a_hot_record_grown_by_a_trailing_field_keeps_its_callers() -> None:
    """A field added at the end with a default, as the hot-record rule says: every call of
    the fast constructor made before still builds the record, with the default in it."""
    fields = {a.name: attrs.field(default=a.default) for a in attrs.fields(AttemptRecord)}
    grown = attrs.make_class(
        "GrownAttemptRecord",
        {**fields, "tries": attrs.field(default=3), "notes": attrs.field(factory=list)},
        frozen=True,
        slots=True,
        kw_only=True,
        weakref_slot=False,
    )
    assert hot_record_problems(grown) == []
    args = (1, T0, T0, AttemptOutcome.FAILED, None, None, 250, False)
    record = _fast_constructor(grown)(*args)
    assert record == grown(
        **dict(zip([a.name for a in attrs.fields(AttemptRecord)], args, strict=True))
    )
    assert (record.tries, record.notes) == (3, [])
