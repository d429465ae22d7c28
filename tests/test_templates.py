"""Templates in params: native types, text rendering, scope roots, the sandbox and errors."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import pickle
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs
import pytest
from doubles import T0, conn, detail, if_node, trigger, value_node, workflow
from hypothesis import given
from hypothesis import strategies as st
from strategies import plain_text

from prana import (
    Completed,
    Connection,
    ExecutionStatus,
    Failed,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    WebhookData,
    Workflow,
    dumps,
    execute_workflow,
)
from prana._hooks import REDACTED, parse_token
from prana._template_compile import compile_string
from prana._templates import (
    CompiledParams,
    TemplateError,
    compile_params,
    evaluate,
)
from prana.testing import ManualClock
from scheduling import HookNotFound, Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class LazyNodes(Mapping[str, Any]):
    """A read-only mapping like the executor's lazy ``$nodes`` view."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def make_scope(**overrides: Any) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "input": {
            "main": {
                "count": 3,
                "user": {"id": 7, "name": "Ada"},
                "tags": ["a", "b"],
                "items": [10, 20, 30],
                "key with space": "spaced",
                "nothing": None,
            },
            "other": [1, 2],
        },
        "nodes": {
            "fetch": {"output": {"id": 42}, "port": "main", "status": "completed", "run_index": 0},
            "my-node": {"output": "dashed", "port": "main", "status": "completed", "run_index": 1},
        },
        "vars": {"base_url": "https://api.example.com"},
        "env": {"TOKEN": "s3cret"},
        "execution": {
            "id": "exec-1",
            "state": {"counter": 5},
            "run_index": 2,
            "attempt": 1,
            "workflow_id": "wf",
        },
        "workflow": {"id": "wf", "name": "Demo", "version": 3},
        "now": NOW,
    }
    scope.update(overrides)
    return scope


def render(params: Any, scope: Mapping[str, Any] | None = None) -> Any:
    compiled = compile_params(params)
    assert compiled is not None
    return compiled.render(make_scope() if scope is None else scope)


def render_one(text: str, scope: Mapping[str, Any] | None = None) -> Any:
    return render({"p": text}, scope)["p"]


def error_of(params: Any, scope: Mapping[str, Any] | None = None) -> TemplateError:
    with pytest.raises(TemplateError) as info:
        render(params, scope)
    return info.value


# --- the fast path -----------------------------------------------------------------------


def test_params_without_templates_compile_to_none() -> None:
    """Params with no ``{{`` anywhere need no rendering, so compile_params returns None."""
    params = {"url": "https://x", "n": 3, "h": {"a": ["b", {"c": None}]}, "s": "{ not }"}
    assert compile_params(params) is None
    assert compile_params({}) is None
    assert compile_params("plain") is None
    assert compile_params(None) is None


def test_a_template_anywhere_makes_params_compiled() -> None:
    """A template deep inside lists and dicts is found."""
    assert isinstance(compile_params({"a": [1, {"b": "{{ $vars.base_url }}"}]}), CompiledParams)


# --- native types and text ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ $input.main.count }}", 3),
        ("  {{ $input.main.count }}  ", 3),
        ("{{$input.main.count}}", 3),
        ("{{- $input.main.count -}}", 3),
        ("{{ $input.main.user }}", {"id": 7, "name": "Ada"}),
        ("{{ $input.main.tags }}", ["a", "b"]),
        ("{{ $input.main.nothing }}", None),
        ("{{ $input.main.count > 2 }}", True),
        ("{{ $input.main.count * 1.5 }}", 4.5),
        ("{{ $input.main.tags | length }}", 2),
        ("{{ [1, 2] + [3] }}", [1, 2, 3]),
        ("{{ -1 }}", -1),
    ],
)
def test_single_expression_keeps_native_type(text: str, expected: Any) -> None:
    """A string that is exactly one expression evaluates to the value itself, not its text."""
    result = render_one(text)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n={{ $input.main.count }}", "n=3"),
        ("{{ $input.main.count }}{{ $input.main.count }}", "33"),
        ("{{ $vars.base_url }}/users/{{ $input.main.user.id }}", "https://api.example.com/users/7"),
        ("x{{ $input.main.nothing }}y", "xy"),
        ("flag={{ $input.main.count > 2 }}", "flag=true"),
        ("flag={{ $input.main.count > 5 }}", "flag=false"),
        ("user={{ $input.main.user }}", 'user={"id":7,"name":"Ada"}'),
        ("at {{ $now }}", "at 2030-01-02T03:04:05+00:00"),
        ("{% if $input.main.count > 2 %}big{% else %}small{% endif %}", "big"),
        ("{% for t in $input.main.tags %}{{ loop.index }}{{ t }}{% endfor %}", "1a2b"),
        ("{{ $input.main.count }} {# a comment #}", "3 "),
    ],
)
def test_mixed_text_renders_a_string(text: str, expected: str) -> None:
    """Text mixed with expressions renders to a string, with JSON-minded value formatting."""
    assert render_one(text) == expected


def test_statement_only_template_renders_a_string() -> None:
    """A ``{% %}`` block alone is a template too, and renders as text."""
    assert render_one("{% if true %}yes{% endif %}") == "yes"


# --- scope roots -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ $input.main.user.id }}", 7),
        ("{{ $input.other[1] }}", 2),
        ("{{ $nodes.fetch.output.id }}", 42),
        ("{{ $nodes.fetch.status }}", "completed"),
        ("{{ $vars.base_url }}", "https://api.example.com"),
        ("{{ $env.TOKEN }}", "s3cret"),
        ("{{ $execution.state.counter }}", 5),
        ("{{ $execution.run_index }}", 2),
        ("{{ $execution.attempt }}", 1),
        ("{{ $execution.id }}", "exec-1"),
        ("{{ $workflow.name }}", "Demo"),
        ("{{ $workflow.version }}", 3),
        ("{{ $now }}", NOW),
        ("{{ $now.year }}", 2030),
    ],
)
def test_every_scope_root_is_reachable(text: str, expected: Any) -> None:
    """Each root the executor passes is readable with its ``$`` name."""
    assert render_one(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{{ $nodes["my-node"].output }}', "dashed"),
        ("{{ $nodes['my-node'].output }}", "dashed"),
        ('{{ $input.main["key with space"] }}', "spaced"),
        ('{{ $input["main"]["user"]["name"] }}', "Ada"),
        ("{{ $input.main.items[2] }}", 30),
        ("{{ $input.main.tags[0] }}", "a"),
        ("{{ $input.main.items[-1] }}", 30),
    ],
)
def test_item_access(text: str, expected: Any) -> None:
    """Brackets reach keys that are not identifiers, and list items by index."""
    assert render_one(text) == expected


def test_dict_keys_win_over_dict_methods() -> None:
    """``.items`` on data with a key "items" reads the key, not the dict method."""
    assert render_one("{{ $input.main.items }}") == [10, 20, 30]
    assert render_one("{{ $input.main.items | sum }}") == 60


def test_dict_methods_remain_callable_when_no_key_shadows_them() -> None:
    """Read-only dict methods still work for loops over keys and values."""
    text = "{% for k, v in $input.main.user.items() %}{{ k }}={{ v }};{% endfor %}"
    assert render_one(text) == "id=7;name=Ada;"


