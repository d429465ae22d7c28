"""The speed issue's table in one command: every row beside its baseline from the same run.

Run: ``python bench/bench_speed.py`` (peers: ``pip install -r bench/requirements.txt``).
Options: ``--rows`` picks rows by name (default all); ``--quick`` runs small sizes (a
smoke run, not figures to quote); ``--against REF`` runs the rows on this package
and on the package as it was at git ``REF`` (its ``prana/`` and ``scheduling/`` in a
temporary folder, first on ``PYTHONPATH``), each in child processes taking turns
(``--rounds``, best figure per side), so "x of today's" is one run too;
``--profile`` prints the top lines of a cProfile of each in-process row's timed part;
``--py-spy DIR`` records the two ``prana worker`` processes with py-spy while they drain.

Rows and their methods (every ratio is between figures measured in this run):

- ``workers``: two real ``prana worker --scheduler procrastinate`` processes on the local
  PostgreSQL (own schema, dropped after). The bench starts N executions of a workflow
  whose action fails once, with a frozen clock, so all N retries fall due at one instant
  after both workers are up; end to end is N / (last completion - due instant).
  Lost = executions not completed within the timeout; double transitions = records
  whose ledger differs from the in-process run's (node ``r``: one failed attempt, then
  one completed; a transition made twice adds or interrupts an attempt); extra writes =
  records whose version exceeds the in-process run's (compare-and-set writes that are
  not transitions: a lease renewal; the in-process run's clock never moves, so it makes
  none); duplicated side effects (a second call of one attempt, at-least-once) are
  counted from the actions' own log. Lateness at light
  load: M more executions due 50 ms apart, lateness = the retry attempt's start - its
  due time. Beside it: one in-process Runner (PostgresStore + ManualScheduler, one
  ``advance`` fires all N) on the same server. Its note adds the CPU per execution of the
  workers and of their server backends over the drain, and how busy the machine was
  (``CpuMeter``); with ``pg_stat_statements`` in the database, the statements per execution.
- ``sqlite``: N due retries through Runner + SQLiteStore (file, WAL, NORMAL) +
  ManualScheduler, per resume; beside it the core's own resume (``resume_workflow`` of
  the same suspended execution, no store) and a plain sqlite3 floor: for each of the N
  rows (same JSON text, same table shape), SELECT data and version, ``orjson.loads``,
  change the status, ``orjson.dumps``, UPDATE ... WHERE id AND version (autocommit).
  Its note adds the same floor with a durable claim (a committed UPDATE of the status,
  a lease column and version before the compare-and-set): the write a runner must commit
  before an action runs, so the part of the distance that no shell code can remove.
- ``timers``: N executions wait (``wait.wait``, mode schedule) for one instant; they
  are started through a ManualScheduler, then a Runner + SQLiteStore +
  APSchedulerAdapter (background thread) re-arms all from the store and fires them.
  Drain = N / (last resume - due); lateness = each wait's resume - due. Beside it, the
  same timers (a copy of the file) fired by one ``ManualScheduler.advance``: what the
  runner's resume path does without an alarm clock in between.
- ``join``: a 1 -> 100 -> 1 fan-out into one node with 100 ports (an AND-join), per
  node run, beside a chain of as many nodes, per node run.
- ``retry``: a retry cycle at zero delay, per attempt: prana runs a 2-node workflow
  (trigger, an action failing once with ``retry_on_failed``), ``execute_workflow`` ->
  ``Suspend(kind="retry")`` -> ``resume_workflow`` -> completed; tenacity
  (``@retry``, ``wait_none``, a no-op ``sleep``) and stamina (``@stamina.retry`` with zero
  waits, tenacity's sleep swapped for a no-op, and its instrumentation hooks off) retry the same
  function once.
- ``roundtrip``: a 100-node chain suspended on a webhook wait: ``loads(dumps(x))`` then
  ``resume_workflow`` to completion, per cycle (``--against`` gives today's beside it).
- ``import``: ``import prana`` as a whole process (its CPU time, median of 21) beside
  ``import tenacity``, and a process that imports prana and runs a 2-node workflow
  (``bench/bench_import.py``).
- ``bytes``: the JSON stored for that suspended execution (``dumps``, UTF-8 bytes);
  beside it LangGraph (``SqliteSaver``, the latest checkpoint's row and its writes) and
  Burr (``SQLitePersister``, the latest state row) running 100 nodes in a chain whose
  state keeps every node's output (as prana's record does), stopped before a last node.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import itertools
import json
import operator
import os
import pstats
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict

import orjson

from prana import (
    ActionContext,
    AttemptOutcome,
    Completed,
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    Workflow,
    WorkflowExecution,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _speed_actions import fails_once  # noqa: E402 - the bench folder is not a package

UTC = timezone.utc
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
ROWS = ("workers", "sqlite", "timers", "join", "retry", "roundtrip", "bytes", "import")
IN_PROCESS = ("workers", "sqlite", "timers", "join", "retry", "roundtrip", "bytes", "import")
"""Rows ``--against`` runs on the older package too (for ``workers``, its ``prana worker``
processes and the process starting the executions both run the older package)."""
RELATIVE = {"timers": 5.0, "roundtrip": 0.5, "bytes": 0.5}
"""Rows whose target is a factor of today's figure (``--against``): >= for rates, <= else."""


# -- measuring ---------------------------------------------------------------------------


class Row:
    """One line of the table: our figure, a baseline, their ratio, the target."""

    def __init__(
        self,
        name: str,
        ours: float,
        unit: str,
        baseline: float | None,
        baseline_name: str,
        target: str,
        met: bool | None,
        note: str = "",
    ) -> None:
        self.name = name
        self.ours = ours
        self.unit = unit
        self.baseline = baseline
        self.baseline_name = baseline_name
        self.target = target
        self.met = met
        self.note = note
        self.key = ""
        """The row group (``--rows`` name) that measured it."""

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


ROUND_SECONDS = 0.002
"""Each timing round lasts about this long: short enough that many rounds run unhindered
by the other processes of a shared machine, so the best round is the code's own cost."""


def race(fns: dict[str, Callable[[], object]], seconds: float = 1.0) -> dict[str, float]:
    """The best per-call time of each function, in seconds, their rounds interleaved.

    Calls are grouped in rounds of about ``ROUND_SECONDS``; the rounds of all the
    functions take turns until each had about ``seconds`` in total, with the garbage
    collector paused during a round (as ``timeit`` does). The minimum over many short
    rounds is what the code costs when nothing else runs; interleaving makes every
    function meet the same machine.
    """
    numbers = {}
    for name, fn in fns.items():
        fn()  # warm up
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        numbers[name] = max(1, int(ROUND_SECONDS / once))
    best = dict.fromkeys(fns, float("inf"))
    rounds = max(5, int(seconds / ROUND_SECONDS))
    gc.collect()
    for _ in range(rounds):
        for name, fn in fns.items():
            number = numbers[name]
            gc.disable()
            try:
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            best[name] = min(best[name], elapsed / number)
    return best


