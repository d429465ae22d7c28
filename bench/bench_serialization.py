"""Benchmark ``prana.dumps``/``prana.loads`` on executions of growing size.

Each node has one ``NodeExecution`` with one ``AttemptRecord`` and small dict params and
output, like a finished run of a straight workflow; the execution is suspended on a
retry so the suspension path is measured too. Prints one row per size and path:
``dumps``/``loads`` (the generated body reader and writer, runs as rows) and cattrs'
generic hooks alone (runs as objects of their fields), so the table shows whether the
generated code still pays.

A second table times what a worker does per retry: ``loads`` a stored execution of a
chain of N nodes suspended on its last node, ``resume_workflow`` it to completion, and
``dumps`` the result (the executor runs for real, with a ``ManualClock``).

Run: ``.venv/bin/python bench/bench_serialization.py [--sizes 10,100,1000]``
"""

from __future__ import annotations

import argparse
import timeit
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from prana import (
    SCHEMA_VERSION,
    AttemptOutcome,
    AttemptRecord,
    Connection,
    ErrorInfo,
    ExecutionStatus,
    Node,
    NodeExecution,
    NodeSettings,
    NodeStatus,
    Registry,
    RetryData,
    Suspend,
    Workflow,
    WorkflowExecution,
    dumps,
    execute_workflow,
    loads,
    make_converter,
    resume_workflow,
)
from prana._model import slot_twin
from prana.testing import ManualClock

START = datetime(2030, 1, 1, tzinfo=timezone.utc)


def build_execution(nodes: int) -> WorkflowExecution:
    """A suspended execution with ``nodes`` completed node runs, one attempt each."""
    runs: dict[str, tuple[NodeExecution, ...]] = {}
    for i in range(nodes):
        started = START + timedelta(milliseconds=10 * i)
        ended = started + timedelta(milliseconds=7)
        runs[f"node_{i}"] = (
            NodeExecution(
                node_key=f"node_{i}",
                status=NodeStatus.COMPLETED,
                execution_index=i,
                run_index=0,
                started_at=started,
                completed_at=ended,
                params={"url": f"https://example.com/{i}", "retries": 3},
                output={"status": 200, "items": [i, i + 1], "ok": True},
                output_port="main",
                attempts=(
                    AttemptRecord(
                        number=1,
                        started_at=started,
                        ended_at=ended,
                        outcome=AttemptOutcome.COMPLETED,
                    ),
                ),
            ),
        )
    error = ErrorInfo(
        code="action_error", type="ConnectionError", module="builtins", message="reset"
    )
    return WorkflowExecution(
        id="exec-1",
        workflow_id="bench",
        workflow_version=1,
        status=ExecutionStatus.SUSPENDED,
        input={"n": nodes},
        node_executions=runs,
        next_index=nodes,
        suspended_node=f"node_{nodes - 1}",
        suspension=Suspend(
            "retry",
            RetryData(
                retry_delay_ms=1000,
                attempt_number=2,
                max_attempts=3,
                original_error=error,
                resume_at=START + timedelta(hours=1),
            ),
        ),
        started_at=START,
        updated_at=START + timedelta(seconds=nodes),
    )


def resume_cycle_us(size: int) -> tuple[float, float, float, int]:
    """Microseconds to ``loads``, ``resume_workflow`` and ``dumps`` a suspended chain."""
    registry = Registry()

    def step(params: Any, ctx: Any) -> dict[str, Any]:
        return {"status": 200, "items": [1, 2], "ok": True}

    def flaky(params: Any, ctx: Any) -> dict[str, Any]:
        if ctx.attempt == 1:
            raise ConnectionError("reset")
        return {"done": True}

    registry.register("bench.step", step)
    registry.register("bench.flaky", flaky)
    last = Node(
        key=f"n{size - 1}",
        type="bench.flaky",
        settings=NodeSettings(retry_on_failed=True, retry_delay_ms=0),
    )
    nodes = [Node(key="n0", type="manual.trigger")]
    nodes += [Node(key=f"n{i}", type="bench.step", params={"i": i}) for i in range(1, size - 1)]
    fields: dict[str, Any] = {
        "id": "bench",
        "nodes": (*nodes, last),
        "connections": tuple(
            Connection(from_node=f"n{i}", to_node=f"n{i + 1}") for i in range(size - 1)
        ),
    }
    workflow = Workflow(**fields)
    clock = ManualClock()
    outcome = execute_workflow(workflow, {"n": size}, registry=registry, clock=clock)
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    text = dumps(outcome.execution)
    execution = loads(text)
    done = resume_workflow(execution, None, workflow=workflow, registry=registry, clock=clock)
    assert done.execution is not None
    number = max(1, 5_000 // size)
    loads_us = best_us(lambda: loads(text), number)
    resume_us = best_us(
        lambda: resume_workflow(execution, None, workflow=workflow, registry=registry, clock=clock),
        number,
    )
    finished = done.execution
    dumps_us = best_us(lambda: dumps(finished), number)
    return loads_us, resume_us, dumps_us, len(text)


def best_us(fn: Any, number: int) -> float:
    """The best of five timings of ``fn``, in microseconds per call."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def measure(size: int, generic: Any) -> list[tuple[str, float, float, int]]:
    """Rows (hooks, dumps us, loads us, bytes) for one execution of ``size`` nodes."""

    def generic_dumps(execution: WorkflowExecution) -> str:
        body = generic.unstructure(execution, WorkflowExecution)
        # The converter's own hooks write each run as an object of its fields.
        return orjson.dumps({"schema_version": 1, "execution": body}).decode()

    def generic_loads(text: str) -> WorkflowExecution:
        result: WorkflowExecution = generic.structure(
            orjson.loads(text)["execution"], WorkflowExecution
        )
        return result

    execution = build_execution(size)
    text = dumps(execution)
    assert loads(text) == execution
    assert generic_loads(generic_dumps(execution)) == execution
    number = max(1, 20_000 // size)
    rows = []
    for name, dump, load in (
        ("rows", dumps, loads),
        ("objects", generic_dumps, generic_loads),
    ):
        written = dump(execution)
        dumps_us = best_us(lambda: dump(execution), number)  # noqa: B023 - used at once
        loads_us = best_us(lambda: load(written), number)  # noqa: B023 - used at once
        rows.append((name, dumps_us, loads_us, len(written.encode())))
    return rows


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="node counts, comma-separated")
    args = parser.parse_args()
    generic = make_converter()
    twins = [cl.__name__ for cl in (NodeExecution, AttemptRecord) if slot_twin(cl) is not None]
    print(f"schema version {SCHEMA_VERSION}; built through slot twins: {twins or 'none'}")
    header = ("records", "hooks", "dumps us", "loads us", "total us", "bytes")
    print("{:>8} {:>8} {:>10} {:>10} {:>10} {:>8}".format(*header))
    for size in (int(s) for s in args.sizes.split(",")):
        for name, d, lo, size_bytes in measure(size, generic):
            print(f"{size:>8} {name:>8} {d:>10.1f} {lo:>10.1f} {d + lo:>10.1f} {size_bytes:>8}")
    print()
    header = ("chain", "loads us", "resume us", "dumps us", "total us", "bytes")
    print("{:>8} {:>10} {:>10} {:>10} {:>10} {:>8}".format(*header))
    for size in (int(s) for s in args.sizes.split(",")):
        lo, r, d, size_bytes = resume_cycle_us(size)
        print(f"{size:>8} {lo:>10.1f} {r:>10.1f} {d:>10.1f} {lo + r + d:>10.1f} {size_bytes:>8}")


if __name__ == "__main__":
    main()