@pytest.mark.parametrize(
    "text",
    [
        "{{ $input.main.user.name.upper }}",
        "{{ $input.main.tags.count }}",
        "{{ range }}",
        "{{ dict }}",
        "{{ joiner() }}",
        "{{ $input.main.tags | map('upper') }}",
        "tags: {{ $input.main.tags | select }}",
        "{{ $input.main.tags | reverse }}",
        "{{ $input.main.tags | batch(1) }}",
        "{{ cycler(1, 2) }}",
    ],
)
def test_a_method_function_or_iterator_is_not_a_value(text: str) -> None:
    """Was: the value was the method or generator itself, passed to the action and recorded
    as its repr with a memory address (``<built-in method items of dict object at
    0x7f...>``, ``<generator object sync_do_map at 0x7f...>``), different on each run; now
    it is an error that says to call it, to name a key that is there or to add ``| list``."""
    error = error_of({"p": text})
    assert error.path == "p"
    assert "not data: " in error.message
    assert "0x" not in error.message


@pytest.mark.parametrize(
    "text",
    [
        "{{ $input.main.user.items }}",
        "{{ $input.main.user.keys }}",
        "name: {{ $input.main.user.get }}",
        "{{ $input.main.user['values'] }}",
    ],
)
def test_a_missing_key_named_like_a_dict_method_is_undefined(text: str) -> None:
    """Was: the name found the dict's method, and the error ("the value is the method 'items'
    of a dict, not data") listed no keys; now it is a missing key like any other."""
    error = error_of({"p": text})
    assert error.message.startswith("undefined: no key '")
    assert "here; the keys are: id, name (" in error.message
    assert "() calls the dict's method" in error.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ $input.main.user.items | default([]) }}", []),
        ("{{ $input.main.user['keys'] | default('none') }}", "none"),
        ("{{ $input.main.user.get is defined }}", False),
        ("{% if $input.main.user.values is defined %}yes{% else %}no{% endif %}", "no"),
        ("{{ $input.main.items | default([]) }}", [10, 20, 30]),
        ("{{ $input.main.user.items() | list | length }}", 2),
        ("{{ $input.main.user.get('name') }}", "Ada"),
        ("{{ $input.main.user.update | default(false) }}", False),
        ("{{ $input.main.user['pop'] is defined }}", False),
    ],
)
def test_default_and_is_defined_see_a_missing_key_named_like_a_dict_method(
    text: str, expected: Any
) -> None:
    """The docs' way to read an optional value works for a key named like a dict method (was:
    ``| default`` gave the method, then "not data", and ``is defined`` was true); calling the
    method still works."""
    assert render_one(text) == expected


def test_a_dict_method_the_sandbox_blocks_stays_blocked() -> None:
    """``.update`` on data without that key is undefined, and calling it is still refused."""
    message = error_of({"p": "{{ $input.main.user.update }}"}).message
    assert message == "undefined: no key 'update' here; the keys are: id, name"
    assert "blocked by the template sandbox: access to attribute 'update'" in (
        error_of({"p": "{{ $input.main.user.update({'id': 1}) }}"}).message
    )


def test_a_lazy_mappings_methods_are_callable_and_its_missing_keys_undefined() -> None:
    """The same for a mapping that is not a dict (the executor's lazy ``$nodes``)."""
    scope = make_scope(nodes=LazyNodes({"fetch": {"output": {"id": 42}}}))
    assert render_one("{{ $nodes.keys() | list }}", scope) == ["fetch"]
    assert render_one("{{ $nodes.items | default(0) }}", scope) == 0
    assert (
        "no key 'items' here; the keys are: fetch"
        in error_of({"p": "{{ $nodes.items }}"}, scope).message
    )


@pytest.mark.parametrize(
    "text",
    [
        "{{ [$input.main.missing] }}",
        "{{ {'name': $input.main.user.nmae} }}",
        "{{ [1, {'deep': [$input.main.missing]}] }}",
        "{{ $input.main.users | map(attribute='emial') | list }}",
        "{{ ($input.main.missing, 1) }}",
        "list: {{ [$input.main.missing] }}",
    ],
)
def test_a_missing_key_inside_a_list_or_dict_the_template_builds_is_undefined(text: str) -> None:
    """Was: the action got ``Undefined`` objects in its params, and the record the text
    "Undefined" (a typo in ``map(attribute=...)`` gave a list of them), the node completing."""
    scope = make_scope()
    scope["input"]["main"]["users"] = [{"email": "a@x"}, {"email": "b@x"}]
    error = error_of({"p": text}, scope)
    assert error.message.startswith("undefined: ")


@pytest.mark.parametrize(
    "text",
    [
        "{{ [range] }}",
        "{{ {'f': $input.main.user.name.upper} }}",
        "{{ [[$input.main.tags | map('upper')]] }}",
        "tags: {{ [$input.main.tags | map('upper')] }}",
        "{{ {'f': lipsum} }}",
        "pair: {{ (1, range) }}",
    ],
)
def test_a_method_function_or_iterator_inside_a_list_or_dict_is_not_a_value(text: str) -> None:
    """Was: passed to the action inside the list, and recorded as its repr with a memory
    address; now the same error as at the top (``not data``)."""
    error = error_of({"p": text})
    assert "not data: " in error.message
    assert "0x" not in error.message


def test_lists_and_dicts_of_data_a_template_builds_are_still_values() -> None:
    """Data, datetimes and a list a filter made stay values, nested or not."""
    assert render_one("{{ [$input.main.count, {'u': $input.main.user}, [$now]] }}") == [
        3,
        {"u": {"id": 7, "name": "Ada"}},
        [NOW],
    ]
    assert render_one("{{ {'t': $input.main.tags | map('upper') | list} }}") == {"t": ["A", "B"]}
    assert render_one("x={{ [$input.main.count, $now] }}") == f'x=[3,"{NOW.isoformat()}"]'


def test_what_an_iterator_or_method_gives_is_still_a_value() -> None:
    """Calling the method or listing the iterator gives data, as it did."""
    assert render_one("{{ $input.main.tags | map('upper') | list }}") == ["A", "B"]
    assert render_one("{{ $input.main.tags | reverse | join(',') }}") == "b,a"
    assert render_one("{{ $input.main.user.items() | list }}") == [("id", 7), ("name", "Ada")]
    assert render_one("{% set c = cycler(1, 2) %}{{ c.next() }}{{ c.next() }}") == "12"


@pytest.mark.parametrize(
    "text",
    [
        "{{ $input.main.user.name.upper | string }}",
        "{{ $input.main.user.name.upper ~ '' }}",
        "{{ '%s' % $input.main.user.name.upper }}",
        "{{ '%s and %s' % (1, range) }}",
        "{{ '%(f)s' % {'f': range} }}",
        "{{ $input.main.user.name.upper | pprint }}",
        "{{ '%s' | format($input.main.user.name.upper) }}",
        "{{ [$input.main.user.name.upper] | join(', ') }}",
        "{{ [[range]] | join(', ') }}",
        "{{ ['a', 'b'] | join(range) }}",
        "{{ $input.main.user.name.upper | tojson }}",
        "{{ '{}'.format(range) }}",
        "{{ '{f!r}'.format_map({'f': range}) }}",
        "{{ [range] | string }}",
        "{{ {range: 1} | string }}",
        "{{ {'a': range}.items() | string }}",
        "{{ range | upper }}",
        "{{ range | e }}",
        "{{ {'a': range} | xmlattr }}",
        "{{ $now.replace | string }}",
        "{{ $input.main.tags | map('upper') | string }}",
        "{{ cycler(1, 2) | string }}",
        "{{ [range] | map('string') | list }}",
        "{% set f = range %}{{ f | truncate(9) }}",
        "x {{ namespace(f=range) }}",
        "{{ [1] | map(range) | list }}",
        "{{ [1] | select(range) | list }}",
    ],
)
def test_text_of_a_method_function_or_iterator_is_refused(text: str) -> None:
    """Was: turning one into text explicitly (``| string``, ``~``, ``%``, ``| pprint``,
    ``| format``, ``| join``, ``str.format``, any filter that writes its value) recorded its
    repr, a memory address different on every run (``<built-in method upper of str object
    at 0x7f...>``); ``map(range)`` failed naming it the same way. Now the same error as a
    template whose value is one, saying what to do."""
    error = error_of({"p": text})
    assert "not data: " in error.message
    assert "0x" not in error.message