def best_of(fn: Callable[[], object], seconds: float = 1.0) -> float:
    """``race`` of one function."""
    return race({"fn": fn}, seconds)["fn"]


PROFILES: dict[str, str] = {}
PROFILES_MARK = "prana-bench-profiles: "
"""How a ``--json`` child hands its profiles back on stderr (see ``against``)."""


@contextmanager
def profiled(name: str, enabled: bool) -> Iterator[None]:
    """With ``enabled``, cProfile the block and keep its top lines under ``name``."""
    if not enabled:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out)
        order = os.environ.get("PRANA_BENCH_SORT", "tottime")  # e.g. cumtime
        stats.sort_stats(order).print_stats(int(os.environ.get("PRANA_BENCH_LINES", "18")))
        PROFILES[name] = _trim_profile(out.getvalue())


def _trim_profile(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines()]
    keep = [line for line in lines if line.strip() and "Ordered by" not in line]
    return "\n".join(line.replace(str(ROOT) + "/", "") for line in keep)


def profile_calls(name: str, fn: Callable[[], object], number: int) -> None:
    with profiled(name, True):
        for _ in range(number):
            fn()


def pct(values: list[float], q: int) -> float:
    """The ``q``-th percentile (1..99) of ``values``."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# -- workflows ---------------------------------------------------------------------------


def inc(params: Any, ctx: ActionContext) -> Any:
    """The trivial node: add one to the input."""
    return ctx.input["main"] + 1


def count_ports(params: Any, ctx: ActionContext) -> Any:
    """The join's node: how many ports delivered."""
    return len(ctx.input)


def noop(params: Any, ctx: ActionContext) -> Any:
    """Do nothing."""
    return None


def registry() -> Registry:
    reg = Registry()
    reg.register("bench.inc", inc)
    reg.register("bench.count", count_ports)
    reg.register("bench.noop", noop)
    reg.register("bench.fails_once", fails_once)
    return reg


def chain_workflow(n: int, tail: list[Node] | None = None) -> Workflow:
    """A trigger and ``n`` ``bench.inc`` nodes in a line, then ``tail`` nodes in a line."""
    nodes = [Node(key="start", type="manual.trigger")]
    nodes += [Node(key=f"n{i:03d}", type="bench.inc") for i in range(n)]
    nodes += tail or []
    keys = [node.key for node in nodes]
    conns = [Connection(from_node=a, to_node=b) for a, b in itertools.pairwise(keys)]
    return Workflow(id=f"chain{n}", nodes=nodes, connections=conns, max_iterations=10)


def and_join_workflow(width: int) -> Workflow:
    """Trigger -> ``width`` nodes -> one node with ``width`` ports (each on its own port)."""
    nodes = [Node(key="start", type="manual.trigger"), Node(key="sink", type="bench.count")]
    conns = []
    for i in range(width):
        key = f"m{i:03d}"
        nodes.append(Node(key=key, type="bench.inc"))
        conns.append(Connection(from_node="start", to_node=key))
        conns.append(Connection(from_node=key, to_node="sink", to_port=f"p{i:03d}"))
    return Workflow(id=f"andjoin{width}", nodes=nodes, connections=conns)


def retry_workflow(delay_seconds: float) -> Workflow:
    """The retry workflow with a constant delay; its id names the delay (ids never change)."""
    millis = round(delay_seconds * 1000)
    return Workflow(
        id=f"bench.retry.{millis}ms",
        nodes=(
            Node(key="start", type="manual.trigger"),
            Node(
                key="r",
                type="bench.fails_once",
                settings=NodeSettings(
                    retry=RetryPolicy(
                        max_attempts=2, initial_delay=millis / 1000, backoff="constant"
                    )
                ),
            ),
        ),
        connections=(Connection(from_node="start", to_node="r"),),
    )


def suspended_chain(reg: Registry, n: int) -> tuple[Workflow, WorkflowExecution]:
    """A chain of ``n`` nodes, then a webhook wait: the execution suspended on the wait."""
    wait = Node(key="wait", type="wait.wait", params={"mode": "webhook"})
    workflow = chain_workflow(n, [wait])
    paused = execute_workflow(workflow, 0, registry=reg, clock=ManualClock())
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    return workflow, paused.execution


# -- rows: the core ----------------------------------------------------------------------


def row_join(args: argparse.Namespace) -> list[Row]:
    reg = registry()
    width = 100
    join = and_join_workflow(width)
    chain = chain_workflow(width + 1)
    done = execute_workflow(join, 0, registry=reg)
    assert isinstance(done, Completed)
    assert done.output == width, done.output
    runs = sum(len(v) for v in done.execution.node_executions.values())
    assert runs == width + 2
    number = 3 if args.quick else 30
    seconds = 0.3 if args.quick else 2.0
    times = race(
        {
            "join": lambda: execute_workflow(join, 0, registry=reg),
            "chain": lambda: execute_workflow(chain, 0, registry=reg),
        },
        seconds,
    )
    t_join, t_chain = times["join"] / runs, times["chain"] / runs
    if args.profile:
        profile_calls("join", lambda: execute_workflow(join, 0, registry=reg), number)
    ratio = t_join / t_chain
    return [
        Row(
            "AND-join 1->100->1, per node",
            t_join * 1e6,
            "us",
            t_chain * 1e6,
            f"chain of {runs}, per node",
            "<= 1.5x the chain",
            ratio <= 1.5,
        )
    ]


