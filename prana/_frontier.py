"""The frontier: which activated node runs next (the engine's scheduling half).

Scheduling is depth-first: the most recently activated ready node runs next, ties by key.
Several edges into one port are an OR-join (a node runs once per delivery); several ports
are an AND-join: a node waits until every port has data or can no longer get any.
``Run`` (``prana._engine``) inherits this state and these methods; it freezes ``pending``
and ``backlog`` into the execution's ``Activation`` records.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from prana._graph import CompiledGraph
from prana._model import NodeExecution, NodeStatus


class Pending:
    """An activation: the ``seq`` of its latest delivery and each input port's source."""

    __slots__ = ("seq", "sources")

    def __init__(self, seq: int, sources: dict[str, tuple[Any, ...]]) -> None:
        self.seq = seq
        self.sources = sources


class Frontier:
    """The activations of one run and the order they run in."""

    __slots__ = ("backlog", "heap", "pending")

    graph: CompiledGraph
    input: Any
    runs: dict[str, Sequence[NodeExecution]]
    pending: dict[str, Pending]
    """Per node, the activation it runs with next (the head of its queue)."""
    backlog: dict[str, list[Pending]]
    """Per node, later activations: a second delivery to a port the newest activation
    already holds is another run (an OR-join runs once per delivery)."""
    heap: list[tuple[int, str]]

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
        waiting: list[tuple[int, str]] = []
        chosen: str | None = None
        while heap:
            entry = heapq.heappop(heap)
            neg_seq, key = entry
            p = pending.get(key)
            if p is None or p.seq != -neg_seq:
                continue
            if self._ready(key):
                chosen = key
                break
            waiting.append(entry)
        if chosen is None and waiting:
            chosen = waiting.pop(0)[1]  # every node waits on another: run one, never deadlock
        for entry in waiting:
            heapq.heappush(heap, entry)
        return chosen

    def _ready(self, key: str) -> bool:
        in_ports = self.graph.nodes[key].in_ports
        if len(in_ports) <= 1:
            return True
        delivered = self.pending[key].sources
        waiting = [p for p in in_ports if p not in delivered]
        if not waiting:
            return True
        live = self.graph.reachable_from((k for k in self.pending if k != key), avoid=key)
        return not any(src in live for p in waiting for src, _ in in_ports[p])

    def build_input(self, key: str, pending: Pending | None) -> dict[str, Any]:
        """The node's input, rebuilt from its sources' latest outputs (never cached)."""
        if key == self.graph.trigger:
            return {"main": self.input}
        if pending is None:
            return {}
        result: dict[str, Any] = {}
        for port, source in pending.sources.items():
            src, src_port = source[0], source[1]
            index = source[2] if len(source) > 2 else None  # records before 0.1 lack it
            for record in reversed(self.runs.get(src, ())):
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
            heapq.heappush(self.heap, (-head.seq, key))
        else:
            self.pending.pop(key, None)

    def deliver(self, key: str, port: str, seq: int) -> None:
        for target, to_port in self.graph.nodes[key].outgoing.get(port, ()):
            pending = self.pending.get(target)
            if pending is None:
                self.pending[target] = Pending(seq, {to_port: (key, port, seq)})
            else:
                queue = self.backlog.get(target)
                newest = queue[-1] if queue else pending
                if to_port in newest.sources:
                    self.backlog.setdefault(target, []).append(
                        Pending(seq, {to_port: (key, port, seq)})
                    )
                else:
                    newest.sources[to_port] = (key, port, seq)
                pending.seq = seq
            heapq.heappush(self.heap, (-seq, target))