def test_a_missing_key_inside_a_list_written_as_text_is_undefined() -> None:
    """Was: ``[$input.main.missing] | string`` wrote ``[Undefined]``."""
    message = error_of({"p": "{{ [$input.main.missing] | string }}"}).message
    assert message.startswith("undefined: no key 'missing' here")


def test_an_object_with_the_default_repr_is_not_written_as_text() -> None:
    """An object whose text is Python's default repr (``<object object at 0x...>``) is refused
    where it would be written; its own repr without an address (a namespace) is kept."""
    scope = make_scope(vars={"obj": object()})
    for text in ("{{ $vars.obj | string }}", "x {{ $vars.obj }}", "{{ [$vars.obj] ~ '' }}"):
        message = error_of({"p": text}, scope).message
        assert message.startswith("the value is a object object, not data"), text
        assert "0x" not in message
    assert render_one("{{ namespace(a=1) | string }}") == "<Namespace {'a': 1}>"


@pytest.mark.parametrize("text", ["{{ $input.main.user[range] }}", "{{ $input.main.tags[range] }}"])
def test_a_key_that_is_not_data_is_named_by_its_type(text: str) -> None:
    """Was: the undefined error showed the key's repr, a memory address."""
    message = error_of({"p": text}).message
    assert message.startswith("undefined: ")
    assert "<a function>" in message
    assert "0x" not in message


def test_a_dict_key_that_is_a_function_is_not_a_value() -> None:
    """Was: ``{{ {range: 1} }}`` gave the action a dict keyed by the function."""
    assert "not data: " in error_of({"p": "{{ {range: 1} }}"}).message


_DATA_AS_TEXT = [
    ("'Ada'", "Ada", "'Ada'"),
    ("3", "3", "3"),
    ("2.5", "2.5", "2.5"),
    ("true", "True", "True"),
    ("none", "None", "None"),
    ("[1, 'a', none, [true]]", "[1, 'a', None, [True]]", "[1, 'a', None, [True]]"),
    ("{'a': [1, {'b': none}]}", "{'a': [1, {'b': None}]}", "{'a': [1, {'b': None}]}"),
    ("$now", "2030-01-02 03:04:05+00:00", repr(NOW)),
    ("[$now]", f"[{NOW!r}]", f"[{NOW!r}]"),
    ("(1, 'a')", "(1, 'a')", "(1, 'a')"),
    ("$input.main.user.items()", "dict_items([('id', 7), ('name', 'Ada')])", None),
    ("namespace(a=1)", "<Namespace {'a': 1}>", "<Namespace {'a': 1}>"),
]


@pytest.mark.parametrize(("value", "text", "printed"), _DATA_AS_TEXT)
def test_data_written_as_text_is_unchanged(value: str, text: str, printed: str | None) -> None:
    """Strings, numbers, booleans, None, lists, dicts and datetimes are written as before."""
    assert render_one(f"{{{{ {value} | string }}}}") == text
    assert render_one(f"{{{{ {value} ~ '|' }}}}") == text + "|"
    assert render_one(f"{{{{ '%s' % ({value},) }}}}") == text
    assert render_one(f"{{{{ '%s!' | format({value}) }}}}") == text + "!"
    assert render_one(f"{{{{ '{{}}'.format({value}) }}}}") == text
    assert render_one(f"{{{{ [{value}, {value}] | join(';') }}}}") == f"{text};{text}"
    if printed is not None:
        assert render_one(f"{{{{ {value} | pprint }}}}") == printed


def test_non_dict_mappings_are_read_like_dicts() -> None:
    """A lazy mapping (like the executor's ``$nodes`` view) is read through both paths."""
    scope = make_scope(nodes=LazyNodes({"fetch": {"output": {"id": 42}}}))
    assert render_one("{{ $nodes.fetch.output.id }}", scope) == 42
    assert render_one("id={{ $nodes.fetch.output.id }}", scope) == "id=42"
    assert (
        "no key 'missing' here; the keys are: fetch"
        in error_of({"p": "{{ $nodes.missing }}"}, scope).message
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ $input.main.missing }}", "no key 'missing' here; the keys are: count, user, tags"),
        ("{{ $input.main.missing.deeper.still }}", "no key 'missing'"),
        ("{{ $input.main.items[99] }}", "no item [99]: the list has 3 item(s)"),
        ("[{{ $input.main.missing.deeper }}]", "no key 'missing'"),
        ("{{ $input.main.user.nmae }}", "did you mean 'name'?"),
        ("{{ $input.main.nothing.x }}", "cannot read 'x' of null (None)"),
        ("{{ $input.main['key with spaces'] }}", "did you mean 'key with space'?"),
        ("{{ $input.main.missing + 1 }}", "no key 'missing'"),
        ("{% if $input.main.missing %}x{% endif %}", "no key 'missing'"),
        ("{% for x in $input.main.missing %}x{% endfor %}", "no key 'missing'"),
    ],
)
def test_an_undefined_key_is_an_error_listing_what_is_there(text: str, expected: str) -> None:
    """Strict undefined: a missing key, item or attribute fails, naming what exists instead."""
    error = error_of({"p": text})
    assert error.message.startswith("undefined: ")
    assert expected in error.message


def test_the_nodes_layout_hint_points_at_output() -> None:
    """``$nodes.<key>.amount`` (forgetting ``.output``) says where the value really is."""
    scope = make_scope(
        nodes={
            "validate": {
                "output": {"amount": 12},
                "port": "main",
                "status": "completed",
                "run_index": 0,
            }
        }
    )
    error = error_of({"amount": "{{ $nodes.validate.amount }}"}, scope)
    assert error.path == "amount"
    assert "the keys are: output, port, status, run_index" in error.message
    assert "write .output.amount" in error.message
    assert render_one("{{ $nodes.validate.output.amount }}", scope) == 12


def test_a_forgotten_output_fails_the_node_instead_of_sending_none() -> None:
    """Through the executor, ``$nodes.validate.amount`` fails the payment, never pays None."""
    from prana import Completed, Connection, Failed, Node, Registry, Workflow, execute_workflow

    paid: list[Any] = []
    registry = Registry()
    registry.register("pay.send", lambda params, ctx: paid.append(params["amount"]))
    workflow = Workflow(
        id="pay",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="validate", type="data.set_data", params={"value": {"amount": 12}}),
            Node(key="pay", type="pay.send", params={"amount": "{{ $nodes.validate.amount }}"}),
        ],
        connections=[
            Connection(from_node="start", to_node="validate"),
            Connection(from_node="validate", to_node="pay"),
        ],
    )
    outcome = execute_workflow(workflow, {}, registry=registry)
    assert isinstance(outcome, Failed)
    assert paid == []
    assert outcome.error.code == "template_error"
    assert outcome.error.node_key == "pay"
    assert "params.amount: undefined: no key 'amount' here" in outcome.error.message
    assert "write .output.amount" in outcome.error.message
    fixed = Node(
        key="pay", type="pay.send", params={"amount": "{{ $nodes.validate.output.amount }}"}
    )
    workflow = Workflow(
        id="pay", nodes=[*workflow.nodes[:2], fixed], connections=workflow.connections
    )
    assert isinstance(execute_workflow(workflow, {}, registry=registry), Completed)
    assert paid == [12]