def row_retry(args: argparse.Namespace) -> list[Row]:
    import stamina
    import stamina.instrumentation
    import tenacity
    import tenacity.nap

    reg = registry()
    number = 200 if args.quick else 3000
    seconds = 0.3 if args.quick else 2.0
    workflow = Workflow(
        id="retry0",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="bench.fails_once",
                settings=NodeSettings(retry_on_failed=True, retry_delay_ms=0),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )

    def prana_cycle() -> None:
        paused = execute_workflow(workflow, 0, registry=reg)
        assert isinstance(paused, Suspend)
        assert paused.execution is not None
        resume_workflow(paused.execution, None, workflow=workflow, registry=reg)

    first = execute_workflow(workflow, 0, registry=reg)
    assert isinstance(first, Suspend)
    assert first.kind == "retry"
    assert first.execution is not None
    done = resume_workflow(first.execution, None, workflow=workflow, registry=reg)
    assert isinstance(done, Completed)

    calls = [0]

    def flaky() -> int:
        """Fail every odd call: each retried call fails once, then succeeds."""
        calls[0] += 1
        if calls[0] % 2:
            raise ConnectionError("down")
        return 1

    # Decorated as users do; called through Any, as the peers may be absent where mypy runs.
    tenacity_retry: Any = tenacity.retry
    with_tenacity: Callable[[], int] = tenacity_retry(
        stop=tenacity.stop_after_attempt(2),
        wait=tenacity.wait_none(),
        retry=tenacity.retry_if_exception_type(ConnectionError),
        sleep=lambda seconds: None,
    )(flaky)
    stamina_retry: Any = stamina.retry
    with_stamina: Callable[[], int] = stamina_retry(
        on=ConnectionError, attempts=2, wait_initial=0, wait_max=0, wait_jitter=0
    )(flaky)

    # stamina's sync path sleeps through tenacity's default sleep (``time.sleep`` looked up
    # in ``tenacity.nap`` at each call): swap that module's ``time`` for a no-op sleep.
    hooks = stamina.instrumentation.get_on_retry_hooks()
    stamina.instrumentation.set_on_retry_hooks([])
    nap: Any = tenacity.nap
    real_time = nap.time
    nap.time = types.SimpleNamespace(sleep=lambda seconds: None)
    try:
        assert with_stamina() == 1
        assert with_tenacity() == 1
        assert calls[0] == 4
        times = race(
            {"prana": prana_cycle, "tenacity": with_tenacity, "stamina": with_stamina}, seconds
        )
        assert calls[0] % 2 == 0
    finally:
        nap.time = real_time
        stamina.instrumentation.set_on_retry_hooks(hooks)
    t_prana, t_tenacity, t_stamina = (times[k] / 2 for k in ("prana", "tenacity", "stamina"))
    if args.profile:
        profile_calls("retry", prana_cycle, number)
    ratio = t_prana / t_tenacity
    return [
        Row(
            "retry at 0 ms, per attempt",
            t_prana * 1e6,
            "us",
            t_tenacity * 1e6,
            "tenacity (no-op sleep)",
            "<= 1.0x tenacity",
            ratio <= 1.0,
            f"stamina {t_stamina * 1e6:.2f} us ({t_prana / t_stamina:.2f}x); every retry is "
            "a Suspend(kind='retry')",
        )
    ]


def row_roundtrip(args: argparse.Namespace) -> list[Row]:
    reg = registry()
    workflow, execution = suspended_chain(reg, 100)

    def cycle() -> None:
        out = resume_workflow(loads(dumps(execution)), {"ok": 1}, workflow=workflow, registry=reg)
        assert out.execution is not None

    done = resume_workflow(loads(dumps(execution)), {"ok": 1}, workflow=workflow, registry=reg)
    assert isinstance(done, Completed)
    number = 20 if args.quick else 300
    seconds = 0.3 if args.quick else 2.0
    text = dumps(execution)
    doc = orjson.loads(text)
    reloaded = loads(text)
    times = race(
        {
            "cycle": cycle,
            "dumps": lambda: dumps(execution),
            "loads": lambda: loads(text),
            "resume": lambda: resume_workflow(reloaded, {"ok": 1}, workflow=workflow, registry=reg),
            "orjson": lambda: (orjson.dumps(doc), orjson.loads(text)),
        },
        seconds,
    )
    t, t_dumps, t_loads, t_resume, t_orjson = (
        times[k] for k in ("cycle", "dumps", "loads", "resume", "orjson")
    )
    if args.profile:
        profile_calls("roundtrip", cycle, number)
    return [
        Row(
            "100-node suspend-dumps-loads-resume",
            t * 1e6,
            "us",
            None,
            "today's (--against)",
            "<= 0.5x today's",
            None,
            f"dumps {t_dumps * 1e6:.0f} + loads {t_loads * 1e6:.0f} + resume "
            f"{t_resume * 1e6:.0f} us; orjson alone (its dumps + loads of the same document) "
            f"{t_orjson * 1e6:.0f} us = {t_orjson / t:.0%}",
        )
    ]


def row_bytes(args: argparse.Namespace) -> list[Row]:
    reg = registry()
    _, execution = suspended_chain(reg, 100)
    size = len(dumps(execution).encode())
    peers = []
    for name, fn in (("LangGraph", langgraph_bytes), ("Burr", burr_bytes)):
        try:
            peers.append(f"{name} {fn(100):,} B")
        except ImportError as exc:
            peers.append(f"{name} not installed ({exc.name})")
    return [
        Row(
            "bytes per suspended execution, 100 nodes",
            size,
            "B",
            None,
            "today's (--against)",
            "<= 0.5x today's",
            None,
            "; ".join(peers) + "; per-attempt audit trail kept",
        )
    ]


class LangGraphState(TypedDict):
    """LangGraph's state for the bytes row: every node's output, and the running value."""

    outputs: Annotated[dict[str, int], operator.or_]
    value: int


