"""Records and definitions an attacker wrote: out-of-range numbers and times, edited rows.

Each payload here broke something before: a traceback from deep in a store or the engine,
a store that could no longer be listed, or one bad row that stopped a worker from
resuming every execution due after it. Now each is one clear error, and the rest of the
store goes on.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from doubles import T0, conn, wait_node, workflow

from prana import (
    Activation,
    ErrorCode,
    ExecutionStatus,
    Failed,
    InvalidSettingsError,
    InvalidWorkflowError,
    Limits,
    Node,
    RecordError,
    Registry,
    ResumeError,
    Suspend,
    Workflow,
    dumps,
    execute_workflow,
    loads,
    loads_workflow,
    resume_workflow,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path


def failed_without_retry(outcome: Any, key: str) -> str:
    """Assert ``outcome`` failed node ``key`` with a non-retryable error; return the message."""
    assert isinstance(outcome, Failed), type(outcome).__name__
    assert outcome.error.node_key == key
    assert outcome.error.code == ErrorCode.NON_RETRYABLE, outcome.error
    return outcome.error.message


# -- numbers a store cannot hold ----------------------------------------------------------


@pytest.mark.parametrize("version", [2**31, 2**63, 10**30])
def test_a_workflow_version_no_store_can_hold_is_refused(version: int) -> None:
    """Was: ``version: 9223372036854775808`` passed, then saving it raised OverflowError."""
    with pytest.raises(InvalidSettingsError, match=r"Workflow.version=.*from 1 to 2147483647"):
        workflow(version=version)
    with pytest.raises(RecordError, match="version"):
        loads_workflow(
            {
                "id": "wf",
                "version": version,
                "nodes": [{"key": "start", "type": "manual.trigger"}],
                "connections": [],
            }
        )


@pytest.mark.parametrize(
    "make",
    [
        lambda name: Node(key=name, type="data.set_data"),
        lambda name: Node(key="k", type=name),
        lambda name: workflow(wid=name),
        lambda name: conn("start", "x", from_port=name),
    ],
)
def test_a_name_longer_than_a_thousand_characters_is_refused(make: Any) -> None:
    """Was: a 100,000-character node key in a workflow that starts itself made 33 ids
    of 52,803,696 characters in all (each child's id holds its parent's and the key)."""
    make("k" * 1000)
    with pytest.raises(InvalidSettingsError, match="1,001 characters long; use at most 1,000"):
        make("k" * 1001)


def test_the_largest_version_is_stored_and_read_back(sqlite_store: SQLiteStore) -> None:
    wf = workflow(version=2**31 - 1)
    sqlite_store.save_workflow(wf)
    assert sqlite_store.load_workflow("wf", 2**31 - 1) == wf


def test_a_sub_workflow_version_past_any_stored_one_fails_the_node(tmp_path: Path) -> None:
    """Was: the runner looked the version up and SQLite raised OverflowError from the alarm."""
    parent = workflow(
        Node(
            key="c",
            type="workflow.execute_workflow",
            params={"workflow_id": "wf", "version": 2**63},
        ),
        wid="parent",
    )
    message = failed_without_retry(execute_workflow(parent, clock=ManualClock(T0)), "c")
    assert "version=9223372036854775808" in message
    assert "from 1 to 2147483647" in message


# -- times past the last date -------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "field"),
    [
        # 9999-12-31 at UTC-23:59 is in year 10000 in UTC: every store read of it overflowed
        (wait_node(mode="schedule", schedule_at="9999-12-31T23:59:59-23:59"), "schedule_at"),
        (wait_node(mode="webhook", timeout_hours=10**8), "timeout_hours"),
        (wait_node(mode="interval", duration=10**9, unit="days"), "duration"),
        (
            Node(
                key="w",
                type="workflow.execute_workflow",
                params={"workflow_id": "x", "timeout_ms": 10**15},
            ),
            "timeout_ms",
        ),
    ],
)
def test_a_wait_past_the_last_date_fails_without_retry(node: Node, field: str) -> None:
    """Was: an OverflowError counted as a retryable action error, or a suspension stored
    with a due time past year 9999 in UTC, after which listing the store raised."""
    outcome = execute_workflow(workflow(node), clock=ManualClock(T0))
    assert f"{field}=" in failed_without_retry(outcome, "w")


@pytest.mark.parametrize(
    ("node", "field"),
    [
        (wait_node(mode="interval", duration=10**400, unit="ms"), "duration"),
        (
            Node(
                key="w",
                type="workflow.execute_workflow",
                params={"workflow_id": "x", "timeout_ms": 10**400},
            ),
            "timeout_ms",
        ),
    ],
)
def test_a_wait_no_stored_definition_holds_is_invalid(node: Node, field: str) -> None:
    """An integer past 64 bits written in the definition is refused by validation, naming
    node and field (it could not be saved: ``tests/test_bad_input.py``)."""
    with pytest.raises(InvalidWorkflowError, match=rf"node 'w': params\.{field}: an integer"):
        execute_workflow(workflow(node), clock=ManualClock(T0))


def test_a_wait_until_the_last_utc_date_still_waits() -> None:
    outcome = execute_workflow(
        workflow(wait_node(mode="schedule", schedule_at="9999-12-31T23:59:59+00:00")),
        clock=ManualClock(T0),
    )
    assert isinstance(outcome, Suspend)


def test_a_due_time_column_no_datetime_holds_reads_as_the_last_one(tmp_path: Path) -> None:
    """Was: one row with ``due_at = 2**62`` made ``list`` (and ``prana list``) raise."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    wf = workflow(wait_node(mode="interval", duration=60))
    store = SQLiteStore(path)
    with Runner(Registry(), store, ManualScheduler(clock), clock) as r:
        eid = r.start(wf)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE prana_executions SET due_at = ?, updated_at = ?", (2**62, -(2**62)))
    (row,) = store.list()
    assert row.id == eid
    assert row.due_at is not None
    assert row.due_at.year == 9999
    assert store.find_due(T0) == []
    store.close()


