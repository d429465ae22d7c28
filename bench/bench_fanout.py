"""Async fan-out benchmark (issue 23): 1 -> N -> 1, each branch awaiting a fixed delay.

Run by hand: ``python bench/bench_fanout.py [--width 100] [--delay 0.05] [--rounds 3]``.
Rows, all from one run (best of ``--rounds``):

- ``asyncio.gather``: the N coroutines awaited together (the floor);
- ``ideal of 10 rounds``: ``10 * delay`` when at most N / 10 run at once;
- ``prana, max_concurrency=N`` and ``=N/10``: ``aexecute_workflow`` on the workflow
  ``start -> b000 .. b{N-1} -> join`` (``join`` an AND-join on N ports).

Issue 23's targets: ``max_concurrency=N`` at most 1.3x gather, ``=N/10`` at most 1.3x the
ideal of 10 rounds. Until section 9 is built ``Workflow`` has no ``max_concurrency``: the
prana row runs once, one branch at a time (about ``N * delay``), and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import attrs

from prana import (
    ActionContext,
    Completed,
    Connection,
    Node,
    Registry,
    Workflow,
    aexecute_workflow,
)

HAS_BOUND = "max_concurrency" in attrs.fields_dict(Workflow)


def fan_out(width: int, bound: int | None) -> Workflow:
    """``start -> b000 .. -> join``: ``join`` takes each branch on a port of its own."""
    keys = [f"b{i:03d}" for i in range(width)]
    nodes = [
        Node(key="start", type="manual.trigger"),
        *(Node(key=k, type="bench.sleep") for k in keys),
        Node(key="join", type="bench.join"),
    ]
    connections = [Connection(from_node="start", to_node=k) for k in keys] + [
        Connection(from_node=k, to_node="join", to_port=k) for k in keys
    ]
    fields: dict[str, Any] = {} if bound is None else {"max_concurrency": bound}
    return Workflow(id="fanout", nodes=nodes, connections=connections, **fields)


def registry(delay: float) -> Registry:
    async def sleep(params: Any, ctx: ActionContext) -> Any:
        await asyncio.sleep(delay)
        return ctx.node_key

    def join(params: Any, ctx: ActionContext) -> Any:
        return len(ctx.input)

    reg = Registry()
    reg.register("bench.sleep", sleep)
    reg.register("bench.join", join)
    return reg


def best(rounds: int, run: Callable[[], Coroutine[Any, Any, None]]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        asyncio.run(run())
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    width, delay, rounds = args.width, args.delay, args.rounds
    reg = registry(delay)

    async def gather() -> None:
        await asyncio.gather(*(asyncio.sleep(delay) for _ in range(width)))

    def prana(bound: int | None) -> Callable[[], Coroutine[Any, Any, None]]:
        wf = fan_out(width, bound)

        async def run() -> None:
            outcome = await aexecute_workflow(wf, {}, registry=reg)
            assert isinstance(outcome, Completed), outcome
            assert outcome.output == width

        return run

    floor = best(rounds, gather)
    rows: list[tuple[str, float, float]] = [("asyncio.gather", floor, floor)]
    ideal = 10 * delay
    rows.append(("ideal of 10 rounds", ideal, ideal))
    if HAS_BOUND:
        rows.append((f"prana, max_concurrency={width}", best(rounds, prana(width)), floor))
        tenth = max(1, width // 10)
        rows.append((f"prana, max_concurrency={tenth}", best(rounds, prana(tenth)), ideal))
    else:
        name = "prana, one branch at a time (no max_concurrency yet)"
        rows.append((name, best(1, prana(None)), floor))
    print(f"fan-out 1 -> {width} -> 1, each branch awaiting {delay * 1000:g} ms (best of {rounds})")
    print(f"{'row':<56} {'seconds':>8} {'ratio':>8}")
    for name, seconds, base in rows:
        print(f"{name:<56} {seconds:8.3f} {seconds / base:7.2f}x")


if __name__ == "__main__":
    main()