def langgraph_bytes(n: int) -> int:
    """Bytes LangGraph's SqliteSaver keeps for a 100-node chain interrupted before its end."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    def make(i: int) -> Callable[[LangGraphState], dict[str, Any]]:
        def node(state: LangGraphState) -> dict[str, Any]:
            value = state["value"] + 1
            return {"value": value, "outputs": {f"n{i:03d}": value}}

        return node

    graph: Any = StateGraph(LangGraphState)
    keys = [f"n{i:03d}" for i in range(n)] + ["last"]
    for i, key in enumerate(keys):
        graph.add_node(key, make(i))
    graph.add_edge(START, keys[0])
    for a, b in itertools.pairwise(keys):
        graph.add_edge(a, b)
    graph.add_edge(keys[-1], END)
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "lg.db", check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            app = graph.compile(checkpointer=saver, interrupt_before=["last"])
            config: Any = {"configurable": {"thread_id": "t1"}}
            app.invoke({"value": 0, "outputs": {}}, config)
            row = conn.execute(
                "SELECT checkpoint_id, length(checkpoint) + length(metadata) FROM checkpoints"
                " ORDER BY rowid DESC LIMIT 1"
            ).fetchone()
            writes = conn.execute(
                "SELECT coalesce(sum(length(value)), 0) FROM writes WHERE checkpoint_id = ?",
                (row[0],),
            ).fetchone()
            return int(row[1]) + int(writes[0])
        finally:
            conn.close()


def burr_bytes(n: int) -> int:
    """Bytes Burr's SQLitePersister keeps for a 100-node chain halted before its end."""
    from burr.core import ApplicationBuilder, action
    from burr.core.persistence import SQLitePersister

    builder: Any = ApplicationBuilder  # Burr's builder methods are not annotated

    burr_action: Any = action

    def make(i: int) -> Any:
        def step(state: Any) -> Any:
            value = state["value"] + 1
            return state.update(value=value, **{f"n{i:03d}": value})

        return burr_action(reads=["value"], writes=["value", f"n{i:03d}"])(step)

    keys = [f"n{i:03d}" for i in range(n)] + ["last"]
    actions = {key: make(i) for i, key in enumerate(keys)}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "burr.db")
        persister: Any = SQLitePersister(db_path=db, table_name="burr_state")
        persister.initialize()
        app = (
            builder()
            .with_actions(**actions)
            .with_transitions(*itertools.pairwise(keys))
            .with_state(value=0)
            .with_entrypoint(keys[0])
            .with_state_persister(persister)
            .with_identifiers(app_id="a1", partition_key="p")
            .build()
        )
        app.run(halt_before=["last"])
        conn = sqlite3.connect(Path(tmp) / "burr.db")
        try:
            row = conn.execute(
                "SELECT length(state) FROM burr_state ORDER BY sequence_id DESC LIMIT 1"
            ).fetchone()
        finally:
            conn.close()
        return int(row[0])


def row_import(args: argparse.Namespace) -> list[Row]:
    """``import prana`` and a plain run, whole processes, beside ``import tenacity``."""
    from bench_import import PLAIN_RUN, cpu_seconds

    runs = 5 if args.quick else 21
    codes = {"prana": "import prana", "tenacity": "import tenacity", "run": PLAIN_RUN}
    for code in codes.values():
        cpu_seconds(code)  # warm-up: bytecode caches written
    times: dict[str, list[float]] = {name: [] for name in codes}
    for _ in range(runs):
        for name, code in codes.items():
            times[name].append(cpu_seconds(code))
    t_prana, t_tenacity, t_run = (statistics.median(times[k]) for k in ("prana", "tenacity", "run"))
    return [
        Row(
            "import prana, whole process (CPU median)",
            t_prana * 1e3,
            "ms",
            t_tenacity * 1e3,
            "import tenacity",
            "<= 2.0x tenacity",
            t_prana <= 2 * t_tenacity,
            f"import prana and run a 2-node workflow {t_run * 1e3:.1f} ms "
            f"({t_run / t_tenacity:.2f}x); bench/bench_import.py prints the table",
        )
    ]


# -- rows: the shell ---------------------------------------------------------------------


def start_retries(runner: Runner, workflow: Workflow, n: int) -> list[str]:
    return [runner.start(workflow) for _ in range(n)]


CHUNK = 20
"""The sqlite row times resumes (and floor rows) in chunks of this many; the best chunk counts."""


def chunked(work: Callable[[int], object], chunks: int) -> tuple[float, float]:
    """Best and median seconds per item of ``work(k)`` (chunk ``k`` of ``CHUNK`` items)."""
    times = []
    gc.collect()
    for k in range(chunks):
        gc.disable()
        try:
            start = time.perf_counter()
            work(k)
            times.append((time.perf_counter() - start) / CHUNK)
        finally:
            gc.enable()
    return min(times), statistics.median(times)