def test_defined_tests_and_default_still_handle_missing_keys() -> None:
    """``is defined`` and ``| default`` are the ways to read an optional key."""
    assert render_one("{{ $input.main.missing is defined }}") is False
    assert render_one("{{ $input.main.count is defined }}") is True
    assert render_one("{{ $input.main.missing | default(7) }}") == 7
    assert render_one("{{ $input.main.get('missing', 'x') }}") == "x"
    assert render_one("[{{ $input.main.missing | default('') }}]") == "[]"
    assert render_one("{{ $input.main.nothing }}") is None


def test_a_root_missing_from_the_scope_is_an_error() -> None:
    """A known root the caller did not pass is undefined, and says so."""
    scope = make_scope()
    del scope["env"]
    assert error_of({"p": "{{ $env.TOKEN }}"}, scope).message == "undefined: $env is undefined"


def test_templates_see_latest_loop_run_workflow_and_run_index(
    registry: Registry, clock: ManualClock
) -> None:
    """After a loop $nodes.x is the latest run; $workflow and $execution.run_index render."""
    wf = Workflow(
        id="t",
        name="named",
        version=3,
        nodes=[
            trigger(),
            Node(
                key="inc",
                type="workflow.set_state",
                params={"state": {"n": "{{ ($execution.state.n | default(0)) + 1 }}"}},
            ),
            value_node("val", "{{ $execution.state.n * 10 }}"),
            if_node("chk", "{{ $execution.state.n < 3 }}"),
            value_node(
                "out",
                {
                    "last": "{{ $nodes.val.output }}",
                    "run": "{{ $nodes.val.run_index }}",
                    "wf": "{{ $workflow }}",
                    "own_run": "{{ $execution.run_index }}",
                    "text": "at {{ $now }}",
                },
            ),
        ],
        connections=[
            conn("start", "inc"),
            conn("inc", "val"),
            conn("val", "chk"),
            conn("chk", "inc", "true"),
            conn("chk", "out", "false"),
        ],
    )
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(outcome, Completed)
    assert outcome.output == {
        "last": 30,
        "run": 2,
        "wf": {"id": "t", "name": "named", "version": 3},
        "own_run": 0,
        "text": f"at {T0.isoformat()}",
    }


def test_now_as_a_value_is_json_native(registry: Registry, clock: ManualClock) -> None:
    """A node can store the current time with value '{{ $now }}'."""
    wf = workflow(value_node("stamp", {"at": "{{ $now }}"}))
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(outcome, Completed)
    assert outcome.output == {"at": T0.isoformat()}


# --- the ``$`` rewrite -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ '$input' }}", "$input"),
        ('{{ "costs $5 for $input.main" }}', "costs $5 for $input.main"),
        ("{{ 'it\\'s $vars' }}", "it's $vars"),
        ('{{ "}} $x {{" }}', "}} $x {{"),
        ("price: $5 {{ $input.main.count }}", "price: $5 3"),
        ("{% raw %}{{ $input }}{% endraw %}", "{{ $input }}"),
        ("{{ $input.main.user.name ~ ' $vars' }}", "Ada $vars"),
    ],
)
def test_dollar_inside_string_literals_and_text_is_untouched(text: str, expected: str) -> None:
    """Only ``$name`` in code is rewritten; quoted literals, plain text and raw blocks keep it."""
    assert render_one(text) == expected


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "x {{ $input.main.__class__ }}",
        "{{ $input.main.tags.append(1) }}",
        "{{ $input.main.user.update({'id': 1}) }}",
        "{{ $now.__class__ }}",
        "{{ $input.main['__class__'] }}",
        "{{ range.__globals__ }}",
    ],
)
def test_sandbox_blocks_escapes(text: str) -> None:
    """Underscore attributes and mutating methods raise TemplateError, never render silently."""
    error = error_of({"p": text})
    assert error.path == "p"
    assert "sandbox" in error.message


def _attr_as_in_jinja_3_1_5(environment: Any, obj: Any, name: str) -> Any:
    """Jinja 3.1.5's ``attr`` filter (CVE-2025-27516): ``getattr`` checked by
    ``is_safe_attribute`` alone, so ``'...'|attr('format')`` is the raw ``str.format``."""
    try:
        value = getattr(obj, str(name))
    except AttributeError:
        return environment.undefined(obj=obj, name=name)
    if not environment.is_safe_attribute(obj, name, value):
        return environment.unsafe_undefined(obj, name)
    return value


