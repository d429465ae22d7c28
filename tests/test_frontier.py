"""The frontier's AND-join readiness: counted feeders agree with the graph walk they replace."""

from __future__ import annotations

from typing import Any

import pytest
from doubles import conn, trigger
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import Scenario, scenarios
from test_properties import PROPERTY_SETTINGS, drive

from prana import Completed, Node, Registry, Workflow, execute_workflow
from prana._frontier import Frontier, graph_order
from prana._graph import CompiledGraph, compile_workflow


def walked_ready(frontier: Frontier, key: str) -> bool:
    """The readiness rule as a graph walk: no waiting port has a source a pending node reaches."""
    in_ports = frontier.graph.nodes[key].in_ports
    if len(in_ports) <= 1:
        return True
    delivered = frontier.pending[key].sources
    waiting = [port for port in in_ports if port not in delivered]
    live = frontier.graph.reachable_from((k for k in frontier.pending if k != key), avoid=key)
    return not any(src in live for port in waiting for src, _ in in_ports[port])


@settings(PROPERTY_SETTINGS, max_examples=300)
@given(scenarios())
def test_counted_readiness_matches_the_graph_walk(scenario: Scenario) -> None:
    """At every pick of a random run (reloaded from JSON at each pause) both rules agree."""
    counted = Frontier._ready

    def both(self: Frontier, key: str) -> bool:
        fast = counted(self, key)
        assert fast == walked_ready(self, key), f"{key}: counted {fast}, walked {not fast}"
        return fast

    Frontier._ready = both  # type: ignore[method-assign]
    try:
        drive(scenario, reload=True)
    finally:
        Frontier._ready = counted  # type: ignore[method-assign]


KEYS = ["a", "b", "m000", "m001", "m010", "sink", "start", "z"]


def _keys_graph() -> CompiledGraph:
    """A compiled workflow whose node keys are ``KEYS`` (a chain, in key order)."""
    registry = Registry()
    registry.register("test.one", lambda params, ctx: 1)
    keys = [k for k in KEYS if k != "start"]
    nodes = [trigger(), *(Node(key=k, type="test.one") for k in keys)]
    conns = [conn(a, b) for a, b in zip(["start", *keys], keys, strict=False)]
    return compile_workflow(Workflow(id="keys", nodes=nodes, connections=conns), registry)


def fan_in(width: int) -> Workflow:
    """Trigger -> ``width`` nodes -> one node with a port per node (an AND-join)."""
    nodes = [trigger(), Node(key="sink", type="test.ports")]
    conns = []
    for i in range(width):
        key = f"m{i:03d}"
        nodes.append(Node(key=key, type="test.one"))
        conns += [conn("start", key), conn(key, "sink", to_port=f"p{i:03d}")]
    return Workflow(id="fan_in", nodes=nodes, connections=conns)


def test_an_and_join_never_walks_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Picking the next node of a 1 -> 50 -> 1 fan-in reads counts, never walks the graph."""
    registry = Registry()
    registry.register("test.one", lambda params, ctx: 1)
    registry.register("test.ports", lambda params, ctx: sorted(ctx.input))

    def walk(self: CompiledGraph, *args: Any, **kwargs: Any) -> set[str]:
        raise AssertionError("the readiness check walked the graph")

    monkeypatch.setattr(CompiledGraph, "reachable_from", walk)
    outcome = execute_workflow(fan_in(50), None, registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == [f"p{i:03d}" for i in range(50)]
    assert len(outcome.execution.node_executions["sink"]) == 1


@given(
    st.lists(
        st.tuples(st.integers(min_value=-1, max_value=10_000), st.sampled_from(KEYS)),
        min_size=1,
        max_size=30,
    )
)
def test_heap_entries_order_as_most_recent_then_key(items: list[tuple[int, str]]) -> None:
    """The heap's ints (``rank - seq * width``) sort exactly as ``(-seq, key)`` pairs and
    give back their key and ``seq``: the order the design promises, without tuples."""
    order = graph_order(_keys_graph())
    width = len(order.keys)
    entries = [order.rank[key] - seq * width for seq, key in items]
    assert [order.keys[e % width] for e in sorted(entries)] == [
        key for _, key in sorted(items, key=lambda item: (-item[0], item[1]))
    ]
    assert [(-(e // width), order.keys[e % width]) for e in entries] == items