# -- records edited by hand ---------------------------------------------------------------


def suspended_on_a_timer() -> tuple[Workflow, Any]:
    wf = workflow(
        wait_node(mode="interval", duration=1),
        Node(key="after", type="data.set_data", params={"value": 1}),
    )
    outcome = execute_workflow(wf, clock=ManualClock(T0))
    assert isinstance(outcome, Suspend)
    return wf, outcome.execution


@pytest.mark.parametrize(
    "pending",
    [
        Activation(node_key="ghost", seq=5, sources={}),
        Activation(node_key="after", seq=5, sources={"main": ("nope", "main", 9)}),
        Activation(node_key="after", seq=5, sources={"main": ("after", "main", 9)}),
        Activation(node_key="after", seq=5, sources={"main": (["w"], "main", 1)}),
    ],
)
def test_a_pending_node_the_execution_does_not_have_is_refused_before_anything_runs(
    pending: Activation,
) -> None:
    """Was: a KeyError from the engine after the resumed wait completed (and, in a
    runner, after the claim was saved ``running``)."""
    wf, execution = suspended_on_a_timer()
    edited = attrs.evolve(execution, pending=(*execution.pending, pending))
    with pytest.raises(ResumeError, match="edited by hand"):
        resume_workflow(edited, workflow=wf, clock=ManualClock(T0.replace(year=2031)))


@pytest.mark.parametrize("index", ['"0"', "{}", "[0]", "true", "1.5"])
def test_a_source_run_index_that_is_not_an_int_is_refused_before_anything_runs(
    index: str,
) -> None:
    """Was: a TypeError (``'<' not supported between 'int' and 'str'``) from deep in the
    engine when the resumed node read its input, for a stored record whose pending source
    names its delivering run by something other than its index."""
    wf, execution = suspended_on_a_timer()
    text = dumps(execution)
    assert '"sources":{"main":["start","main",0]}' in text
    edited = loads(text.replace('["start","main",0]', f'["start","main",{index}]'))
    with pytest.raises(ResumeError, match=r"fed at port 'main'.*edited by hand"):
        resume_workflow(edited, workflow=wf, clock=ManualClock(T0.replace(year=2031)))