@pytest.mark.parametrize(
    "text",
    [
        "{{ ('{0.__class__.__name__}'|attr('format'))('leak-a') }}",
        "{{ ('{x.__class__.__name__}'|attr('format_map'))({'x': 'leak-b'}) }}",
        "{% set f = '{0.__class__.__name__}'|attr('format') %}{{ f('leak-c') }}",
        "{{ ('{0.__class__}'|safe|attr('format'))('leak-d') }}",
        "{{ (['{0.__class__}']|map('attr', 'format')|first)('leak-e') }}",
    ],
)
def test_a_raw_str_format_is_refused_whatever_jinja_version_hands_it_out(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox's own ``call`` hook refuses ``str.format``/``format_map`` that did not come
    through the bounded formatter: under Jinja 3.1.5, ``|attr('format')`` returned the raw
    method, and ``{0.__init__.__globals__}`` read the worker's environment through it."""
    from jinja2 import pass_environment

    from prana._template_env import ENV, _guard_filter

    monkeypatch.setitem(
        ENV.filters, "attr", _guard_filter("attr", pass_environment(_attr_as_in_jinja_3_1_5))
    )
    compile_string.cache_clear()
    try:
        error = error_of({"p": text})
    finally:
        compile_string.cache_clear()
    assert "sandbox" in error.message
    assert "format" in error.message


def test_jinja2_floor_is_the_release_that_fixed_the_attr_filter() -> None:
    """``jinja2>=3.1`` admitted 3.1.5 (CVE-2025-27516); the floor is 3.1.6."""
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    assert '"jinja2>=3.1.6"' in pyproject
    assert '"jinja2>=3.1"' not in pyproject


def test_error_paths_name_the_param() -> None:
    """A failing template names its place in the params: dotted keys and list indexes."""
    bad = "{{ 1 / 0 }}"
    assert error_of({"url": bad}).path == "url"
    assert error_of({"headers": {"Authorization": bad}}).path == "headers.Authorization"
    assert error_of({"items": ["ok", "{{ 1 }}", bad]}).path == "items[2]"
    assert error_of({"a": [{"b": [bad]}]}).path == "a[0].b[0]"
    error = error_of({"url": bad})
    assert str(error) == f"url: {error.message}"
    assert "ZeroDivisionError" in error.message


def test_syntax_errors_raise_at_compile_time_with_the_path() -> None:
    """A template that does not parse fails in compile_params, naming the param and the text."""
    with pytest.raises(TemplateError) as info:
        compile_params({"body": {"x": "{{ $input.main.count + }}"}})
    assert info.value.path == "body.x"
    assert "syntax" in info.value.message
    assert "$input.main.count +" in info.value.message


@pytest.mark.parametrize("text", ["{{ 1 2 }}", "{{ $input.main", "{% if %}", "{{ ) }}"])
def test_malformed_templates_fail_to_compile(text: str) -> None:
    """Unclosed or malformed templates are syntax errors."""
    with pytest.raises(TemplateError, match="syntax"):
        compile_params({"p": text})


def test_unknown_root_is_refused() -> None:
    """A ``$name`` that is not a scope root fails at compile time, listing the roots."""
    with pytest.raises(TemplateError) as info:
        compile_params({"p": "{{ $inptu.main }}"})
    assert info.value.message.startswith("unknown root $inptu")
    assert "$input" in info.value.message


def test_name_without_dollar_is_refused() -> None:
    """A bare name (a forgotten ``$``) fails at compile time instead of reading as None."""
    with pytest.raises(TemplateError, match="unknown name 'input'"):
        compile_params({"p": "a {{ input.main }}"})
    with pytest.raises(TemplateError, match="unknown name 'x'"):
        compile_params({"p": "{{ x }}"})


def test_jinja_globals_and_loop_variables_are_allowed() -> None:
    """Globals like ``range`` and names bound in the template are not unknown names."""
    assert render_one("{{ range(3) | list }}") == [0, 1, 2]
    assert render_one("{% set n = 2 %}{{ n * $input.main.count }}") == "6"


def test_arithmetic_on_a_missing_value_fails() -> None:
    """Using a missing value in arithmetic is an error, not a silent result."""
    error = error_of({"p": "{{ $input.main.missing + 1 }}"})
    assert "missing" in error.message


def test_template_error_pickles() -> None:
    """A TemplateError survives pickling with its path and message (for worker processes)."""
    error = pickle.loads(pickle.dumps(TemplateError("a.b", "boom")))
    assert (error.path, error.message, str(error)) == ("a.b", "boom", "a.b: boom")


# --- no mutation, caching ----------------------------------------------------------------


def test_render_never_mutates_params() -> None:
    """Rendering returns a new structure and leaves the params as they were."""
    params = {
        "a": "{{ $input.main.count }}",
        "b": ["{{ $input.main.count }}", {"c": "{{ $vars.base_url }}"}],
        "static": {"x": [1, 2]},
        "t": ("{{ 1 }}", "two"),
    }
    before = copy.deepcopy(params)
    compiled = compile_params(params)
    assert compiled is not None
    first = compiled.render(make_scope())
    second = compiled.render(make_scope(input={"main": {"count": 9}}))
    assert params == before
    assert first == {
        "a": 3,
        "b": [3, {"c": "https://api.example.com"}],
        "static": {"x": [1, 2]},
        "t": [1, "two"],
    }
    assert second["a"] == 9
    assert first is not params
    assert first["b"] is not params["b"]


def test_compiled_templates_are_cached_by_text() -> None:
    """The same template text compiles once, however many params hold it."""
    text = "{{ $input.main.count + 12345 }}"
    compile_string.cache_clear()
    compile_params({"a": text, "b": [text]})
    compile_params({"c": text})
    info = compile_string.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def test_one_compiled_params_renders_many_scopes() -> None:
    """Compile once, render many: each render sees its own scope."""
    compiled = compile_params({"n": "{{ $input.main }}", "t": "n={{ $input.main }}"})
    assert compiled is not None
    for i in range(5):
        assert compiled.render({"input": {"main": i}}) == {"n": i, "t": f"n={i}"}


# --- evaluate ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$input.main.count > 2", True),
        ("{{ $input.main.count > 5 }}", False),
        ("  $execution.attempt  ", 1),
        ("$input.main.user", {"id": 7, "name": "Ada"}),
        ("$input.main.missing is defined", False),
        ("'$input' == '$input'", True),
        ("n={{ $input.main.count }}", "n=3"),
        (True, True),
        (None, None),
    ],
)
def test_evaluate_conditions(text: Any, expected: Any) -> None:
    """evaluate reads a bare expression or a ``{{ }}`` template to its native value."""
    assert evaluate(text, make_scope()) == expected


def test_evaluate_errors_name_the_condition() -> None:
    """A bad condition raises TemplateError naming the path given (``condition`` by default)."""
    with pytest.raises(TemplateError) as info:
        evaluate("$input.main.count >", make_scope())
    assert info.value.path == "condition"
    with pytest.raises(TemplateError) as info:
        evaluate("''.__class__", make_scope(), path="retry_when")
    assert info.value.path == "retry_when"


# --- properties --------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@given(json_values)
def test_single_expression_round_trips_any_json_value(value: Any) -> None:
    """``{{ $input.main }}`` gives back exactly the value it reads, for any JSON value."""
    assert render_one("{{ $input.main }}", {"input": {"main": value}}) == value
    assert render_one("{{ ($input.main) }}", {"input": {"main": value}}) == value


@given(plain_text(max_size=30))
def test_text_without_templates_is_left_alone(text: str) -> None:
    """Any string without ``{{`` or ``{%`` is not a template (what ``plain_text`` promises)."""
    assert compile_params({"p": text, "q": [text]}) is None


@given(st.text(alphabet="abc $'\"\\{}.", max_size=12))
def test_string_literals_come_back_verbatim(text: str) -> None:
    """Any text written as a quoted literal in an expression renders as itself."""
    literal = repr(text)
    assert render_one("{{ " + literal + " }}") == text


def test_an_expression_of_escaped_text_is_a_plain_string() -> None:
    """``|tojson``, ``|escape`` and ``|safe`` give Jinja's ``Markup``: a whole-param
    expression is a plain ``str`` (the record showed ``"Markup('[1, 2]')"`` and an action
    echoing it failed as not JSON-native)."""
    compiled = compile_params({"p": "{{ [1, 2] | tojson }}", "q": "{{ '<a>' | escape }}"})
    assert compiled is not None
    rendered = compiled.render({})
    assert rendered == {"p": "[1, 2]", "q": "&lt;a&gt;"}
    assert {type(v) for v in rendered.values()} == {str}


@pytest.mark.parametrize(
    ("text", "advice"),
    [
        ("{{ namespace(a=1) }}", "read its attributes"),
        ("{{ $input.main.user.items() }}", "add | list"),
        ("{{ $input.main.user.keys() }}", "add | list"),
        ("{{ $input.main.user.values() }}", "add | list"),
        ("{{ [namespace(a=1)] }}", "read its attributes"),
        ("{{ {'pairs': $input.main.user.items()} }}", "add | list"),
    ],
)
def test_a_value_that_is_not_data_is_refused_where_it_leaves_the_template(
    text: str, advice: str
) -> None:
    """Was: a template whose value was (or held) a namespace, a dict view or a set gave the
    action that Python object as its param; a value leaving a template is plain data."""
    error = error_of({"p": text})
    assert "not data: " in error.message
    assert advice in error.message
    assert "0x" not in error.message


def test_the_data_a_refused_value_holds_still_leaves_as_data() -> None:
    """What the refusals advise gives plain data: ``| list`` of a view, a namespace's field."""
    assert render_one("{{ $input.main.user.items() | list }}") == [("id", 7), ("name", "Ada")]
    assert render_one("{{ $input.main.user.keys() | list }}") == ["id", "name"]
    assert render_one("{% set ns = namespace(a=1) %}{{ ns.a }}") == "1"
    assert render_one("{{ namespace(a=1).a }}") == 1


