"""The frontier: which activated node runs next (the engine's scheduling half).

Scheduling is depth-first: the most recently activated ready node runs next, ties by key.
Several edges into one port are an OR-join (a node runs once per delivery); several ports
are an AND-join: a node waits until every port has data or can no longer get any.
``Run`` (``prana._engine``) inherits this state and these methods; it freezes ``pending``
and ``backlog`` into the execution's ``Activation`` records.

AND-join readiness is counted, not searched (the speed rule of this module). A port of a
join can still get data while some pending node *feeds* it (``CompiledGraph.join_feeds``:
a path from that node to one of the port's sources avoids the join). ``live`` counts the
pending feeders of each join port and ``blocked`` the ports of each pending join that
have no data yet and a live feeder; a join is ready when its ``blocked`` count is 0. So
the counts stay true, **every change to the set of keys in ``pending`` goes through
``enter``/``leave``, and every change of a join's head activation through
``deliver``/``consume_activation``/``recount``**; a run without AND-joins (``feeds`` is
``None``) has no counts, and there ``enter`` and ``leave`` only set and pop ``pending``,
which the hot paths (``deliver``, the engine's start and settles) do inline (a test holds
``enter`` and ``leave`` to that); a property test compares the counts with
the graph walk (``CompiledGraph.reachable_from``) at every pick of random workflows.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Mapping
from typing import Any

from prana._errors import ResumeError
from prana._graph import CompiledGraph
from prana._model import NodeStatus, WorkflowExecution
from prana._noderuns import NOT_DELIVERED, NodeRuns, OpenRuns, RunsByNode
from prana._state import NODE_COMPLETED


class Pending:
    """An activation: the ``seq`` of its latest delivery and each input port's source.

    Built empty and filled (``new_pending``, or its two stores inline on hot paths): an
    ``__init__`` would cost a Python call per activation, three per retry cycle.
    """

    __slots__ = ("seq", "sources")

    seq: int
    sources: dict[str, tuple[Any, ...]]


def new_pending(seq: int, sources: dict[str, tuple[Any, ...]]) -> Pending:
    """An activation delivered with ``seq`` from ``sources``."""
    activation = Pending()
    activation.seq = seq
    activation.sources = sources
    return activation


def check_pending(graph: CompiledGraph, execution: WorkflowExecution) -> None:
    """Refuse a record whose pending nodes, or the runs that fed them, are not there.

    Only a record edited by hand has them; running it would fail deep in the engine
    after a shell took its claim, so it is refused before anything runs.
    """
    nodes = graph.nodes
    ran = execution.node_executions
    # a loaded record's runs answer without building a source's runs (prana._noderuns)
    has_runs = ran.has_runs if type(ran) is NodeRuns else ran.get
    for activation in execution.pending:
        key = activation.node_key
        sources = activation.sources
        if type(key) is str and key in nodes and type(sources) is dict:
            # the shape prana builds and loads: full source triples of runs that are there
            for source in sources.values():
                if not (
                    type(source) is tuple
                    and len(source) == 3
                    and type(source[0]) is str
                    and source[0] in nodes
                    and type(source[2]) is int
                    and has_runs(source[0])
                ):
                    break
            else:
                continue
        problem = None
        if type(key) is not str or key not in nodes:
            problem = f"pending node {key!r} is not in the workflow"
        elif not isinstance(activation.sources, Mapping):
            problem = f"pending node {key!r} has sources that are not a mapping"
        else:
            for port, source in activation.sources.items():
                if (
                    not isinstance(source, tuple | list)
                    or not 2 <= len(source) <= 3
                    or type(source[0]) is not str
                    or source[0] not in nodes
                    or (len(source) == 3 and source[2] is not None and type(source[2]) is not int)
                    or not ran.get(source[0])
                ):
                    problem = (
                        f"pending node {key!r} is fed at port {port!r} by {source!r}, not a "
                        "node run of this execution"
                    )
                    break
        if problem is not None:
            raise ResumeError(
                f"execution {execution.id!r}: {problem} (the record is inconsistent: was it "
                "edited by hand?)"
            )


class GraphOrder:
    """What the frontier reads of a compiled graph, computed once per graph (``graph_order``).

    ``rank`` is each node key's place in key order and ``keys`` the keys by rank (the
    heap's ints); ``joins`` the AND-joins (nodes with several input ports); ``ports`` every
    AND-join port ``(join, port)`` with a count of 0, which ``live`` starts as a copy of
    (so a count is read by subscript, never with a default).
    """

    __slots__ = ("graph", "joins", "keys", "ports", "rank")

    def __init__(self, graph: CompiledGraph) -> None:
        self.graph = weakref.ref(graph)
        self.keys = tuple(sorted(graph.nodes))
        self.rank = {key: index for index, key in enumerate(self.keys)}
        self.joins = frozenset(k for k, cn in graph.nodes.items() if len(cn.in_ports) > 1)
        self.ports = {(join, port): 0 for join in self.joins for port in graph.nodes[join].in_ports}


_ORDERS: dict[int, GraphOrder] = {}

_NO_JOINS: frozenset[str] = frozenset()
_EMPTY_COUNTS: dict[Any, int] = {}
"""``live``, ``blocked`` and ``parked`` of every run without AND-joins (see ``init_frontier``)."""


def graph_order(graph: CompiledGraph) -> GraphOrder:
    """``graph``'s ``GraphOrder``, cached per compiled graph."""
    cached = _ORDERS.get(id(graph))
    if cached is not None and cached.graph() is graph:
        return cached
    order = GraphOrder(graph)
    if len(_ORDERS) > 256:
        _ORDERS.clear()
    _ORDERS[id(graph)] = order
    return order


