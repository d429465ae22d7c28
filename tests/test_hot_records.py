"""The hot records keep their fast paths, and generated code shows up in tracebacks."""

from __future__ import annotations

import inspect
import traceback
from typing import Any

import attrs
import pytest

from prana import ErrorInfo, make_converter
from prana._fast_hooks import HOT, READ_HOT, gen_fast_hooks
from prana._model import HOT_RECORDS, hot_record_problems


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


def test_serialization_hot_records_are_hot_records() -> None:
    """Every record with generated serialization hooks is under the hot-record rules."""
    assert set(HOT) | set(READ_HOT) <= set(HOT_RECORDS)


@pytest.mark.parametrize("cls", HOT, ids=lambda c: c.__name__)
def test_hot_records_get_the_generated_hooks(cls: type[Any]) -> None:
    """The tuned converter reads and writes each hot record through generated code."""
    conv = make_converter()
    for hook in (conv.get_structure_hook(cls), conv.get_unstructure_hook(cls)):
        assert hook.__code__.co_filename.startswith("<prana generated ")


@pytest.mark.parametrize("cls", READ_HOT, ids=lambda c: c.__name__)
def test_read_hot_records_are_read_by_generated_code_and_written_by_cattrs(
    cls: type[Any],
) -> None:
    """A ``READ_HOT`` record is read through generated code; its writer stays cattrs' (with
    its overrides: a false ``RetryData.redrive`` is left out)."""
    conv = make_converter()
    assert conv.get_structure_hook(cls).__code__.co_filename.startswith("<prana generated ")
    writer = conv.get_unstructure_hook(cls)
    assert writer.__code__.co_filename.startswith("<cattrs generated unstructure")


@pytest.mark.parametrize("cls", [*HOT, *READ_HOT], ids=lambda c: c.__name__)
def test_generated_readers_build_through_the_twin(cls: type[Any]) -> None:
    """Each generated dict reader fills a hot record's slot twin and gives it its class at the
    end (a plain store per field, not a call of the frozen slot's descriptor)."""
    structure = gen_fast_hooks(make_converter(), cls)[1]
    source = inspect.getsource(structure)
    assert "o = _twin()" in source
    assert "o.__class__ = _cl" in source
    assert "_set_" not in source


def test_a_generated_reader_without_a_twin_sets_the_slots() -> None:
    """A record CPython refuses a twin (a weakref slot) is read through its slots' setters,
    to the record its constructor builds."""

    @attrs.frozen(kw_only=True)
    class Weak:
        number: int
        name: str = "x"

    attrs.resolve_types(Weak)
    assert hot_record_problems(Weak) != []
    structure = gen_fast_hooks(make_converter(), Weak)[1]
    assert "_twin()" not in inspect.getsource(structure)
    assert structure({"number": 1}, None) == Weak(number=1)
    assert structure({"number": 2, "name": "y"}, None) == Weak(number=2, name="y")


def test_a_traceback_through_generated_code_shows_its_line() -> None:
    """Generated hooks are registered with linecache: a traceback prints their source line."""
    structure = make_converter().get_structure_hook(ErrorInfo)
    with pytest.raises(Exception) as caught:
        structure({"code": "x"}, ErrorInfo)
    text = "".join(traceback.format_exception(caught.value))
    assert "<prana generated fast hooks ErrorInfo #" in text
    assert "v = d['type']" in text


def test_generated_functions_have_distinct_file_names() -> None:
    """Each generated function has its own file name, so linecache never mixes sources."""
    conv = make_converter()
    names = {fn.__code__.co_filename for fn in HOT_RECORDS.values()}
    names |= {conv.get_structure_hook(cls).__code__.co_filename for cls in (*HOT, *READ_HOT)}
    assert len(names) == len(HOT_RECORDS) + len(HOT) + len(READ_HOT)