@pytest.mark.parametrize(
    ("text", "advice"),
    [
        ("{{ $nodes }}", "name one of its keys ($nodes.<key>)"),
        ("{{ $webhooks }}", "name one of its keys ($webhooks.<key>)"),
        ("{{ $nodes if true else none }}", "name one of its keys ($nodes.<key>)"),
        ("{{ [1, $nodes] }}", "name one of its keys ($nodes.<key>)"),
        ("{{ range(3) }}", "add | list"),
        ("{{ {'r': range(3)} }}", "add | list"),
        ("{{ $now.date() }}", "call .isoformat()"),
        ("{{ [$now.time()] }}", "call .isoformat()"),
        ("{{ $now - $now }}", "call .total_seconds()"),
        ("{{ $now.tzinfo }}", "add | string"),
        ("{{ 'ab'.encode() }}", "call .decode()"),
    ],
)
def test_a_value_that_is_an_object_the_scope_or_the_sandbox_gives_is_refused(
    text: str, advice: str
) -> None:
    """Was: the action got the Python object (the engine's live ``$nodes`` or ``$webhooks``
    view, a range, a date, a timedelta, bytes) while the record kept its repr
    (``'range(0, 3)'``); ``{{ $webhooks }}`` also minted a resume token for every node."""
    calls: list[Any] = []
    registry = Registry()
    registry.register("test.capture", lambda params, ctx: calls.append(params))
    wf = Workflow(
        id="wf",
        nodes=[trigger(), Node(key="a", type="test.capture", params={"p": text})],
        connections=[conn("start", "a")],
    )
    outcome = execute_workflow(wf, {"x": 1}, registry=registry, clock=ManualClock(NOW))
    assert calls == []
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "template_error"
    assert "not data: " in outcome.error.message
    assert advice in outcome.error.message
    assert "0x" not in outcome.error.message
    assert not any(key.startswith("__webhook__") for key in outcome.execution.state)


def test_what_the_refusals_of_scope_objects_advise_leaves_as_data() -> None:
    """The data the advice gives: a node's record, the keys of ``$nodes``, a date as text."""
    calls: list[Any] = []
    registry = Registry()
    registry.register("test.capture", lambda params, ctx: calls.append(params))
    params = {
        "node": "{{ $nodes.start.output }}",
        "keys": "{{ $nodes | list }}",
        "day": "{{ $now.date().isoformat() }}",
        "now": "{{ $now }}",
        "span": "{{ ($now - $now).total_seconds() }}",
    }
    wf = Workflow(
        id="wf",
        nodes=[trigger(), Node(key="a", type="test.capture", params=params)],
        connections=[conn("start", "a")],
    )
    outcome = execute_workflow(wf, {"x": 1}, registry=registry, clock=ManualClock(NOW))
    assert isinstance(outcome, Completed)
    assert calls == [
        {
            "node": {"x": 1},
            "keys": ["start"],
            "day": "2030-01-02",
            "now": NOW.isoformat(),
            "span": 0.0,
        }
    ]


# -- $webhooks.<node>: a wait's resume path handed out before the wait ----------------------------
# ``$webhooks.<node>``: hand a wait's resume path out before the wait, never recording it.


def _notify_then_wait(fails: int = 0) -> tuple[Workflow, Registry, list[str]]:
    sent: list[str] = []
    calls = {"n": 0}
    registry = Registry()

    def send(params: Any, ctx: Any) -> Any:
        calls["n"] += 1
        sent.append(params["link"])
        if calls["n"] <= fails:
            raise ConnectionError("mail server down")
        return {"sent": params["link"]}

    registry.register("mail.send", send)
    workflow = Workflow(
        id="notify-then-wait",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="notify",
                type="mail.send",
                params={"link": "https://example.test/prana{{ $webhooks.approve }}"},
                settings=NodeSettings(retry=RetryPolicy(max_attempts=3, initial_delay=1)),
            ),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="notify"),
            Connection(from_node="notify", to_node="approve"),
        ],
    )
    return workflow, registry, sent


def test_the_path_reaches_the_action_and_the_wait_uses_its_token() -> None:
    """The action gets the real path; the later wait is resumed by that very token."""
    workflow, registry, sent = _notify_then_wait()
    outcome = execute_workflow(workflow, registry=registry)
    assert isinstance(outcome, Suspend)
    data = outcome.data
    assert isinstance(data, WebhookData)
    assert sent == [f"https://example.test/prana{data.path}"]
    assert outcome.execution is not None
    notify = outcome.execution.node("notify")
    assert notify is not None
    assert notify.params == {"link": f"https://example.test/prana/hooks/{REDACTED}"}
    assert notify.output == {"sent": f"https://example.test/prana/hooks/{REDACTED}"}
    assert data.token is not None
    _, secret = parse_token(data.token)  # type: ignore[misc]
    text = dumps(outcome.execution)
    assert secret not in text
    assert outcome.execution.state == {}  # the pending digest moved into the wait


def test_a_handed_out_token_resumes_after_a_reload_elsewhere() -> None:
    """Issued before a retry, the token still names the wait another runner reaches later."""
    workflow, registry, sent = _notify_then_wait(fails=1)
    store = MemoryStore(serialize=True)
    clock = ManualClock()
    with Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=clock)) as first:
        execution_id = first.start(workflow, None)
    assert len(sent) == 1
    assert first.get(execution_id).state  # the digest waits in the shared state
    clock.advance(1)
    with Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=clock)) as second:
        second.run_due()
        assert second.get(execution_id).status is ExecutionStatus.SUSPENDED
        # The retry rendered the params again: a fresh link, the first one is dead.
        assert len(sent) == 2
        assert sent[0] != sent[1]
        with pytest.raises(HookNotFound):
            second.deliver_hook(sent[0].rsplit("/hooks/", 1)[1], {"late": True})
        second.deliver_hook(sent[1].rsplit("/hooks/", 1)[1], {"approved": True})
        assert second.get(execution_id).status is ExecutionStatus.COMPLETED


def test_an_unknown_node_mints_nothing() -> None:
    """``$webhooks.nope`` names no node: no token is minted, nothing waits in the state."""
    workflow, registry, sent = _notify_then_wait()
    nodes = list(workflow.nodes)
    nodes[1] = Node(key="notify", type="mail.send", params={"link": "{{ $webhooks.nope }}"})
    broken = Workflow(id=workflow.id, nodes=nodes, connections=workflow.connections)
    outcome = execute_workflow(broken, registry=registry)
    assert outcome.execution is not None
    assert not any(key.startswith("__webhook__:") for key in outcome.execution.state)
    assert all(link is None for link in sent)


# --- the token never reaches the record through an error ------------------------------------------


_TOKEN_IN_TEXT = re.compile(r"/hooks/([A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22,})")


def _notify_may_fail(*, retries: int = 1) -> Workflow:
    """notify (quotes the link; on error the flow goes on to the wait) -> webhook wait."""
    return Workflow(
        id="notify-may-fail",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="notify",
                type="chat.send",
                params={"link": "https://example.test/prana{{ $webhooks.approve }}"},
                settings=NodeSettings(
                    on_error="continue",
                    retry=RetryPolicy(max_attempts=retries, initial_delay=1),
                ),
            ),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="notify"),
            Connection(from_node="notify", to_node="approve"),
        ],
    )


def _runner(registry: Registry, store: MemoryStore) -> Runner:
    return Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=ManualClock()))


def _quoting_error(params: Any, ctx: Any) -> Any:
    raise ConnectionError(f"chat server refused {params['link']}")