class Frontier:
    """The activations of one run and the order they run in.

    The heap holds one int per activation, ``-seq * width + rank``: ordering those ints is
    ordering ``(-seq, key)`` pairs (most recent first, ties by key), without comparing
    tuples and strings at every push and pop (``rank`` is the key's place in key order,
    ``width`` the number of nodes; ``node_order``). ``rank`` is loaded at the first push.
    """

    __slots__ = (
        "backlog",
        "blocked",
        "feeds",
        "heap",
        "held",
        "joins",
        "keys",
        "live",
        "order",
        "parked",
        "pending",
        "rank",
        "width",
    )

    graph: CompiledGraph
    input: Any
    runs: RunsByNode
    pending: dict[str, Pending]
    """Per node, the activation it runs with next (the head of its queue)."""
    backlog: dict[str, list[Pending]]
    """Per node, later activations: a second delivery to a port the newest activation
    already holds is another run (an OR-join runs once per delivery)."""
    heap: list[int]
    rank: dict[str, int] | None
    keys: tuple[str, ...]
    width: int
    joins: frozenset[str]
    """The graph's AND-joins (empty without any, where nothing is counted)."""
    order: GraphOrder
    feeds: dict[str, tuple[tuple[str, str], ...]] | None
    """``graph.join_feeds()``, or None when the workflow has no AND-join (nothing to count)."""
    live: dict[tuple[str, str], int]
    """Per AND-join port ``(join, port)``: how many pending nodes can still feed it."""
    blocked: dict[str, int]
    """Per pending AND-join: its ports without data in the head activation that can still
    get some (a live feeder). The join is ready when this is 0."""
    held: set[str]
    """Nodes paused (a retry wait, a webhook, a timer, ...): still pending, so what they
    feed keeps waiting for them, but never picked; the engine resumes them."""
    parked: dict[str, int]
    """AND-joins found not ready, by the ``seq`` of their head, out of the heap: one goes
    back when its ``blocked`` count reaches 0 or it gets a delivery (a new heap entry),
    so a waiting join is not popped and pushed again at every pick."""

    def init_frontier(self) -> None:
        """Empty activations; the AND-join counts start when the graph has joins."""
        self.pending = {}
        self.backlog = {}
        self.heap = []
        self.held = set()
        graph = self.graph
        feeds = graph._feeds  # join_feeds(), read without a call once computed
        if feeds is None:
            feeds = graph.join_feeds()
        if feeds:
            self.feeds = feeds
            self.load_order()
            self.live = dict(self.order.ports)
            self.blocked = {}
            self.parked = {}
        else:  # no AND-join: the order is loaded at the first push
            self.rank, self.keys, self.width = None, (), 1
            self.feeds = None
            self.joins = _NO_JOINS
            # Rule: without AND-joins nothing writes ``live``, ``blocked`` or ``parked`` (every
            # write is behind ``feeds``, a join key or a ``blocked`` entry), so runs share one
            # empty dict (a test holds it empty after runs without joins).
            self.live = self.blocked = self.parked = _EMPTY_COUNTS

    def recount(self) -> None:
        """Compute ``live`` and ``blocked`` from ``pending`` (after loading an execution)."""
        if self.feeds is None:
            return
        live = dict(self.order.ports)
        for key in self.pending:
            for pair in self.feeds.get(key, ()):
                live[pair] += 1
        self.live = live
        self.blocked.clear()  # in place: ``Run.drive`` holds the containers of the frontier
        self.parked.clear()
        for key in self.pending:
            if key in self.joins:
                self.blocked[key] = self._blocked_ports(key)

    def enter(self, key: str, activation: Pending) -> None:
        """Make ``activation`` the head of ``key``, which was not pending."""
        pending = self.pending
        pending[key] = activation
        feeds = self.feeds
        if feeds is None:
            return
        if key in feeds:  # ``key`` feeds these ports now: a count that leaves 0 is live again
            live = self.live
            for pair in feeds[key]:
                before = live[pair]
                live[pair] = before + 1
                if not before and pair[0] in pending:
                    join, port = pair
                    if port not in pending[join].sources:
                        self.blocked[join] += 1  # a step up never makes a join ready
        if key in self.joins:
            self.blocked[key] = self._blocked_ports(key)

    def leave(self, key: str) -> None:
        """``key`` is no longer pending (it ran and has no queued activation)."""
        feeds = self.feeds
        pending = self.pending
        if pending.pop(key, None) is None or feeds is None:
            return
        blocked = self.blocked
        if key in blocked:
            del blocked[key]
            self.parked.pop(key, None)
        if key in feeds:  # ``key`` fed these ports: a count that reaches 0 is dead now
            live = self.live
            for pair in feeds[key]:
                after = live[pair] - 1
                live[pair] = after
                if not after and pair[0] in pending:
                    join, port = pair
                    head = pending[join]
                    if port not in head.sources:
                        waiting = blocked[join] = blocked[join] - 1
                        if not waiting and self.parked.pop(join, None) is not None:
                            self.push(head.seq, join)  # ready now

    def _blocked_ports(self, join: str) -> int:
        sources = self.pending[join].sources
        live = self.live
        return sum(
            1
            for port in self.graph.nodes[join].in_ports
            if port not in sources and live[join, port]
        )

    def push(self, seq: int, key: str) -> None:
        """Put an activation of ``key`` with ``seq`` on the heap."""
        rank = self.rank
        if rank is None:
            rank = self.load_order()
        heapq.heappush(self.heap, rank[key] - seq * self.width)

    def load_order(self) -> dict[str, int]:
        order = self.order = graph_order(self.graph)
        self.rank, self.keys, self.width = order.rank, order.keys, len(order.keys)
        self.joins = order.joins
        return order.rank

    def rebuild_heap(self) -> None:
        """The heap of every head activation in ``pending`` (after loading an execution).

        A lone pending node needs none: ``pick_ready`` (and ``drive``) take it directly.
        """
        heap = self.heap
        heap.clear()  # in place: ``Run.drive`` holds the containers of the frontier
        if len(self.pending) <= 1:
            return
        rank = self.rank if self.rank is not None else self.load_order()
        width = self.width
        heap.extend(rank[k] - p.seq * width for k, p in self.pending.items())
        heapq.heapify(heap)

    def pick_ready(self) -> str | None:
        """The next node to run: most recently activated first, ties by key.

        ``heap`` holds ``-seq * width + rank`` for every activation; entries made stale by a
        later activation (or by the node running) are dropped when they surface.
        """
        pending = self.pending
        heap = self.heap
        held = self.held
        if len(pending) == 1:
            heap.clear()  # every other entry is stale: only this node is pending
            key = next(iter(pending))
            return None if key in held else key
        parked, blocked = self.parked, self.blocked
        keys, width = self.keys, self.width  # loaded by the push of any entry
        while heap:
            entry = heapq.heappop(heap)
            rank = entry % width
            key = keys[rank]
            p = pending.get(key)
            if p is None or rank - p.seq * width != entry or key in held:
                continue  # stale (the node ran, or has a later activation), or paused
            if key not in blocked or self._ready(key):  # only an AND-join may wait
                return key
            parked[key] = p.seq
        # Every pending node waits on another: run the most recent one, never deadlock.
        waiting = [(-seq, key) for key, seq in parked.items() if pending[key].seq == seq]
        if not waiting:
            return None
        if held:  # a join may wait for a paused branch: the execution pauses instead
            for _, key in waiting:
                self.push(parked.pop(key), key)
            parked.clear()
            return None
        _, chosen = min(waiting)
        for _, key in waiting:
            self.push(parked.pop(key), key)
        parked.clear()
        return chosen

    def _ready(self, key: str) -> bool:
        """Whether ``key`` may run: no port without data can still get some.

        Only AND-joins have a ``blocked`` count; any other node is always ready.
        """
        return not self.blocked.get(key)

    def build_input(self, key: str, pending: Pending | None) -> dict[str, Any]:
        """The node's input, rebuilt from its sources' latest outputs (never cached)."""
        if key == self.graph.trigger:
            return {"main": self.input}
        if pending is None:
            return {}
        result: dict[str, Any] = {}
        runs = self.runs
        completed = NODE_COMPLETED
        for port, source in pending.sources.items():
            if len(source) == 3:  # the common case first: the source's latest run delivered it
                src, src_port, index = source
                if type(runs) is OpenRuns:  # a loaded source stays unread (prana._noderuns)
                    output = runs.delivered(src, src_port, index)
                    if output is not NOT_DELIVERED:
                        result[port] = output
                        continue
                else:
                    last = runs[src][-1]
                    if (
                        last.execution_index == index
                        and last.status is completed
                        and last.output_port == src_port
                    ):
                        result[port] = last.output
                        continue
            src, src_port = source[0], source[1]
            index = source[2] if len(source) > 2 else None  # records before 0.1 lack it
            records = runs.get(src, ())
            for record in reversed(records):
                if index is not None and record.execution_index != index:
                    if record.execution_index < index:
                        break
                    continue
                if record.status is NodeStatus.COMPLETED and record.output_port == src_port:
                    result[port] = record.output
                    break
        return result

    def consume_activation(self, key: str) -> None:
        """The node ran with its head activation: the next queued one (if any) takes its place."""
        queue = self.backlog.get(key)
        if queue:
            head = self.pending[key] = queue.pop(0)
            if not queue:
                del self.backlog[key]
            if key in self.blocked:
                blocked = self.blocked[key] = self._blocked_ports(key)
                if blocked:
                    self.parked[key] = head.seq  # waits out of the heap
                    return
                self.parked.pop(key, None)
            self.push(head.seq, key)
        else:
            self.leave(key)

    def deliver(self, key: str, port: str, seq: int) -> None:
        for target, to_port in self.graph.nodes[key].outgoing.get(port, ()):
            pending = self.pending.get(target)
            if pending is None:
                head = Pending()  # new_pending, inlined
                head.seq, head.sources = seq, {to_port: (key, port, seq)}
                if self.feeds is None:  # ``enter`` without AND-joins: only ``pending`` changes
                    self.pending[target] = head
                else:
                    self.enter(target, head)
            else:
                queue = self.backlog.get(target)
                newest = queue[-1] if queue else pending
                if to_port in newest.sources:
                    self.backlog.setdefault(target, []).append(
                        new_pending(seq, {to_port: (key, port, seq)})
                    )
                else:
                    newest.sources[to_port] = (key, port, seq)
                    if newest is pending and target in self.joins and self.live[target, to_port]:
                        self.blocked[target] -= 1  # a port that could still get data got it
                pending.seq = seq
            blocked = self.blocked
            if blocked and blocked.get(target):
                self.parked[target] = seq  # an AND-join that must wait: out of the heap
            else:
                if self.parked:
                    self.parked.pop(target, None)
                rank = self.rank  # ``push``, inlined: every delivery pushes
                if rank is None:
                    rank = self.load_order()
                heapq.heappush(self.heap, rank[target] - seq * self.width)
