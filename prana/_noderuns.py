"""``NodeRuns``: a loaded execution's node runs, each node's built only when first read.

``prana.loads`` checks every stored run row of a document before it returns
(``prana._compact.check_run``: the same rules the row reader applies, so a corrupt record
is still refused by ``loads``, naming the field), but builds no ``NodeExecution`` or
``AttemptRecord``: ``WorkflowExecution.node_executions`` is then a ``NodeRuns``, which
keeps each node's raw rows until that node is first looked up, then builds its tuple of
runs and keeps it. A resume reads a handful of nodes of a long execution; ``dumps``
writes an untouched node's raw rows back as they were read.

From the user's view it is a read-only mapping of node key to tuple of runs, equal to
(and with the ``repr`` and pickle of) the plain ``dict`` it stands for: equality, ``repr``,
pickling and copies build every node first and act on that ``dict``; it is unhashable,
as a ``dict`` is. The engine resumes from a private mutable copy (``OpenRuns``, from
``NodeRuns.thawed``), which stays lazy, and freezes it back with ``OpenRuns.copy``.

Rule: a raw value (a ``list`` of rows; a built value is always a ``tuple``) is put in a
``NodeRuns`` only after ``check_run`` accepted every row of it, so building it cannot
fail; ``tests/test_node_runs.py`` holds the checker and the builder to the same rules.

A resume reads one thing of the runs that fed the node it continues: what the source's
latest run delivered (``delivered``), and that the source ran at all (``has_runs``). Both
are read off a checked raw row (``prana._compact.peek_delivery``) without building it, so
the nodes upstream of a resumed one stay unread; ``tests/test_node_runs.py`` holds the
peek to the built record over the same generated rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeAlias

from prana._errors import RecordError
from prana._model import NodeExecution
from prana._state import NODE_COMPLETED

Runs = tuple[NodeExecution, ...]
Build = Callable[[str, list[Any]], Runs]
"""Build one node's runs from its checked raw rows (``prana._compact``'s reader)."""
Peek = Callable[[list[Any], str, Any], Any]
"""``NodeRuns.delivered`` of one checked raw row (``prana._compact.peek_delivery``)."""

NOT_DELIVERED: Final[Any] = object()
"""``delivered``'s answer when the latest run did not deliver what was asked."""
RunsByNode: TypeAlias = "dict[str, Runs] | OpenRuns"
"""The engine's runs per node: a plain ``dict``, or an ``OpenRuns`` when resuming a loaded
execution (both give ``get``, ``[]``, ``[]=`` and ``copy``)."""

_MISSING: Final = object()


class NodeRuns(Mapping[str, Runs]):
    """Node key -> tuple of runs, oldest first; each node's runs built when first read."""

    __slots__ = ("_build", "_d", "_peek")

    def __init__(self, items: dict[str, Any], build: Build, peek: Peek) -> None:
        self._d = items
        """Per node: its built tuple, or its checked raw rows (a ``list``) until first read."""
        self._build = build
        self._peek = peek

    def _get(self, key: str, value: Any) -> Runs:
        """Build ``key``'s runs from ``value``, its raw rows, and keep them."""
        try:
            built = self._build(key, value)
        except Exception as exc:  # pragma: no cover - check_run accepted these rows
            raise RecordError(
                "cannot read the execution",
                [f"$.execution.node_executions[{key!r}]: {exc!r} (checked rows failed to build)"],
            ) from exc
        self._d[key] = built
        return built

    def __getitem__(self, key: str) -> Runs:
        value = self._d[key]
        return self._get(key, value) if value.__class__ is list else value

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, or ``default`` when ``key`` has no runs."""
        value = self._d.get(key, _MISSING)
        if value is _MISSING:
            return default
        return self._get(key, value) if value.__class__ is list else value

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def has_runs(self, key: str) -> bool:
        """``bool(self.get(key))``, without building: a node's rows build one run each."""
        return bool(self._d.get(key))

    def delivered(self, key: str, port: str, index: Any) -> Any:
        """The output of ``key``'s latest run if that run is execution ``index`` and
        completed on ``port``, else ``NOT_DELIVERED``; read off its raw row if unread.

        ``key`` must have a run (``has_runs``), as ``self[key][-1]`` needs.
        """
        value = self._d[key]
        if value.__class__ is list:
            return self._peek(value[-1], port, index)
        last = value[-1]
        if (
            last.execution_index == index
            and last.status is NODE_COMPLETED
            and last.output_port == port
        ):
            return last.output
        return NOT_DELIVERED

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def built(self) -> dict[str, Runs]:
        """Every node built: the plain ``dict`` this mapping stands for (a new one)."""
        d = self._d
        for key, value in d.items():
            if value.__class__ is list:
                self._get(key, value)
        return dict(d)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeRuns):
            return self.built() == other.built()
        if isinstance(other, Mapping):
            return self.built() == (other if type(other) is dict else dict(other.items()))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] # unhashable, as the dict it stands for

    def __repr__(self) -> str:
        return repr(self.built())

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and copied as the plain ``dict`` (every node built)."""
        return (dict, (self.built(),))

    def raw_items(self) -> dict[str, Any]:
        """The values as kept: a tuple of runs, or raw rows not built yet (for ``dumps``)."""
        return self._d

    def thawed(self) -> OpenRuns:
        """A private mutable copy for the engine, as lazy as this one."""
        return OpenRuns(self._d.copy(), self._build, self._peek)


class OpenRuns(NodeRuns):
    """The engine's mutable copy of a ``NodeRuns`` (never handed to users)."""

    __slots__ = ()

    def __setitem__(self, key: str, value: Runs) -> None:
        self._d[key] = value

    def copy(self) -> NodeRuns:
        """A frozen snapshot: what the engine hands back in an execution."""
        return NodeRuns(self._d.copy(), self._build, self._peek)
