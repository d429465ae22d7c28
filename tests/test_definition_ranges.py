"""Numbers a stored definition cannot hold are refused by validation, naming node and field.

Was: a workflow whose ``max_attempts`` was 10**30 validated, ran, and then failed to save
with "Integer exceeds 64-bit range", naming neither the node nor the field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from prana import (
    Connection,
    InvalidWorkflowError,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Workflow,
    dumps_workflow,
    validate,
)
from prana._graph import storable_int_problems
from scheduling._cli import main

if TYPE_CHECKING:
    from pathlib import Path

HUGE = 10**30


def one_node(settings: NodeSettings | None = None, **extra: object) -> Workflow:
    """trigger -> call (data.set_data), with ``settings`` on ``call``."""
    return Workflow(
        id="ranges",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="data.set_data",
                params={"value": 1},
                settings=settings or NodeSettings(),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
        **extra,  # type: ignore[arg-type]
    )


def test_a_node_policy_max_attempts_past_the_record_range_is_invalid() -> None:
    """``settings.retry`` max_attempts 10**30: validation names the node, field and range."""
    wf = one_node(NodeSettings(retry=RetryPolicy(max_attempts=HUGE)))
    with pytest.raises(InvalidWorkflowError) as caught:
        validate(wf, Registry())
    text = str(caught.value)
    assert "node 'call'" in text
    assert "settings.retry.max_attempts" in text
    assert f"{HUGE}" in text
    assert "from 1 to 18,446,744,073,709,551,615" in text


def test_a_second_policy_is_named_by_its_index() -> None:
    """In a list of policies, the one out of range is named by its index."""
    wf = one_node(NodeSettings(retry=[RetryPolicy(), RetryPolicy(max_attempts=HUGE)]))
    with pytest.raises(InvalidWorkflowError, match=r"settings\.retry\[1\]\.max_attempts"):
        validate(wf, Registry())


def test_a_retry_default_past_the_record_range_is_invalid() -> None:
    """``retry_defaults`` are checked too, named by their node type."""
    wf = one_node(retry_defaults={"*": RetryPolicy(max_attempts=HUGE)})
    with pytest.raises(InvalidWorkflowError, match=r"retry_defaults\['\*'\]\.max_attempts"):
        validate(wf, Registry())


def test_the_largest_storable_max_attempts_is_valid_and_stored() -> None:
    """The top of the range validates and serializes (Limits.max_attempts caps what runs)."""
    wf = one_node(NodeSettings(retry=RetryPolicy(max_attempts=2**64 - 1)))
    validate(wf, Registry())
    assert str(2**64 - 1) in dumps_workflow(wf)


def test_prana_run_refuses_it_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run`` on such a YAML file: exit 2, one line naming node and field, no run."""
    path = tmp_path / "huge.yaml"
    path.write_text(
        "id: huge\nnodes:\n  - {key: start, type: manual.trigger}\n"
        "  - key: call\n    type: data.set_data\n    params: {value: 1}\n"
        f"    settings: {{retry: {{max_attempts: {HUGE}}}}}\n"
        "connections:\n  - {from_node: start, to_node: call}\n"
    )
    code = main(["run", str(path), "--db", str(tmp_path / "prana.db")])
    out, err = capsys.readouterr()
    assert code == 2
    assert "node 'call'" in err
    assert "settings.retry.max_attempts" in err
    assert "64-bit" not in err
    assert err.count("\n") == 1
    assert "execution" not in out


def test_an_integer_in_params_or_variables_past_the_record_range_is_invalid() -> None:
    """Was: node params (or workflow variables) holding 10**30, as YAML reads them, validated
    and then failed to save with "Integer exceeds 64-bit range", naming no node or field."""
    wf = one_node(variables={"limit": -HUGE})
    wf = Workflow(
        id=wf.id,
        nodes=[wf.nodes[0], Node(key="call", type="data.set_data", params={"v": [1, {"n": HUGE}]})],
        connections=wf.connections,
        variables=wf.variables,
    )
    with pytest.raises(InvalidWorkflowError) as raised:
        validate(wf, Registry())
    outside = (
        "an integer of 100 bits is outside the range a stored definition holds "
        "(-2**63 to 2**64 - 1); write it as a string"
    )
    assert list(raised.value.problems) == [
        f"node 'call': params.v[1].n: {outside}",
        f"variables.limit: {outside}",
    ]


def test_the_widest_storable_integers_in_params_are_valid_and_stored() -> None:
    """The bounds themselves validate and save; a cycle in Python params is walked once."""
    params: dict[str, object] = {"low": -(2**63), "high": 2**64 - 1, "flag": True}
    wf = Workflow(
        id="ranges",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="call", type="data.set_data", params=params),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    validate(wf, Registry())
    assert str(2**64 - 1) in dumps_workflow(wf)
    looped: dict[str, object] = {}
    looped["self"] = [looped]
    cyclic = Workflow(
        id="ranges",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="call", type="data.set_data", params={"value": 1, "loop": looped}),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    assert storable_int_problems("params", cyclic.nodes[1].params) == []


def test_prana_run_refuses_a_huge_param_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run`` on a YAML file with ``value: 10**30`` in params: exit 2, one line."""
    path = tmp_path / "huge.yaml"
    path.write_text(
        "id: huge\nnodes:\n  - {key: start, type: manual.trigger}\n"
        f"  - key: call\n    type: data.set_data\n    params: {{value: {{deep: [1, {HUGE}]}}}}\n"
        "connections:\n  - {from_node: start, to_node: call}\n"
    )
    code = main(["run", str(path), "--db", str(tmp_path / "prana.db")])
    out, err = capsys.readouterr()
    assert code == 2
    assert "node 'call': params.value.deep[1]" in err
    assert "64-bit range" not in err
    assert err.count("\n") == 1
    assert "execution" not in out