def row_sqlite(args: argparse.Namespace) -> list[Row]:
    n = 200 if args.quick else 1000
    reg = registry()
    workflow = retry_workflow(2.0)
    tmp = Path(tempfile.mkdtemp(prefix="prana-speed-"))
    try:
        clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        scheduler = ManualScheduler(clock)
        store = SQLiteStore(tmp / "runner.db", synchronous="NORMAL")
        try:
            with Runner(reg, store, scheduler) as runner:
                ids = []
                for _ in range(n):  # one a millisecond: due 2 s later, one a millisecond
                    ids.append(runner.start(workflow))
                    clock.advance(0.001)
                texts = [dumps(runner.get(i)) for i in ids]
                assert scheduler.advance(2.0 - n / 1000 - 0.0005) == []

                def fire(k: int) -> None:
                    assert len(scheduler.advance(CHUNK / 1000)) == CHUNK

                with profiled("sqlite", args.profile):
                    t_runner, t_median = chunked(fire, n // CHUNK)
                assert runner.get(ids[-1]).status is ExecutionStatus.COMPLETED
        finally:
            store.close()
        # The core's own resume of the same suspended execution (no store, no scheduler).
        suspended = loads(texts[0])
        later = ManualClock(datetime(2030, 1, 1, 0, 0, 5, tzinfo=UTC))
        t_core = best_of(
            lambda: resume_workflow(suspended, None, workflow=workflow, registry=reg, clock=later),
            0.2 if args.quick else 1.0,
        )
        t_floor, f_median = sqlite_floor(tmp / "floor.db", texts)
        t_claimed, _ = sqlite_floor(tmp / "claimed.db", texts, claim=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ratio = t_runner / t_floor
    return [
        Row(
            f"Runner+SQLite, {n} due retries, per resume",
            t_runner * 1e6,
            "us",
            t_floor * 1e6,
            "plain sqlite3 read/parse/CAS",
            "<= 1.5x the floor",
            ratio <= 1.5,
            f"best chunk of {CHUNK}; medians {t_median * 1e6:.1f} vs {f_median * 1e6:.1f} us; "
            f"{1 / t_runner:,.0f}/s; core's own resume {t_core * 1e6:.1f} us "
            f"({t_runner / t_core:.1f}x of it); the floor with a durable claim (a second "
            f"autocommit UPDATE of the columns before the CAS, as the runner must before an "
            f"action) {t_claimed * 1e6:.1f} us ({t_runner / t_claimed:.2f}x of it)",
        )
    ]


def sqlite_floor(path: Path, texts: list[str], *, claim: bool = False) -> tuple[float, float]:
    """Per row: read data and version, parse, change, serialize, compare-and-set (autocommit).

    The table has the store's shape (rowid, unique id, the partial index on due times).
    ``claim``: a committed claim first (status, lease and version by compare-and-set; the
    lease in its own column, as ``SQLiteStore``'s claim since schema 2, so the due-time
    index is left alone), what a runner must make durable before an action runs.
    """
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(
            "CREATE TABLE t (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, status TEXT,"
            " due_at INTEGER, lease_at INTEGER, version INTEGER NOT NULL, updated_at INTEGER,"
            " data TEXT NOT NULL)"
        )
        conn.execute("CREATE INDEX t_due ON t (due_at, seq) WHERE due_at IS NOT NULL")
        ids = [uuid.uuid4().hex for _ in texts]
        conn.executemany(
            "INSERT INTO t (id, status, due_at, version, updated_at, data)"
            " VALUES (?, ?, ?, 1, ?, ?)",
            [(i, "suspended", 1, 1, text) for i, text in zip(ids, texts, strict=True)],
        )

        def chunk(k: int) -> None:
            for execution_id in ids[k * CHUNK : (k + 1) * CHUNK]:
                data, version = conn.execute(
                    "SELECT data, version FROM t WHERE id = ?", (execution_id,)
                ).fetchone()
                doc = orjson.loads(data)
                if claim:
                    assert (
                        conn.execute(
                            "UPDATE t SET status = 'running', lease_at = ?, version = version + 1,"
                            " updated_at = ? WHERE id = ? AND version = ?",
                            (3, 2, execution_id, version),
                        ).rowcount
                        == 1
                    )
                    version += 1
                doc["execution"]["status"] = "completed"
                changed = conn.execute(
                    "UPDATE t SET status = ?, due_at = ?, lease_at = NULL, version = version + 1,"
                    " updated_at = ?, data = ? WHERE id = ? AND version = ?",
                    ("completed", None, 2, orjson.dumps(doc).decode(), execution_id, version),
                ).rowcount
                assert changed == 1

        return chunked(chunk, len(ids) // CHUNK)
    finally:
        conn.close()


def timers_workflow() -> Workflow:
    return Workflow(
        id="bench.timers",
        nodes=(
            Node(key="start", type="manual.trigger"),
            Node(
                key="wait",
                type="wait.wait",
                params={"mode": "schedule", "schedule_at": "{{ $input.main.at }}"},
            ),
            Node(key="after", type="bench.noop"),
        ),
        connections=(
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="after"),
        ),
    )


def row_timers(args: argparse.Namespace) -> list[Row]:
    from scheduling.adapters.apscheduler import APSchedulerAdapter

    n = 1000 if args.quick else 10_000
    reg = registry()
    workflow = timers_workflow()
    tmp = Path(tempfile.mkdtemp(prefix="prana-timers-"))
    try:
        # A pilot to know how long starting and arming take, so the instant is after both.
        pilot = 300
        far = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        clock = ManualClock(datetime.now(UTC))
        store = SQLiteStore(tmp / "pilot.db")
        try:
            with Runner(reg, store, ManualScheduler(clock)) as runner:
                first = runner.get(runner.start(workflow, {"at": far}))
                assert first.status is ExecutionStatus.SUSPENDED, first.error
                began = time.perf_counter()
                for _ in range(pilot):
                    runner.start(workflow, {"at": far})
                per_start = (time.perf_counter() - began) / pilot
        finally:
            store.close()
        lead = n * per_start * 1.5 + n * 100e-6 + 2.0
        due = datetime.now(UTC) + timedelta(seconds=lead)
        clock = ManualClock(datetime.now(UTC))
        path = tmp / "timers.db"
        store = SQLiteStore(path)
        try:
            with Runner(reg, store, ManualScheduler(clock)) as runner:
                ids = [runner.start(workflow, {"at": due.isoformat()}) for _ in range(n)]
        finally:
            store.close()
        shutil.copyfile(path, tmp / "copy.db")
        store = SQLiteStore(path)
        watch = sqlite3.connect(path)
        try:
            with Runner(reg, store, APSchedulerAdapter()):
                armed_ahead = (due - datetime.now(UTC)).total_seconds()
                deadline = time.monotonic() + lead + 600
                while time.monotonic() < deadline:
                    left = watch.execute(
                        "SELECT count(*) FROM prana_executions WHERE status = 'suspended'"
                    ).fetchone()[0]
                    if not left:
                        break
                    time.sleep(0.05)
            resumed = []
            for execution_id in ids:
                execution, _ = store.load(execution_id)
                assert execution.status is ExecutionStatus.COMPLETED, execution.error
                waited = execution.node_executions["wait"][-1]
                assert waited.completed_at is not None
                resumed.append((waited.completed_at - due).total_seconds())
        finally:
            watch.close()
            store.close()
        # The same timers fired by one ManualScheduler.advance: the runner's own ceiling.
        store = SQLiteStore(tmp / "copy.db")
        try:
            manual = ManualScheduler(ManualClock(due))
            with Runner(reg, store, manual):
                began = time.perf_counter()
                assert len(manual.advance(0)) == n
                ceiling = n / (time.perf_counter() - began)
        finally:
            store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    drain = n / max(resumed)
    late_ms = [r * 1000 for r in resumed]
    return [
        Row(
            f"{n:,} timers due at one instant, drain",
            drain,
            "/s",
            ceiling,
            "one ManualScheduler.advance fires them (/s)",
            ">= 5x today's",
            None,
            f"lateness p50 {pct(late_ms, 50):,.0f} ms, p99 {pct(late_ms, 99):,.0f} ms; "
            f"all armed {armed_ahead:.1f} s before due",
        )
    ]


# -- rows: the workers -------------------------------------------------------------------


def postgres_dsn() -> str | None:
    dsn = os.environ.get("PRANA_TEST_POSTGRES_DSN", DEFAULT_DSN)
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means: no PostgreSQL rows
        print(f"(PostgreSQL rows skipped: {exc})")
        return None
    return dsn


def ledger_as_expected(execution: WorkflowExecution) -> bool:
    """Node ``r`` ran as the in-process run's: one failed attempt, then one completed."""
    run = execution.node("r")
    return run is not None and [a.outcome for a in run.attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.COMPLETED,
    ]


def in_process_postgres(dsn: str, n: int) -> tuple[float, int]:
    """Resumes per second of one in-process Runner on PostgreSQL; the final record version."""
    from scheduling.stores.postgres import PostgresStore

    reg = registry()
    best, version = 0.0, 0
    for _ in range(2):
        schema = f"prana_speed_{uuid.uuid4().hex[:10]}"
        store = PostgresStore(dsn, schema=schema)
        try:
            clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
            scheduler = ManualScheduler(clock)
            with Runner(reg, store, scheduler) as runner:
                ids = start_retries(runner, retry_workflow(1.0), n)
                gc.collect()
                start = time.perf_counter()
                fired = scheduler.advance(1)
                best = max(best, n / (time.perf_counter() - start))
                assert len(fired) == n
                versions = {store.load(i)[1] for i in ids}
                assert len(versions) == 1, versions
                version = versions.pop()
        finally:
            drop_schema(dsn, schema, store)
    return best, version


def drop_schema(dsn: str, schema: str, store: Any = None) -> None:
    import psycopg
    from psycopg import sql

    if store is not None:
        store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


class Workers:
    """``count`` real ``prana worker --scheduler procrastinate`` processes on one schema."""

    def __init__(
        self, dsn: str, schema: str, count: int, tmp: Path, spy: Path | None, extra: list[str]
    ) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.spies: list[subprocess.Popen[bytes]] = []
        self.spy = spy
        self.effects = tmp / "effects.log"
        self.app_name = f"prana-bench-{schema}"  # how the server's side is found (CpuMeter)
        env = {**os.environ, "PRANA_BENCH_EFFECTS": str(self.effects), "PGAPPNAME": self.app_name}
        for i in range(count):
            log = tmp / f"worker{i}.log"
            self.logs.append(log)
            with log.open("wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "scheduling._cli",
                            "worker",
                            "--scheduler",
                            "procrastinate",
                            "--postgres",
                            dsn,
                            "--schema",
                            schema,
                            "--actions",
                            str(HERE / "_speed_actions.py"),
                            *extra,
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=tmp,
                    )
                )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for proc, log in zip(self.procs, self.logs, strict=True):
            while b"resuming due executions" not in log.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"a worker did not start: {log.read_text()[-2000:]}")
                time.sleep(0.05)
        time.sleep(0.5)  # the procrastinate worker connects after the line is printed

    def start_spying(self, seconds: float) -> None:
        if self.spy is None:
            return
        self.spy.mkdir(parents=True, exist_ok=True)
        for i, proc in enumerate(self.procs):
            self.spies.append(
                subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "--pid",
                        str(proc.pid),
                        "--duration",
                        str(max(1, round(seconds))),
                        "--rate",
                        "250",
                        "--format",
                        "raw",
                        "--threads",
                        "--gil",
                        "--output",
                        str(self.spy / f"worker{i}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    def stop(self) -> None:
        for spy in self.spies:
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def row_workers(args: argparse.Namespace) -> list[Row]:
    dsn = postgres_dsn()
    if dsn is None:
        return []
    import psycopg
    from psycopg import sql

    from scheduling.adapters.procrastinate import ProcrastinateScheduler
    from scheduling.stores.postgres import PostgresStore

    n = 100 if args.quick else 500
    light = 10 if args.quick else 40
    in_process, expected_version = in_process_postgres(dsn, n)
    reg = registry()
    schema = f"prana_speed_{uuid.uuid4().hex[:10]}"
    tmp = Path(tempfile.mkdtemp(prefix="prana-workers-"))
    store = PostgresStore(dsn, schema=schema)
    store.setup()
    ProcrastinateScheduler(dsn, schema=schema).setup()
    spy = Path(args.py_spy) if args.py_spy else None
    workers = Workers(dsn, schema, 2, tmp, spy, args.worker_args.split())
    try:
        workers.wait_ready()

        def start_all(count: int, delay: float, step: float) -> tuple[list[str], list[datetime]]:
            now = datetime.now(UTC)
            moments = [now + timedelta(seconds=i * step) for i in range(count)]
            stamps = iter(moments)
            current = [now]

            def clock() -> datetime:
                return current[0]

            scheduler = ProcrastinateScheduler(dsn, schema=schema, run_in_thread=False)
            ids = []
            workflow = retry_workflow(delay)
            with Runner(reg, store, scheduler, clock=clock) as runner:
                for moment in stamps:
                    current[0] = moment
                    ids.append(runner.start(workflow))
            return ids, [m + timedelta(seconds=delay) for m in moments]

        # The burst: all N due at one instant, after every start has been deferred.
        start_all(20, 0.001, 0.0)  # a warm-up (connections, definitions), not measured
        began = time.perf_counter()
        start_all(20, 0.001, 0.0)  # a pilot: how long a start takes on the machine now
        # Due after the last start (the starts' pace is the machine's, not the workers').
        lead = 3.0 + n * (time.perf_counter() - began) / 20 * 1.5
        began = time.perf_counter()
        ids, dues = start_all(n, lead, 0.0)
        started_in = time.perf_counter() - began
        due = dues[0]
        workers.start_spying(lead + min(30.0, n / 20))
        meter = CpuMeter(dsn, workers)
        time.sleep(max(0.0, due.timestamp() - time.time() - 0.05))
        meter.begin()
        completed = wait_completed(dsn, schema, ids, due, timeout=max(120.0, n / 5))
        cpu = meter.end(completed)
        records = {i: store.load(i) for i in ids}
        finish = [
            r[0].updated_at for r in records.values() if r[0].status is ExecutionStatus.COMPLETED
        ]
        drain_seconds = max(f for f in finish if f is not None) - due
        rate = completed / drain_seconds.total_seconds()
        burst_late = [lateness_ms(r[0], d) for r, d in zip(records.values(), dues, strict=True)]
        doubles = sum(1 for r in records.values() if not ledger_as_expected(r[0]))
        extra_writes = sum(1 for r in records.values() if r[1] > expected_version)
        lost = n - completed

        # Light load: due 50 ms apart.
        light_ids, light_dues = start_all(light, 2.0, 0.05)
        light_done = wait_completed(
            dsn, schema, light_ids, light_dues[-1], timeout=60.0, quiet=True
        )
        light_late = []
        for execution_id, when in zip(light_ids, light_dues, strict=True):
            execution, version = store.load(execution_id)
            light_late.append(lateness_ms(execution, when))
            doubles += not ledger_as_expected(execution)
            extra_writes += version > expected_version
        lost += light - light_done
    finally:
        workers.stop()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        store.close()
    lines = workers.effects.read_text().splitlines() if workers.effects.exists() else []
    per_attempt = Counter(" ".join(line.split()[1:]) for line in lines)
    duplicated = sum(c - 1 for c in per_attempt.values() if c > 1)
    if args.py_spy:
        summarize_spy(Path(args.py_spy))
    if os.environ.get("PRANA_BENCH_KEEP"):  # the workers' logs, to read after the run
        print(f"(worker logs kept in {tmp})", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return [
        Row(
            f"2 procrastinate workers, {n} due, end to end",
            rate,
            "/s",
            in_process,
            "1 in-process Runner on PostgreSQL (/s)",
            ">= 2,000/s",
            rate >= 2000 and lost == 0 and doubles == 0,
            f"lost {lost}, double transitions {doubles}, duplicated side effects "
            f"{duplicated}, extra writes (claimed again, renewed) {extra_writes}; "
            f"burst lateness p50 {pct(burst_late, 50):,.0f} / p99 "
            f"{pct(burst_late, 99):,.0f} ms (first {min(burst_late):,.0f} ms); {n} starts took "
            f"{started_in:.1f} s; {cpu}",
        ),
        Row(
            f"2 procrastinate workers, lateness p99, {light} due 50 ms apart",
            pct(light_late, 99),
            "ms",
            None,
            "",
            "<= 100 ms",
            pct(light_late, 99) <= 100,
            f"p50 {pct(light_late, 50):,.0f} ms",
        ),
    ]


class CpuMeter:
    """CPU per execution over the burst: the workers' processes and their server backends.

    The workers' backends are found by their ``application_name`` (``PGAPPNAME``); each
    process's utime + stime comes from ``/proc`` (a backend that appears during the burst
    counts from zero). With ``pg_stat_statements`` in the database (a server of your own:
    ``shared_preload_libraries``), the statements run during the burst are summed per
    execution into the profiles (their times are the server's wall time: on a busy
    machine they include waiting for a core). Beside them, how busy the machine's cores
    were over the drain (``/proc/stat``: every process, other users of the machine too).
    """

    def __init__(self, dsn: str, workers: Workers) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.workers = workers
        self.tick = os.sysconf("SC_CLK_TCK")
        self.before: dict[int, float] = {}
        self.statements: dict[str, tuple[int, float]] = {}
        self.machine = (0, 0)

    def _backends(self) -> list[int]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (self.workers.app_name,),
        ).fetchall()
        return [int(row[0]) for row in rows]

    def _cpu(self, pid: int) -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.tick

    def _snapshot(self) -> dict[int, float]:
        pids = [-proc.pid for proc in self.workers.procs] + self._backends()
        return {pid: self._cpu(abs(pid)) for pid in pids}

    def _statements(self) -> dict[str, tuple[int, float]]:
        import psycopg

        try:
            rows = self.conn.execute(
                "SELECT query, calls, total_exec_time FROM pg_stat_statements"
                " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchall()
        except psycopg.Error:
            return {}
        out: dict[str, tuple[int, float]] = {}
        for query, calls, total in rows:
            seen = out.get(query, (0, 0.0))
            out[query] = (seen[0] + int(calls), seen[1] + float(total))
        return out

    @staticmethod
    def _machine() -> tuple[int, int]:
        """Jiffies of all cores since boot: (idle, iowait and stolen; all)."""
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4] + fields[7], sum(fields[:8])

    def begin(self) -> None:
        self.statements = self._statements()
        self.before = self._snapshot()
        self.machine = self._machine()

    def end(self, executions: int) -> str:
        after = self._snapshot()
        idle, total = (b - a for a, b in zip(self.machine, self._machine(), strict=True))
        per = max(executions, 1)
        workers = sum(v - self.before.get(k, 0.0) for k, v in after.items() if k < 0)
        server = sum(v - self.before.get(k, 0.0) for k, v in after.items() if k > 0)
        now = self._statements()
        lines = []
        for query, (calls, spent) in now.items():
            old = self.statements.get(query, (0, 0.0))
            if calls > old[0]:
                lines.append(((calls - old[0]) / per, (spent - old[1]) / per, query))
        self.conn.close()
        if lines:
            lines.sort(reverse=True)
            text = [f"{len(lines)} statements; per execution: calls, server ms, statement"]
            text += [f"{c:7.2f} {t:7.3f}  {' '.join(q.split())[:150]}" for c, t, q in lines[:25]]
            every = (sum(c for c, _, _ in lines), sum(t for _, t, _ in lines))
            text.append(f"{every[0]:7.2f} {every[1]:7.3f}  all (a trigger's also in its caller's)")
            PROFILES["workers/statements"] = "\n".join(text)
        opened = sum(1 for k in after if k > 0 and k not in self.before)
        return (
            f"{opened} server backends opened during the drain; "
            f"CPU per execution: workers {workers / per * 1000:.2f} ms, their server backends "
            f"{server / per * 1000:.2f} ms; the machine's cores (every process) busy "
            f"{1 - idle / max(total, 1):.0%} of the drain"
        )


def lateness_ms(execution: WorkflowExecution, due: datetime) -> float:
    """When the retry attempt started, after its due time, in ms (inf if it never did)."""
    attempts = execution.node_executions["r"][-1].attempts
    if len(attempts) < 2:
        return float("inf")
    return (attempts[1].started_at - due).total_seconds() * 1000


def wait_completed(
    dsn: str,
    schema: str,
    ids: list[str],
    due: datetime,
    timeout: float,
    *,
    quiet: bool = False,
) -> int:
    """Wait until every execution in ``ids`` completed (or ``timeout`` after due); how many did."""
    import psycopg
    from psycopg import sql

    query = sql.SQL(
        "SELECT count(*) FROM {} WHERE id = ANY(%s::text[]) AND status = 'completed'"
    ).format(sql.Identifier(schema, "prana_executions"))
    # The ids as one array literal (hex ids: nothing to quote), written once: psycopg dumps
    # a list of 500 strings in pure Python (~1 ms), which every poll took from the workers.
    literal = "{" + ",".join(ids) + "}"
    deadline = due.timestamp() + timeout
    done = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.time() < deadline:
            row = conn.execute(query, (literal,)).fetchone()
            done = 0 if row is None else int(row[0])
            if done == len(ids):
                break
            time.sleep(0.05)
    if done < len(ids) and not quiet:
        print(f"(only {done} of {len(ids)} executions completed in {timeout:.0f} s)")
    return done


def summarize_spy(folder: Path) -> None:
    """Print, per worker, the functions most often on top of a busy stack (py-spy raw)."""
    for path in sorted(folder.glob("worker*.txt")):
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        total = 0
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack:
                continue
            count = int(count_text)
            frames = stack.split(";")
            total += count
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
        out = [f"## {path.name}: {total} samples (py-spy --gil: the thread holding the GIL)"]
        out += ["own:"] + [f"  {c / total:6.1%}  {f}" for f, c in own.most_common(15)]
        out += ["inclusive:"] + [f"  {c / total:6.1%}  {f}" for f, c in inclusive.most_common(25)]
        PROFILES[f"workers/{path.stem}"] = "\n".join(out)


# -- the table ---------------------------------------------------------------------------


MEASURES: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    "workers": row_workers,
    "sqlite": row_sqlite,
    "timers": row_timers,
    "join": row_join,
    "retry": row_retry,
    "roundtrip": row_roundtrip,
    "bytes": row_bytes,
    "import": row_import,
}


def against(
    ref: str, rows: list[str], quick: bool, rounds: int, profile: bool = False
) -> tuple[list[Row], dict[str, dict[str, Any]]]:
    """Run ``rows`` on this package and on the package at git ``ref``, in turns.

    Each side runs in a child process (the older one with its ``prana/`` and
    ``scheduling/`` first on ``PYTHONPATH``), alternating ``rounds`` times so both see
    the same noise of a shared machine; each row keeps its best figure per side.
    Returns this package's rows and the older rows by name. With ``profile``, this
    package's last turn also profiles its rows (after timing them) and hands the top lines
    back on stderr, for ``PROFILES``.
    """
    tmp = Path(tempfile.mkdtemp(prefix="prana-against-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "prana", "scheduling"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        command = [sys.executable, __file__, "--json", "--rows", ",".join(rows)]
        command += ["--quick"] if quick else []
        sides: dict[str, dict[str, dict[str, Any]]] = {"now": {}, "then": {}}
        for turn in range(rounds):
            for side, path in (("now", None), ("then", tmp)):
                env = dict(os.environ)
                if path is not None:
                    env["PYTHONPATH"] = str(path)
                profiling = profile and side == "now" and turn == rounds - 1
                done = subprocess.run(
                    command + (["--profile"] if profiling else []),
                    check=True,
                    capture_output=True,
                    env=env,
                    cwd=tmp,
                )
                out = done.stdout
                for line in done.stderr.decode().splitlines():
                    if profiling and line.startswith(PROFILES_MARK):
                        PROFILES.update(json.loads(line[len(PROFILES_MARK) :]))
                for row in json.loads(out):
                    seen = sides[side].get(row["name"])
                    figures = [*(seen or {}).get("figures", []), row["ours"]]
                    cpu = _CPU_NOTE.search(row.get("note") or "")
                    cpus = [*(seen or {}).get("cpus", []), cpu.group(1, 2) if cpu else None]
                    if seen is None or _better(row, seen):
                        sides[side][row["name"]] = row
                    sides[side][row["name"]]["figures"] = figures
                    sides[side][row["name"]]["cpus"] = cpus
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    now = []
    for data in sides["now"].values():
        row = Row(**{k: v for k, v in data.items() if k not in ("key", "figures", "cpus")})
        row.key = data["key"]
        then = sides["then"].get(row.name, {}).get("figures", [])
        turns = "; ".join(
            f"{a:,.2f} / {b:,.2f}" for a, b in zip(data["figures"], then, strict=False)
        )
        row.note = f"{row.note}; turns (now / {ref}): {turns}" if row.note else f"turns: {turns}"
        then_cpus = sides["then"].get(row.name, {}).get("cpus", [])
        if any(data["cpus"]):  # the workers row: CPU per execution, workers + backends
            cpu_turns = "; ".join(
                f"{a[0]}+{a[1]} / {b[0]}+{b[1]}" if a and b else "-"
                for a, b in zip(data["cpus"], then_cpus, strict=False)
            )
            row.note += f"; CPU ms per execution, workers+backends (now / {ref}): {cpu_turns}"
        now.append(row)
    return now, sides["then"]


_CPU_NOTE = re.compile(r"CPU per execution: workers ([\d.]+) ms, their server backends ([\d.]+) ms")


def _better(row: dict[str, Any], seen: dict[str, Any]) -> bool:
    """Whether ``row`` is a better figure than ``seen`` (higher rate, else lower)."""
    if row["unit"] == "/s":
        return bool(row["ours"] > seen["ours"])
    return bool(row["ours"] < seen["ours"])


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "B":
        return f"{value:,.0f} B"
    if unit in ("/s", "ms"):
        return f"{value:,.0f} {unit}"
    return f"{value:,.2f} {unit}"


def print_table(rows: list[Row], before: dict[str, dict[str, Any]], ref: str | None) -> None:
    head = ["path", "prana", "baseline", "ratio", "target", "met"]
    if ref:
        head[2:2] = [f"at {ref}", "x of it"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    notes = []
    for row in rows:
        old = before.get(row.name)
        met = row.met
        factor = RELATIVE.get(row.key)
        if met is None and old is not None and factor is not None:
            if row.unit == "/s":
                met = row.ours >= factor * old["ours"]
            else:
                met = row.ours <= factor * old["ours"]
        ratio = f"{row.ours / row.baseline:.2f}x" if row.baseline else "-"
        base = f"{fmt(row.baseline, row.unit)} ({row.baseline_name})" if row.baseline else "-"
        cells = [
            row.name,
            fmt(row.ours, row.unit),
            base,
            ratio,
            row.target,
            "-" if met is None else ("yes" if met else "NO"),
        ]
        if ref:
            cells[2:2] = [
                fmt(old["ours"], row.unit) if old else "-",
                f"{row.ours / old['ours']:.2f}x" if old and old["ours"] else "-",
            ]
        print("| " + " | ".join(cells) + " |")
        if row.note:
            notes.append(f"- {row.name}: {row.note}")
    print()
    print("\n".join(notes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"some of {', '.join(ROWS)}")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--against", metavar="REF", help="also run in-process rows at git REF")
    parser.add_argument(
        "--rounds", type=int, default=3, help="with --against: turns of each side (default 3)"
    )
    parser.add_argument("--profile", action="store_true", help="print cProfile top lines")
    parser.add_argument("--py-spy", metavar="DIR", help="py-spy the workers into DIR")
    parser.add_argument(
        "--worker-args", default="", help="more arguments for each `prana worker`, e.g. '--poll 5'"
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    wanted = [name.strip() for name in args.rows.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(ROWS))
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; use some of {', '.join(ROWS)}")
    before: dict[str, dict[str, Any]] = {}
    rows: list[Row] = []
    both = [name for name in wanted if name in IN_PROCESS] if args.against else []
    if both:
        rows, before = against(args.against, both, args.quick, args.rounds, args.profile)
    for name in wanted:
        if name in both:
            continue
        for row in MEASURES[name](args):
            row.key = name
            rows.append(row)
    rows.sort(key=lambda row: wanted.index(row.key))
    if args.json:
        print(json.dumps([row.as_dict() for row in rows]))
        if PROFILES:  # for ``against``, which reads them from stderr
            print(PROFILES_MARK + json.dumps(PROFILES), file=sys.stderr)
        return
    size = "quick" if args.quick else "full"
    print(f"prana speed bench ({size} sizes), python {sys.version.split()[0]}")
    print_table(rows, before, args.against)
    for name, text in PROFILES.items():
        print(f"\n### profile: {name}\n```\n{text}\n```")


if __name__ == "__main__":
    main()