def _store_reader_resumes(store: MemoryStore, registry: Registry, execution_id: str) -> list[str]:
    """What someone who can only read the store finds: tokens that resume the wait."""
    record = dumps(store.load(execution_id)[0])
    found = _TOKEN_IN_TEXT.findall(record)
    worked = []
    with _runner(registry, store) as r:
        for token in found:
            with contextlib.suppress(HookNotFound):
                r.deliver_hook(token, {"approved": "by the reader"})
                worked.append(token)
    return worked


def test_an_error_quoting_the_link_does_not_hand_the_token_to_store_readers() -> None:
    """An action's error quotes its params (here with on_error=continue, so the flow goes on
    to the wait): the token used to be stored in the error and resumed the wait for anyone
    who could read the store."""
    registry = Registry()
    registry.register("chat.send", _quoting_error)
    store = MemoryStore(serialize=True)
    with _runner(registry, store) as r:
        execution_id = r.start(_notify_may_fail(), None)
        path = r.hook_path(execution_id)
        assert path is not None
        execution = r.get(execution_id)
    notify = execution.node("notify")
    assert notify is not None
    assert notify.error is not None
    assert (
        notify.error.message == f"chat server refused https://example.test/prana/hooks/{REDACTED}"
    )
    assert notify.output["message"] == notify.error.message
    assert _store_reader_resumes(store, registry, execution_id) == []
    assert path.removeprefix("/hooks/") not in dumps(execution)


def test_http_request_errors_keep_no_token_in_message_or_details() -> None:
    """``http.request`` records ``HTTP 400 from POST <url>`` and the URL in ``details``."""
    import httpx

    from prana._http import register_http

    registry = Registry()
    register_http(registry, transport=httpx.MockTransport(lambda request: httpx.Response(400)))
    workflow = _notify_may_fail()
    nodes = [
        attrs.evolve(
            node,
            type="http.request",
            params={"url": "https://chat.test/send?link={{ $webhooks.approve }}", "method": "POST"},
        )
        if node.key == "notify"
        else node
        for node in workflow.nodes
    ]
    store = MemoryStore(serialize=True)
    with _runner(registry, store) as r:
        execution_id = r.start(attrs.evolve(workflow, nodes=nodes), None)
        error = r.get(execution_id).node("notify").error  # type: ignore[union-attr]
    assert error is not None
    assert error.message.startswith("HTTP 400 from POST https://chat.test/send?link=/hooks/[")
    assert detail(error, "url").endswith(f"link=/hooks/{REDACTED}")
    assert _store_reader_resumes(store, registry, execution_id) == []


def test_a_retried_attempt_s_error_keeps_no_token() -> None:
    """Each attempt's error in the ledger (and the retry's suspension) is redacted too."""
    registry = Registry()
    registry.register("chat.send", _quoting_error)
    outcome = execute_workflow(_notify_may_fail(retries=2), registry=registry)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "retry"
    assert outcome.execution is not None
    text = dumps(outcome.execution)
    assert REDACTED in text
    assert _TOKEN_IN_TEXT.search(text) is None


def test_custom_suspension_data_is_redacted_in_the_record_only() -> None:
    """An action that pauses with its own data quoting the link: the caller gets the link,
    the record does not."""
    registry = Registry()
    registry.register("chat.send", lambda params, ctx: Suspend("chat.reply", {"asked": params}))
    outcome = execute_workflow(_notify_may_fail(), registry=registry)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "chat.reply"
    assert _TOKEN_IN_TEXT.search(json.dumps(outcome.data)) is not None
    assert outcome.execution is not None
    stored = outcome.execution.suspension
    assert stored is not None
    assert stored.data == {"asked": {"link": f"https://example.test/prana/hooks/{REDACTED}"}}
    assert _TOKEN_IN_TEXT.search(dumps(outcome.execution)) is None


def test_a_retry_condition_that_raises_quoting_the_error_keeps_no_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A retry_when that raises, quoting the exception (which holds the link): the text the
    attempt's error records (retry_condition_failed), the node error and the log line are
    redacted like every other error."""
    registry = Registry()
    registry.register("chat.send", _quoting_error)

    @registry.condition("picky")
    def picky(view: Any) -> bool:
        raise ValueError(f"cannot judge {view.exception}")

    workflow = _notify_may_fail(retries=3)
    nodes = [
        attrs.evolve(
            node,
            settings=attrs.evolve(
                node.settings,
                retry=RetryPolicy(max_attempts=3, initial_delay=1, retry_when="picky"),
            ),
        )
        if node.key == "notify"
        else node
        for node in workflow.nodes
    ]
    with caplog.at_level("WARNING", logger="prana"):
        outcome = execute_workflow(attrs.evolve(workflow, nodes=nodes), registry=registry)
    assert outcome.execution is not None
    error = outcome.execution.node("notify").error  # type: ignore[union-attr]
    assert error is not None
    assert isinstance(error.details, dict)
    said = error.details["retry_condition_failed"]
    assert isinstance(said, str)
    assert "cannot judge chat server refused" in said
    assert REDACTED in said
    text = dumps(outcome.execution)
    assert _TOKEN_IN_TEXT.search(text) is None
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "cannot judge" in logged
    assert _TOKEN_IN_TEXT.search(logged) is None


# --- the engine's bookkeeping is not the data's to write -----------------------------------


def _copy_reply_then_approve() -> tuple[Workflow, Registry]:
    """A manager's link mailed first; a requester's wait whose reply is copied into the
    state; then the manager's approval wait."""
    registry = Registry()
    registry.register("mail.send", lambda params, ctx: {"sent": True})
    wait = {"mode": "webhook"}
    nodes = [
        Node(key="start", type="manual.trigger"),
        Node(key="notify", type="mail.send", params={"link": "{{ $webhooks.approve }}"}),
        Node(key="request", type="wait.wait", params=wait),
        Node(key="copy", type="workflow.set_state", params={"state": "{{ $input.main }}"}),
        Node(key="approve", type="wait.wait", params=wait),
    ]
    keys = [n.key for n in nodes]
    workflow = Workflow(
        id="copy-then-approve",
        nodes=nodes,
        connections=[Connection(from_node=a, to_node=b) for a, b in itertools.pairwise(keys)],
    )
    return workflow, registry


def test_a_sender_cannot_plant_the_digest_of_a_later_wait() -> None:
    """The requester's reply wrote ``__webhook__:approve`` (the digest of a token of their
    own) through ``workflow.set_state`` and then resumed the manager's approval with it.
    A state write of a reserved key now fails the node, and the planted token is refused."""
    from prana._hooks import mint_token, token_digest

    workflow, registry = _copy_reply_then_approve()
    store = MemoryStore(serialize=True)
    scheduler = ManualScheduler(clock=ManualClock())
    with Runner(registry=registry, store=store, scheduler=scheduler) as runner:
        execution_id = runner.start(workflow, None)
        path = runner.hook_path(execution_id)
        assert path is not None
        own, secret = mint_token(execution_id)
        planted = {"__webhook__:approve": token_digest(execution_id, "approve", secret)}
        runner.deliver_hook(path.rsplit("/", 1)[1], planted)
        execution = runner.get(execution_id)
        assert execution.status is ExecutionStatus.FAILED
        assert execution.error is not None
        assert "'__webhook__:approve'" in execution.error.message
        assert "reserved" in execution.error.message
        with pytest.raises(HookNotFound):
            runner.deliver_hook(own, {"approved": True})
        assert runner.get(execution_id).status is ExecutionStatus.FAILED


