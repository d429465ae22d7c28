"""Core benchmark: per-node cost, a retry cycle, a JSON round trip, import time.

Run by hand: ``python bench/bench_core.py``. Prints one table; each row compares prana with
a plain-Python loop doing the same work (calling the same trivial functions), measured in
the same run. Targets (issue 2): <= 5 us per node at N = 1,000; per-node cost at 10,000
within 1.3x of 1,000; a retry cycle <= 10 us; 100-node dumps+loads+resume <= 300 us;
``import prana`` <= 80 ms.
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from prana import (
    ActionContext,
    Completed,
    Connection,
    Node,
    NodeSettings,
    Registry,
    Suspend,
    Workflow,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)


def inc(params: Any, ctx: ActionContext) -> Any:
    """The trivial node: add one to the input."""
    return ctx.input["main"] + 1


def best_of(fn: Callable[[], object], repeat: int = 5, number: int = 1) -> float:
    """The best per-call time in seconds over ``repeat`` rounds of ``number`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def chain_workflow(n: int) -> Workflow:
    keys = ["start"] + [f"n{i}" for i in range(n)]
    nodes = [Node(key="start", type="manual.trigger")] + [
        Node(key=k, type="bench.inc") for k in keys[1:]
    ]
    conns = [Connection(from_node=a, to_node=b) for a, b in itertools.pairwise(keys)]
    return Workflow(id=f"chain{n}", nodes=nodes, connections=conns, max_iterations=10)


def fan_workflow(width: int) -> Workflow:
    nodes = [Node(key="start", type="manual.trigger"), Node(key="sink", type="bench.count")]
    conns = []
    for i in range(width):
        nodes.append(Node(key=f"m{i:03d}", type="bench.inc"))
        conns.append(Connection(from_node="start", to_node=f"m{i:03d}"))
        conns.append(Connection(from_node=f"m{i:03d}", to_node="sink"))
    return Workflow(id="fan", nodes=nodes, connections=conns)


def plain_chain(n: int) -> int:
    """What a hand-written loop pays for the same work: one call per node, one dict per call."""
    value = 0
    for _ in range(n):
        value = inc({}, _FakeCtx({"main": value}))  # type: ignore[arg-type]
    return value


class _FakeCtx:
    __slots__ = ("input",)

    def __init__(self, input: dict[str, Any]) -> None:
        self.input = input


def main() -> None:
    registry = Registry()
    registry.register("bench.inc", inc)
    registry.register("bench.count", lambda p, ctx: 1)
    rows: list[tuple[str, float, float, str]] = []

    per_node: dict[int, float] = {}
    for n in (10, 100, 1_000, 10_000):
        wf = chain_workflow(n)
        execute_workflow(wf, 0, registry=registry)
        repeat = 5 if n <= 1000 else 3
        number = max(1, 2000 // n)
        t = best_of(functools.partial(execute_workflow, wf, 0, registry=registry), repeat, number)
        base = best_of(functools.partial(plain_chain, n), repeat, number)
        per_node[n] = t / (n + 1)
        rows.append((f"chain N={n:,} (per node)", per_node[n] * 1e6, base / n * 1e6, ""))
    rows[-1] = (*rows[-1][:3], f"10k/1k = {per_node[10_000] / per_node[1_000]:.2f}x")

    fan = fan_workflow(100)
    assert isinstance(execute_workflow(fan, 0, registry=registry), Completed)
    t = best_of(lambda: execute_workflow(fan, 0, registry=registry), 5, 20)
    rows.append(
        (
            "fan-out 1->100->1 (whole run)",
            t * 1e6,
            best_of(lambda: plain_chain(201), 5, 20) * 1e6,
            "",
        )
    )

    state = {"fail": True}

    def flaky(params: Any, ctx: ActionContext) -> Any:
        if state["fail"]:
            raise ConnectionError("down")
        return 1

    registry.register("bench.flaky", flaky)
    retry_wf = Workflow(
        id="retry",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="bench.flaky",
                settings=NodeSettings(retry_on_failed=True, retry_delay_ms=0),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    state["fail"] = True
    paused = execute_workflow(retry_wf, 0, registry=registry)
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    suspended = paused.execution
    state["fail"] = False

    def one_resume() -> None:
        resume_workflow(suspended, None, workflow=retry_wf, registry=registry)

    t_resume = best_of(one_resume, 5, 2000)
    state["fail"] = True
    t_fail = best_of(lambda: execute_workflow(retry_wf, 0, registry=registry), 5, 2000)

    def plain_retry() -> None:
        for attempt in (1, 2):
            try:
                if attempt == 1:
                    raise ConnectionError("down")
                inc({}, _FakeCtx({"main": 0}))  # type: ignore[arg-type]
            except ConnectionError:
                continue
            break

    t_plain_retry = best_of(plain_retry, 5, 2000)
    rows.append(
        (
            "retry cycle (fail, Suspend, resume, ok)",
            (t_fail + t_resume) * 1e6,
            t_plain_retry * 1e6,
            "2-node workflow",
        )
    )
    rows.append(("  of which run + fail + suspend", t_fail * 1e6, 0.0, ""))
    rows.append(("  of which resume + succeed", t_resume * 1e6, 0.0, ""))
    state["fail"] = False

    for n in (10, 100):
        wf = Workflow(
            id=f"sus{n}",
            nodes=[
                *chain_workflow(n).nodes,
                Node(key="wait", type="wait.wait", params={"mode": "webhook"}),
            ],
            connections=[
                *chain_workflow(n).connections,
                Connection(from_node=f"n{n - 1}", to_node="wait"),
            ],
        )
        paused = execute_workflow(wf, 0, registry=registry)
        assert isinstance(paused, Suspend)
        assert paused.execution is not None
        ex = paused.execution

        def cycle(ex: Any = ex, wf: Workflow = wf) -> None:
            resume_workflow(loads(dumps(ex)), {"ok": 1}, workflow=wf, registry=registry)

        t = best_of(cycle, 5, 200)
        t_d = best_of(functools.partial(dumps, ex), 5, 200)
        text = dumps(ex)
        t_l = best_of(functools.partial(loads, text), 5, 200)
        rows.append(
            (
                f"{n}-node dumps+loads+resume",
                t * 1e6,
                0.0,
                f"dumps {t_d * 1e6:.0f} / loads {t_l * 1e6:.0f} us, {len(text):,} B",
            )
        )

    # As installed: bytecode cached (a warm-up run writes it, even where the environment
    # sets PYTHONDONTWRITEBYTECODE, as some shells and CI runners do).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = "import time; t=time.perf_counter(); import prana; print(time.perf_counter()-t)"
    import_times = []
    for i in range(6):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        if i:
            import_times.append(float(out.stdout))
    rows.append(("import prana", statistics.median(import_times) * 1e6, 0.0, "median of 5"))

    print(f"{'case':38} {'prana us':>10} {'plain us':>10} {'ratio':>7}  note")
    for name, ours, plain, note in rows:
        ratio = f"{ours / plain:6.1f}x" if plain else "      -"
        print(f"{name:38} {ours:10.2f} {plain:10.3f} {ratio}  {note}")
    print(f"gc enabled: {gc.isenabled()}")


if __name__ == "__main__":
    main()
