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
``deliver``/``consume_activation``/``recount``**; a property test compares the counts with
the graph walk (``CompiledGraph.reachable_from``) at every pick of random workflows.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from prana._errors import ResumeError
from prana._graph import CompiledGraph
from prana._model import NodeStatus, WorkflowExecution
from prana._noderuns import RunsByNode


class Pending:
    """An activation: the ``seq`` of its latest delivery and each input port's source."""

    __slots__ = ("seq", "sources")

    def __init__(self, seq: int, sources: dict[str, tuple[Any, ...]]) -> None:
        self.seq = seq
        self.sources = sources


def check_pending(graph: CompiledGraph, execution: WorkflowExecution) -> None:
    """Refuse a record whose pending nodes, or the runs that fed them, are not there.

    Only a record edited by hand has them; running it would fail deep in the engine
    after a shell took its claim, so it is refused before anything runs.
    """
    nodes = graph.nodes
    ran = execution.node_executions
    for activation in execution.pending:
        key = activation.node_key
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


class Frontier:
    """The activations of one run and the order they run in."""

    __slots__ = ("backlog", "blocked", "feeds", "heap", "live", "parked", "pending")

    graph: CompiledGraph
    input: Any
    runs: RunsByNode
    pending: dict[str, Pending]
    """Per node, the activation it runs with next (the head of its queue)."""
    backlog: dict[str, list[Pending]]
    """Per node, later activations: a second delivery to a port the newest activation
    already holds is another run (an OR-join runs once per delivery)."""
    heap: list[tuple[int, str]]
    feeds: dict[str, tuple[tuple[str, str], ...]] | None
    """``graph.join_feeds()``, or None when the workflow has no AND-join (nothing to count)."""
    live: dict[tuple[str, str], int]
    """Per AND-join port ``(join, port)``: how many pending nodes can still feed it."""
    blocked: dict[str, int]
    """Per pending AND-join: its ports without data in the head activation that can still
    get some (a live feeder). The join is ready when this is 0."""
    parked: dict[str, int]
    """AND-joins found not ready, by the ``seq`` of their head, out of the heap: one goes
    back when its ``blocked`` count reaches 0 or it gets a delivery (a new heap entry),
    so a waiting join is not popped and pushed again at every pick."""

    def init_frontier(self) -> None:
        """Empty activations; the AND-join counts start when the graph has joins."""
        self.pending = {}
        self.backlog = {}
        self.heap = []
        feeds = self.graph.join_feeds()
        self.feeds = feeds or None
        self.live = {}
        self.blocked = {}
        self.parked = {}

    def recount(self) -> None:
        """Compute ``live`` and ``blocked`` from ``pending`` (after loading an execution)."""
        if self.feeds is None:
            return
        live: dict[tuple[str, str], int] = {}
        for key in self.pending:
            for pair in self.feeds.get(key, ()):
                live[pair] = live.get(pair, 0) + 1
        self.live = live
        self.blocked = {}
        self.parked = {}
        nodes = self.graph.nodes
        for key in self.pending:
            if len(nodes[key].in_ports) > 1:
                self.blocked[key] = self._blocked_ports(key)

    def enter(self, key: str, activation: Pending) -> None:
        """Make ``activation`` the head of ``key``, which was not pending."""
        self.pending[key] = activation
        feeds = self.feeds
        if feeds is not None:
            pairs = feeds.get(key)
            if pairs:
                self._count_feeds(pairs, 1)
            if len(self.graph.nodes[key].in_ports) > 1:
                self.blocked[key] = self._blocked_ports(key)

    def leave(self, key: str) -> None:
        """``key`` is no longer pending (it ran and has no queued activation)."""
        feeds = self.feeds
        if self.pending.pop(key, None) is None or feeds is None:
            return
        if self.blocked.pop(key, None) is not None:
            self.parked.pop(key, None)
        pairs = feeds.get(key)
        if pairs:
            self._count_feeds(pairs, -1)

    def _count_feeds(self, pairs: tuple[tuple[str, str], ...], step: int) -> None:
        """A node that feeds ``pairs`` entered (``step`` 1) or left (-1) ``pending``."""
        live = self.live
        for pair in pairs:
            before = live.get(pair, 0)
            after = live[pair] = before + step
            if before and after:
                continue  # the port's liveness did not change
            join, port = pair
            head = self.pending.get(join)
            if head is not None and port not in head.sources:
                blocked = self.blocked[join] = self.blocked[join] + step
                if not blocked and self.parked.pop(join, None) is not None:
                    heapq.heappush(self.heap, (-head.seq, join))  # ready now

    def _blocked_ports(self, join: str) -> int:
        head = self.pending[join]
        live = self.live
        return sum(
            1
            for port in self.graph.nodes[join].in_ports
            if port not in head.sources and live.get((join, port), 0)
        )

    def activate(self, key: str, seq: int) -> None:
        heapq.heappush(self.heap, (-seq, key))

    def pick_ready(self) -> str | None:
        """The next node to run: most recently activated first, ties by key.

        ``heap`` holds ``(-seq, key)`` for every activation; entries made stale by a later
        activation (or by the node running) are dropped when they surface.
        """
        pending = self.pending
        heap = self.heap
        if len(pending) == 1:
            heap.clear()  # every other entry is stale: only this node is pending
            return next(iter(pending))
        parked = self.parked
        while heap:
            neg_seq, key = heapq.heappop(heap)
            p = pending.get(key)
            if p is None or p.seq != -neg_seq:
                continue
            if self._ready(key):
                return key
            parked[key] = -neg_seq
        # Every pending node waits on another: run the most recent one, never deadlock.
        waiting = [(-seq, key) for key, seq in parked.items() if pending[key].seq == seq]
        if not waiting:
            return None
        _, chosen = min(waiting)
        for _, key in waiting:
            heapq.heappush(heap, (-parked.pop(key), key))
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
        for port, source in pending.sources.items():
            src, src_port = source[0], source[1]
            index = source[2] if len(source) > 2 else None  # records before 0.1 lack it
            records = runs.get(src, ())
            if records:  # the common case first: the source's latest run delivered it
                last = records[-1]
                if (
                    last.execution_index == index
                    and last.status is NodeStatus.COMPLETED
                    and last.output_port == src_port
                ):
                    result[port] = last.output
                    continue
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
            heapq.heappush(self.heap, (-head.seq, key))
        else:
            self.leave(key)

    def deliver(self, key: str, port: str, seq: int) -> None:
        for target, to_port in self.graph.nodes[key].outgoing.get(port, ()):
            pending = self.pending.get(target)
            if pending is None:
                self.enter(target, Pending(seq, {to_port: (key, port, seq)}))
            else:
                queue = self.backlog.get(target)
                newest = queue[-1] if queue else pending
                if to_port in newest.sources:
                    self.backlog.setdefault(target, []).append(
                        Pending(seq, {to_port: (key, port, seq)})
                    )
                else:
                    newest.sources[to_port] = (key, port, seq)
                    if newest is pending and self.live.get((target, to_port), 0):
                        self.blocked[target] -= 1  # a port that could still get data got it
                pending.seq = seq
            if self.blocked.get(target):
                self.parked[target] = seq  # an AND-join that must wait: out of the heap
            else:
                if self.parked:
                    self.parked.pop(target, None)
                heapq.heappush(self.heap, (-seq, target))