@pytest.mark.parametrize("key", ["__for_each__:loop", "__webhook__:approve", "__delivered__:w"])
def test_no_state_write_may_use_a_reserved_key(key: str) -> None:
    """``__for_each__:`` (a loop's progress), ``__webhook__:`` and ``__delivered__:`` keys
    are the engine's: ``workflow.set_state`` (or any action's ``ctx.update_state``) writing
    one fails its node without retry, naming the key."""
    workflow = Workflow(
        id="plant",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="set", type="workflow.set_state", params={"state": {key: {"index": 0}}}),
        ],
        connections=[Connection(from_node="start", to_node="set")],
    )
    outcome = execute_workflow(workflow, registry=Registry())
    assert outcome.execution is not None
    assert outcome.execution.status is ExecutionStatus.FAILED
    assert key not in outcome.execution.state
    error = outcome.execution.error
    assert error is not None
    assert repr(key) in error.message


# --- redaction: encodings and $secrets ------------------------------------------------------


def _decodes_to(text: str, needle: str) -> bool:
    """Whether any base64 run of ``text``, at any alignment, decodes to hold ``needle``."""
    import base64
    import binascii

    for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", text):
        for start in range(4):
            chunk = run[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            for alt in (b"+/", b"-_"):
                try:
                    decoded = base64.b64decode(chunk, altchars=alt)
                except (binascii.Error, ValueError):
                    continue
                if needle.encode() in decoded:
                    return True
    return False


@pytest.mark.parametrize("prefix", ["", "x", "xy"])  # each of base64's three alignments
def test_a_token_in_an_encoded_output_is_redacted_too(prefix: str) -> None:
    """An action output holding the link base64-encoded (an e-mail's raw body), hex or
    percent-encoded let a read-only operator take the token from the record and resume the
    wait; the record now holds none of those forms."""
    import base64
    import urllib.parse

    registry = Registry()

    def send(params: Any, ctx: Any) -> Any:
        body = f"{prefix}Subject: approve\r\n\r\nPlease open {params['link']} today".encode()
        return {
            "raw": base64.b64encode(body).decode(),
            "urlsafe": base64.urlsafe_b64encode(body).decode(),
            "hex": body.hex(),
            "query": "https://mail.test/?next=" + urllib.parse.quote(params["link"], safe=""),
        }

    registry.register("mail.send", send)
    workflow = Workflow(
        id="encoded",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="notify", type="mail.send", params={"link": "{{ $webhooks.approve }}"}),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="notify"),
            Connection(from_node="notify", to_node="approve"),
        ],
    )
    outcome = execute_workflow(workflow, registry=registry)
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, WebhookData)
    assert outcome.data.token is not None
    secret = outcome.data.token.rpartition(".")[2]
    text = dumps(outcome.execution)
    assert secret not in text
    assert secret.encode().hex() not in text.lower()
    assert not _decodes_to(text, secret)
    assert REDACTED in text


SECRET = "sk-live-0123456789abcdef"


def test_secrets_reach_the_action_and_never_the_record() -> None:
    """``$secrets.<name>`` (the registry's) renders the real value for the action; the
    params, output, state, errors and their encoded forms in the record hold ``[secret]``
    instead. ``$env`` values are kept as rendered: that is what ``$secrets`` is for."""
    import base64

    from prana import ExecutionStatus as Status
    from prana._hooks import SECRET_REDACTED

    seen: list[str] = []
    registry = Registry(secrets={"API_KEY": SECRET})

    def call(params: Any, ctx: Any) -> Any:
        seen.append(params["auth"])
        ctx.update_state({"last": params["auth"]})
        if len(seen) == 1:
            raise ConnectionError(f"refused with {params['auth']}")
        return {"echo": params["auth"], "b64": base64.b64encode(params["auth"].encode()).decode()}

    registry.register("api.call", call)
    policy = RetryPolicy(max_attempts=2, initial_delay=0)
    workflow = Workflow(
        id="secret",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="api.call",
                params={"auth": "Bearer {{ $secrets.API_KEY }}"},
                settings=NodeSettings(retry=policy),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    clock = ManualClock()
    outcome = execute_workflow(workflow, registry=registry, clock=clock)
    from prana import resume_workflow

    while isinstance(outcome, Suspend):
        assert outcome.execution is not None
        outcome = resume_workflow(
            outcome.execution, workflow=workflow, registry=registry, clock=clock
        )
    assert outcome.execution is not None
    assert outcome.execution.status is Status.COMPLETED
    assert seen == [f"Bearer {SECRET}"] * 2
    text = dumps(outcome.execution)
    assert SECRET not in text
    assert not _decodes_to(text, SECRET)
    run = outcome.execution.node("call")
    assert run is not None
    assert run.params == {"auth": f"Bearer {SECRET_REDACTED}"}
    assert run.output is not None
    assert run.output["echo"] == f"Bearer {SECRET_REDACTED}"
    assert outcome.execution.state == {"last": f"Bearer {SECRET_REDACTED}"}
    error = run.attempts[0].error
    assert error is not None
    assert error.message == f"refused with Bearer {SECRET_REDACTED}"


@pytest.mark.parametrize(
    "secrets",
    [{"short": "1234"}, {"not a name": "long enough value"}, {"k": 12345678}],
)
def test_a_secret_the_registry_cannot_redact_safely_is_refused(secrets: Any) -> None:
    """A secret must be text of 8 characters or more, under a name ``$secrets.<name>`` reads."""
    from prana import InvalidSettingsError

    with pytest.raises(InvalidSettingsError, match="Registry secrets"):
        Registry(secrets=secrets)


def test_a_secret_in_a_sub_workflow_input_fails_the_node_and_is_not_recorded() -> None:
    """The child starts from the input the parent's record keeps, so a ``$secrets`` value
    there would be stored as it is: the node fails, naming the fix, and the record holds no
    trace of the secret (the child reads ``$secrets`` itself: it shares the registry)."""
    from prana import ExecutionStatus as Status

    workflow = Workflow(
        id="parent",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="sub",
                type="workflow.execute_workflow",
                params={"workflow_id": "child", "input": {"auth": "{{ $secrets.API_KEY }}"}},
            ),
        ],
        connections=[Connection(from_node="start", to_node="sub")],
    )
    outcome = execute_workflow(workflow, registry=Registry(secrets={"API_KEY": SECRET}))
    assert outcome.execution is not None
    text = dumps(outcome.execution)
    assert SECRET not in text
    assert not _decodes_to(text, SECRET)
    assert outcome.execution.status is Status.FAILED
    assert outcome.execution.error is not None
    assert "$secrets" in outcome.execution.error.message


def test_a_port_an_action_names_after_a_secret_is_recorded_redacted() -> None:
    """An action may name its output port from its params; the record's ``output_port``
    keeps ``[secret]`` in place of a ``$secrets`` value, as the output does."""
    from prana import Output
    from prana._hooks import SECRET_REDACTED

    registry = Registry(secrets={"API_KEY": SECRET})
    registry.register("api.route", lambda params, ctx: Output({}, port=params["to"]))
    workflow = Workflow(
        id="port",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="route", type="api.route", params={"to": "p-{{ $secrets.API_KEY }}"}),
        ],
        connections=[Connection(from_node="start", to_node="route")],
    )
    outcome = execute_workflow(workflow, registry=registry)
    assert outcome.execution is not None
    assert SECRET not in dumps(outcome.execution)
    run = outcome.execution.node("route")
    assert run is not None
    assert run.output_port == f"p-{SECRET_REDACTED}"