def test_a_record_that_cannot_be_resumed_never_stops_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: ``run_due`` (``prana worker --once``) raised at the first bad row, so every
    execution due after it waited for ever; ``prana worker`` logged it every second."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    scheduler = ManualScheduler(clock)
    wf = workflow(wait_node(mode="interval", duration=1))
    store = SQLiteStore(path, cache_size=0)
    with Runner(Registry(), store, scheduler, clock) as r:
        unreadable, inconsistent, good = r.start(wf), r.start(wf), r.start(wf)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE prana_executions SET data = '{' WHERE id = ?", (unreadable,))
            data = conn.execute(
                "SELECT data FROM prana_executions WHERE id = ?", (inconsistent,)
            ).fetchone()[0]
            conn.execute(
                "UPDATE prana_executions SET data = ? WHERE id = ?",
                (data.replace('"suspended_node":"w"', '"suspended_node":"nope"'), inconsistent),
            )
        clock.advance(2)
        with caplog.at_level("ERROR", logger="scheduling"):
            r.run_due()
            r.run_due()  # the bad ones again: nothing more is said
        assert r.get(good).status is ExecutionStatus.COMPLETED
        assert r.get(inconsistent).status is ExecutionStatus.SUSPENDED
    store.close()
    said = sorted(r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    assert len(said) == 2, said
    assert all("\n" not in m and "cannot be resumed" in m for m in said)
    assert any(unreadable in m and "cannot be read" in m for m in said)
    assert any(inconsistent in m and "'nope'" in m for m in said)


@pytest.mark.parametrize("version", ["x", 1.5, 0, -3, 2**63 - 1])
def test_a_version_column_edited_by_hand_never_stops_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: Any
) -> None:
    """Was: ``run_due`` raised at the row (``InvalidSettingsError: save(expected_version='x')``,
    or ``OverflowError`` at the save after a claim of version 2**63 - 1), so every execution
    due after it waited; ``list`` listed the text as the version. Now the row is unreadable,
    naming its version: the worker says so once and goes on."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    wf = workflow(wait_node(mode="interval", duration=1))
    store = SQLiteStore(path, cache_size=0)
    with Runner(Registry(), store, ManualScheduler(clock), clock) as r:
        edited, good = r.start(wf), r.start(wf)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE prana_executions SET version = ? WHERE id = ?", (version, edited))
        with pytest.raises(RecordError, match=r"version: the row's version is"):
            store.load(edited)
        _goes_on_past(r, clock, caplog, good)
    store.close()
    assert "version" in _said_once(caplog, edited)


def test_an_unreadable_row_without_a_due_time_never_stops_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: ``run_due`` looked through the suspended rows without a due time (for
    sub-workflow deadlines) and raised the ``RecordError`` of the first it could not read,
    so ``prana worker --once`` failed on every run. Now it says so once and goes on."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    store = SQLiteStore(path, cache_size=0)
    with Runner(Registry(), store, ManualScheduler(clock), clock) as r:
        edited = r.start(workflow(wait_node(mode="webhook"), wid="hook"))
        good = r.start(workflow(wait_node(mode="interval", duration=1)))
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE prana_executions SET data = '{', due_at = NULL WHERE id = ?", (edited,)
            )
        _goes_on_past(r, clock, caplog, good)
    store.close()
    assert "cannot be read" in _said_once(caplog, edited)


@pytest.mark.parametrize("edit", ["data = '{'", "version = 'x'"], ids=["data", "version"])
def test_a_runner_opens_beside_an_unreadable_row_without_a_due_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, edit: str
) -> None:
    """Was: a runner opening (``prana worker``, ``prana serve``) looks through the suspended
    rows without a due time for sub-workflow parents to reconcile, and raised the
    ``RecordError`` of the first it could not read: no worker could start while one such
    row was stored. Now it says so once and opens, and the others run."""
    path = tmp_path / "prana.sqlite3"
    clock = ManualClock(T0)
    store = SQLiteStore(path, cache_size=0)
    with Runner(Registry(), store, ManualScheduler(clock), clock) as r:
        edited = r.start(workflow(wait_node(mode="webhook"), wid="hook"))
        good = r.start(workflow(wait_node(mode="interval", duration=1)))
    with sqlite3.connect(path) as connection:
        connection.execute(
            f"UPDATE prana_executions SET {edit}, due_at = NULL WHERE id = ?", (edited,)
        )
    connection.close()
    with caplog.at_level("ERROR", logger="scheduling"):
        r = Runner(Registry(), store, ManualScheduler(clock), clock)
        with r:
            _goes_on_past(r, clock, caplog, good)
    store.close()
    assert edited in _said_once(caplog, edited)


def _goes_on_past(
    r: Runner[Any], clock: ManualClock, caplog: pytest.LogCaptureFixture, good: str
) -> None:
    """Two worker passes once ``good`` is due: it resumes and completes, nothing else runs."""
    clock.advance(2)
    with caplog.at_level("ERROR", logger="scheduling"):
        assert r.run_due() == [good]
        assert r.run_due() == []
    assert r.get(good).status is ExecutionStatus.COMPLETED


def _said_once(caplog: pytest.LogCaptureFixture, edited: str) -> str:
    """The one error logged, which names the edited execution."""
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(said) == 1, said
    assert edited in said[0]
    return said[0]


@pytest.mark.postgres
@pytest.mark.parametrize("version", [0, -3, 2**63 - 1])
def test_a_postgres_version_column_edited_by_hand_is_unreadable(
    postgres_store: Any, version: int
) -> None:
    """The PostgreSQL row's version (a bigint) edited to one no save makes: unreadable,
    naming the version, as on SQLite (was: returned, then refused by the next save)."""
    import psycopg

    outcome = execute_workflow(workflow(wait_node(mode="interval", duration=1)))
    assert outcome.execution is not None
    eid = outcome.execution.id
    postgres_store.save(outcome.execution, None)
    with psycopg.connect(postgres_store.dsn, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{postgres_store.schema}".prana_executions SET version = %s WHERE id = %s',
            (version, eid),
        )
    with pytest.raises(RecordError, match=r"version: the row's version is"):
        postgres_store.load(eid)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("due_at", "-infinity"),
        ("due_at", "infinity"),
        ("updated_at", "infinity"),
        ("due_at", "4000-01-01 00:00:00+00 BC"),
        ("updated_at", "20000-01-01 00:00:00+00"),
    ],
)
def test_a_postgres_time_column_no_datetime_holds_never_stops_the_others(
    postgres_store: Any, column: str, value: str
) -> None:
    """A timestamptz PostgreSQL holds but Python's datetime cannot (``infinity``, a year
    past 9999 or before 1) edited into one row: psycopg refused to read it ("timestamp too
    large (after year 10K)"), so ``list``, ``find_due`` and ``alarms`` raised for the whole
    store: ``prana list`` listed nothing, ``prana worker --once`` resumed nothing, and
    ``prana worker`` would not start. It reads as the first or last datetime, as SQLite's
    time columns do (``from_micros``), and the others run."""
    import psycopg

    clock = ManualClock(T0)
    wf = workflow(wait_node(mode="interval", duration=1))
    with Runner(Registry(), postgres_store, ManualScheduler(clock), clock) as r:
        edited, good = r.start(wf), r.start(wf)
    with psycopg.connect(postgres_store.dsn, autocommit=True) as connection:
        connection.execute(
            f'UPDATE "{postgres_store.schema}".prana_executions'
            f" SET {column} = %s::timestamptz WHERE id = %s",
            (value, edited),
        )
    rows = {row.id: row for row in postgres_store.list()}
    assert set(rows) == {edited, good}
    read = getattr(rows[edited], column)
    assert read is not None
    assert read.year in (1, 9999)
    assert edited in {eid for eid, _ in postgres_store.alarms()} or column != "due_at"
    assert postgres_store.load(edited)[0].id == edited
    clock.advance(2)
    with Runner(Registry(), postgres_store, ManualScheduler(clock), clock) as r:  # arms alarms
        assert good in r.run_due()
        assert r.get(good).status is ExecutionStatus.COMPLETED


# -- sub-workflows ------------------------------------------------------------------------


def test_a_workflow_that_starts_itself_stops_at_the_depth_limit() -> None:
    """Was: each level started the next for ever (1,396 executions in a minute under
    ``prana run``, each id longer than its parent's)."""
    clock = ManualClock(T0)
    itself = workflow(
        Node(key="c", type="workflow.execute_workflow", params={"workflow_id": "itself"}),
        wid="itself",
    )
    registry = Registry(limits=Limits(max_sub_workflow_depth=3))
    store = MemoryStore()
    with Runner(registry, store, ManualScheduler(clock), clock, workflows=[itself]) as runner:
        top = runner.start(itself)
        assert runner.get(top).status is ExecutionStatus.FAILED
    rows = store.list()
    assert len(rows) == 4  # the top-level execution and three levels below it
    assert {row.status for row in rows} == {ExecutionStatus.FAILED}
    deepest = max((store.load(row.id)[0] for row in rows), key=lambda e: len(e.id))
    assert deepest.error is not None
    assert "Limits.max_sub_workflow_depth=3" in deepest.error.message
    assert "would run 4 levels deep" in deepest.error.message


def test_sub_workflows_up_to_the_depth_limit_run() -> None:
    clock = ManualClock(T0)
    leaf = workflow(Node(key="v", type="data.set_data", params={"value": 7}), wid="leaf")
    middle = workflow(
        Node(key="c", type="workflow.execute_workflow", params={"workflow_id": "leaf"}),
        wid="middle",
    )
    top = workflow(
        Node(key="c", type="workflow.execute_workflow", params={"workflow_id": "middle"}),
        wid="top",
    )
    registry = Registry(limits=Limits(max_sub_workflow_depth=2))
    with Runner(
        registry, MemoryStore(), ManualScheduler(clock), clock, workflows=[leaf, middle]
    ) as runner:
        execution = runner.get(runner.start(top))
    assert execution.status is ExecutionStatus.COMPLETED, execution.error


# -- retries ------------------------------------------------------------------------------


def test_a_policy_cannot_retry_past_the_attempts_limit() -> None:
    """Was: ``max_attempts: 10**18`` with no delay retried for ever, the record growing with
    every attempt (27,785 attempts and a 6 MB record in 20 seconds, each save slower)."""
    registry = Registry(limits=Limits(max_attempts=5))

    def fail(params: Any, ctx: Any) -> Any:
        raise ConnectionError("boom")

    registry.register("t.fail", fail)
    wf = loads_workflow(
        {
            "id": "wf",
            "nodes": [
                {"key": "start", "type": "manual.trigger"},
                {
                    "key": "f",
                    "type": "t.fail",
                    "settings": {
                        "retry": {"max_attempts": 10**18, "initial_delay": 0, "max_delay": 0}
                    },
                },
            ],
            "connections": [{"from_node": "start", "to_node": "f"}],
        }
    )
    clock = ManualClock(T0)
    outcome = execute_workflow(wf, registry=registry, clock=clock)
    for _ in range(10):
        if not isinstance(outcome, Suspend):
            break
        outcome = resume_workflow(outcome.execution, workflow=wf, registry=registry, clock=clock)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == ErrorCode.LIMIT_EXCEEDED
    assert "Limits.max_attempts=5" in outcome.error.message
    assert "ConnectionError: boom" in outcome.error.message
    (run,) = outcome.execution.node_executions["f"]
    assert len(run.attempts) == 5


def test_a_tree_of_sub_workflows_is_bounded_by_its_root_limits() -> None:
    """Was: each execution started three copies of itself, so depth alone allowed 3**depth
    of them (46,886 executions in 15 s at the default depth of 32)."""
    clock = ManualClock(T0)
    children = [
        Node(
            key=key,
            type="workflow.execute_workflow",
            params={"workflow_id": "fan", "mode": "fire_and_forget"},
        )
        for key in "abc"
    ]
    fan = workflow(*children, wid="fan")
    store = MemoryStore()
    registry = Registry(limits=Limits(max_tree_executions=20, max_sub_workflow_depth=6))
    with Runner(registry, store, ManualScheduler(clock), clock, workflows=[fan]) as runner:
        root = runner.start(fan)
    rows = store.list(limit=10**6)
    assert len(rows) == 20  # 1 + 3 + 9 + 27 + ... would be 1,093 at depth 6
    assert store.count_tree(root, 10**6) == 20
    said = [  # the node runs whose child was refused, as the depth limit fails them
        run.error.message
        for e in (store.load(row.id)[0] for row in rows)
        for runs in e.node_executions.values()
        for run in runs
        if run.error is not None
    ]
    assert said
    assert all(
        f"of the tree of {root!r}, past Limits.max_tree_executions=20" in m
        and "Registry(limits=Limits(max_tree_executions=...))" in m
        for m in said
    ), said


def test_a_tree_of_sub_workflows_up_to_the_limit_runs() -> None:
    """A root and three children waited on make four executions: at a limit of four, all run."""
    clock = ManualClock(T0)
    leaf = workflow(Node(key="v", type="data.set_data", params={"value": 7}), wid="leaf")
    children = [
        Node(key=key, type="workflow.execute_workflow", params={"workflow_id": "leaf"})
        for key in "abc"
    ]
    fan = workflow(*children, wid="fan")
    store = MemoryStore()
    registry = Registry(limits=Limits(max_tree_executions=4))
    with Runner(registry, store, ManualScheduler(clock), clock, workflows=[leaf]) as runner:
        execution = runner.get(runner.start(fan))
    assert execution.status is ExecutionStatus.COMPLETED, execution.error
    rows = store.list()
    assert len(rows) == 4
    assert {row.status for row in rows} == {ExecutionStatus.COMPLETED}
