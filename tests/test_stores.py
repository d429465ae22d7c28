"""The store conformance suite: every ``ExecutionStore`` keeps the same promises.

Each test in the first part runs against the memory store (live and JSON), SQLite and
PostgreSQL (``store`` fixture in ``conftest.py``); a new backend joins by adding itself
there. Backend-specific behaviour (SQLite's files and pragmas, PostgreSQL's claims)
follows at the end.
"""

from __future__ import annotations

import sqlite3
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from doubles import T0, Harness, at, flaky_node, workflow
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from prana import (
    ExecutionStatus,
    InvalidSettingsError,
    WorkflowExecution,
)
from scheduling import (
    ExecutionNotFound,
    ExecutionStore,
    StaleVersionError,
    StoreError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling.stores.memory import MemoryStore
from scheduling.stores.postgres import SCHEMA_VERSION, PostgresStore
from scheduling.stores.sqlite import SQLiteStore
from scheduling.testing import (
    StoreConformance,
    definition,
    execution,
    retry,
    run_together,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


def corrupt(store: ExecutionStore, eid: str, text: str) -> None:
    """Write ``text`` over the stored record of ``eid``, behind the store's back."""
    if isinstance(store, MemoryStore):
        version, seq, _, execution = store._rows[eid]
        store._rows[eid] = (version, seq, text, execution)
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE prana_executions SET data = ? WHERE id = ?", (text, eid))
        conn.close()
    elif isinstance(store, PostgresStore):
        assert store.schema is not None
        table = sql.Identifier(store.schema, "prana_executions")
        with psycopg.connect(store.dsn, autocommit=True) as pg:
            pg.execute(sql.SQL("UPDATE {} SET data = %s WHERE id = %s").format(table), (text, eid))
    else:  # pragma: no cover - a new backend must teach the suite how to corrupt it
        raise NotImplementedError(type(store).__name__)


# -- the conformance kit over the built-in stores ---------------------------------------


class TestBuiltInStores(StoreConformance):
    """``scheduling.testing.StoreConformance``, the kit users run, over every built-in store."""

    @pytest.fixture
    def store(self, store: ExecutionStore) -> ExecutionStore:
        """The ``store`` fixture of ``conftest.py``: memory, memory JSON, SQLite, PostgreSQL."""
        return store

    def corrupt(self, store: ExecutionStore, execution_id: str, text: str) -> None:
        corrupt(store, execution_id, text)


# -- the built-in stores' own wording and argument checks ----------------------------------


def test_built_in_stores_word_their_refusals_alike(store: ExecutionStore) -> None:
    """The built-in stores' messages name the versions, the id and the fix (the kit checks
    only the error types, which is all the protocol asks of a store of yours)."""
    store.save(retry("e1", at(1)), None)
    store.save(retry("e1", at(5)), 1)
    with pytest.raises(StaleVersionError, match="expected version 1, but version 2"):
        store.save(execution("e1", updated=at(9)), 1)
    with pytest.raises(StaleVersionError, match="already exists"):
        store.save(execution("e1"), None)
    with pytest.raises(StaleVersionError, match="not stored"):
        store.save(execution("ghost"), 1)
    with pytest.raises(ExecutionNotFound, match="'nope'"):
        store.load("nope")
    with pytest.raises(ExecutionNotFound, match="'gone'"):
        store.list(after="gone")
    store.save_workflow(definition())
    with pytest.raises(WorkflowConflictError, match=r"bump Workflow\.version"):
        store.save_workflow(definition(url="https://changed.test"))
    with pytest.raises(WorkflowNotFound, match="'wf' version 2"):
        store.load_workflow("wf", 2)
    with pytest.raises(InvalidSettingsError, match=r"count_tree\(most\)=0"):
        store.count_tree("r_1", 0)  # type: ignore[attr-defined]
    with pytest.raises(InvalidSettingsError, match="root_id=7"):
        store.count_tree(7, 10)  # type: ignore[attr-defined]


def test_built_in_stores_take_a_status_by_its_value(store: ExecutionStore) -> None:
    """A plain status string is accepted by the built-in stores (the protocol asks for an
    ``ExecutionStatus``; the CLI passes what it parsed)."""
    store.save(execution("new", status=ExecutionStatus.FAILED), None)
    assert [s.id for s in store.list("failed")] == ["new"]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.find_due(at(0), limit=0), "limit=0"),
        (lambda s: s.find_due(datetime(2030, 1, 1), 10), "now"),  # noqa: DTZ001 - the bad input
        (lambda s: s.list(limit=-1), "limit=-1"),
        (lambda s: s.list("paused"), "status='paused'"),
        (lambda s: s.list(workflow_id=""), "workflow_id=''"),
        (lambda s: s.list(workflow_id=7), "workflow_id=7"),
        (lambda s: s.list(after=""), "after=''"),
        (lambda s: s.list(after=["e1"]), "after="),
        (lambda s: s.save(execution(), 0), "expected_version=0"),
        (lambda s: s.save({"id": "e1"}, None), "WorkflowExecution"),
        (lambda s: s.save_workflow({"id": "wf"}), "prana.Workflow"),
    ],
)
def test_bad_arguments_raise_a_clear_error(
    store: ExecutionStore, call: Callable[[Any], object], field: str
) -> None:
    """The built-in stores refuse more than the protocol asks, each naming the argument."""
    with pytest.raises(InvalidSettingsError, match=field.replace("(", r"\(")):
        call(store)
    assert list(store.list()) == []


def test_definitions_are_written_once_in_the_store_base(store: ExecutionStore) -> None:
    """Every store keeps definitions through ``BaseStore``: one save_workflow, one load_workflow."""
    from scheduling.stores._base import BaseStore

    assert isinstance(store, BaseStore)
    for cls in type(store).__mro__:
        if cls is BaseStore:
            break
        if cls.__module__.startswith("scheduling."):
            assert {"save_workflow", "load_workflow"}.isdisjoint(vars(cls)), cls


def test_a_definition_is_written_once_and_parsed_once(
    store: ExecutionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saving a definition again touches no row; loading it again parses nothing."""
    from scheduling.stores._base import BaseStore

    assert isinstance(store, BaseStore)
    writes: list[tuple[str, int]] = []
    insert = store._insert_workflow

    def counting(key: tuple[str, int], text: str) -> str | bytes | None:
        writes.append(key)
        return insert(key, text)

    monkeypatch.setattr(store, "_insert_workflow", counting)
    store.save_workflow(definition())
    store.save_workflow(definition())
    first = store.load_workflow("wf", 1)
    assert writes == [("wf", 1)]
    assert store.load_workflow("wf", 1) is first


def test_a_stale_save_keeps_the_due_time_and_status(store: ExecutionStore) -> None:
    """A refused save through a runner's record leaves version, status and alarm untouched."""
    h = Harness(store, fails=1)
    eid = h.runner.start(workflow(flaky_node()))
    execution, version = store.load(eid)
    cancelled_elsewhere = h.runner.cancel(eid)
    with pytest.raises(StaleVersionError):
        store.save(execution, version)
    stored, now_version = store.load(eid)
    assert now_version == version + 1
    assert stored.status is ExecutionStatus.CANCELLED
    assert stored == cancelled_elsewhere
    assert list(store.alarms()) == []
    assert list(store.find_due(T0 + timedelta(days=1))) == []


# -- a property: the store behaves like a map of versions -----------------------------------

OPS = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.one_of(st.none(), st.integers(1, 4))),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, backend=st.sampled_from(["memory", "sqlite"]))
def test_saves_follow_a_version_model(ops: list[tuple[str, int | None]], backend: str) -> None:
    """Any sequence of saves is accepted exactly when its version matches the model's."""
    store: ExecutionStore = MemoryStore() if backend == "memory" else SQLiteStore(":memory:")
    model: dict[str, tuple[int, WorkflowExecution]] = {}
    try:
        for step, (eid, expected) in enumerate(ops):
            record = retry(eid, at(step))
            current = model.get(eid)
            accepted = (
                (current is None)
                if expected is None
                else (current is not None and current[0] == expected)
            )
            if accepted:
                assert store.save(record, expected) == (1 if current is None else current[0] + 1)
                model[eid] = (1 if current is None else current[0] + 1, record)
            else:
                with pytest.raises(StaleVersionError):
                    store.save(record, expected)
        for eid, (version, record) in model.items():
            assert store.load(eid) == (record, version)
        assert sorted(store.alarms()) == sorted(
            (eid, record.due_at) for eid, (_, record) in model.items()
        )
    finally:
        store.close()


# -- the memory store -------------------------------------------------------------------------


def test_memory_store_hands_back_the_saved_object_by_default() -> None:
    """The default memory store keeps the frozen record itself, skipping JSON for speed."""
    store = MemoryStore()
    record = retry("e1", at(1))
    store.save(record, None)
    assert store.load("e1")[0] is record


def test_memory_store_with_serialize_hands_back_a_copy() -> None:
    """MemoryStore(serialize=True) stores JSON text, so a load is an equal, separate copy."""
    store = MemoryStore(serialize=True)
    record = retry("e1", at(1), state={"items": [1]})
    store.save(record, None)
    loaded = store.load("e1")[0]
    assert loaded == record
    assert loaded is not record
    record.state["items"].append(2)
    assert store.load("e1")[0].state == {"items": [1]}


# -- SQLite --------------------------------------------------------------------------------


def test_sqlite_file_keeps_data_across_reopen(tmp_path: Path) -> None:
    """Closing and reopening the file finds executions, versions and definitions again."""
    path = tmp_path / "db.sqlite3"
    store = SQLiteStore(path)
    store.save(retry("e1", at(5)), None)
    store.save(retry("e1", at(6)), 1)
    store.save_workflow(definition())
    store.close()
    reopened = SQLiteStore(path)
    try:
        assert reopened.load("e1") == (retry("e1", at(6)), 2)
        assert reopened.load_workflow("wf", 1) == definition()
        assert list(reopened.alarms()) == [("e1", at(6))]
    finally:
        reopened.close()


def test_a_new_sqlite_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """The database holds every execution's input, params and outputs: a new file, and
    the WAL files SQLite makes beside it, are 0600 under a umask of 022 (they were 0644,
    readable by every local user); an existing file keeps its mode."""
    import os
    import stat

    previous = os.umask(0o022)
    try:
        path = tmp_path / "new.sqlite3"
        store = SQLiteStore(path)
        try:
            store.save(retry("e1", at(5)), None)
            made = [p for p in tmp_path.iterdir() if p.name.startswith("new.sqlite3")]
            assert {p.name for p in made} >= {"new.sqlite3", "new.sqlite3-wal"}
            assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in made} == {
                p.name: 0o600 for p in made
            }
        finally:
            store.close()
        kept = tmp_path / "kept.sqlite3"
        kept.touch(mode=0o640)
        SQLiteStore(kept).close()
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    finally:
        os.umask(previous)


def test_sqlite_runs_wal_with_the_chosen_synchronous_mode(tmp_path: Path) -> None:
    """The file is in WAL mode, and synchronous is NORMAL by default or FULL when asked."""
    normal = SQLiteStore(tmp_path / "n.sqlite3")
    full = SQLiteStore(tmp_path / "f.sqlite3", synchronous="full")
    try:
        with sqlite3.connect(tmp_path / "n.sqlite3") as other:
            assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        other.close()
        assert normal._conn.execute("PRAGMA synchronous").fetchone() == (1,)
        assert full._conn.execute("PRAGMA synchronous").fetchone() == (2,)
        assert full.synchronous == "FULL"
    finally:
        normal.close()
        full.close()


def test_sqlite_wal_shrinks_back_to_its_limit_once_readers_let_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The WAL is bounded (``journal_size_limit``): grown past the limit while a reader held
    it back, it is cut back to the limit at the next checkpoint, instead of keeping its
    size for ever (on a small volume it alone filled the disk, with no way back)."""
    import scheduling.stores.sqlite as sqlite_module

    limit = 64 * 1024
    monkeypatch.setattr(sqlite_module, "WAL_SIZE_LIMIT_BYTES", limit, raising=False)
    path = tmp_path / "wal.sqlite3"
    store = SQLiteStore(path)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM prana_executions").fetchone()  # holds a snapshot
        big = {"pad": "x" * 4000}
        for n in range(300):
            store.save(retry(f"e{n}", at(5), state=big), None)
        wal = tmp_path / "wal.sqlite3-wal"
        assert wal.stat().st_size > 16 * limit  # the reader kept every frame
        reader.execute("COMMIT")
        for n in range(3):  # a checkpoint, then the WAL starts over at its head
            store.save(retry(f"e{n}", at(6)), 1)
        assert wal.stat().st_size <= limit
    finally:
        reader.close()
        store.close()


def test_sqlite_refuses_an_unknown_synchronous_mode(tmp_path: Path) -> None:
    """An unknown synchronous mode is refused at construction, naming the choices."""
    with pytest.raises(InvalidSettingsError, match="NORMAL, FULL, EXTRA"):
        SQLiteStore(tmp_path / "x.sqlite3", synchronous="OFF")
    with pytest.raises(InvalidSettingsError, match="busy_timeout_ms"):
        SQLiteStore(tmp_path / "x.sqlite3", busy_timeout_ms=-1)


def test_sqlite_in_memory_is_one_database_for_every_thread() -> None:
    """A ":memory:" store saved from a scheduler thread is seen from the caller's thread."""
    store = SQLiteStore(":memory:")
    try:
        (result,) = run_together(lambda: store.save(retry("e1", at(1)), None))
        assert result == 1
        assert store.load("e1") == (retry("e1", at(1)), 1)
    finally:
        store.close()


def test_two_sqlite_stores_on_one_file_refuse_each_others_stale_saves(tmp_path: Path) -> None:
    """Two processes' worth of stores on one file share versions: the second save is refused."""
    first, second = SQLiteStore(tmp_path / "s.sqlite3"), SQLiteStore(tmp_path / "s.sqlite3")
    try:
        first.save(retry("e1", at(1)), None)
        _, version = second.load("e1")
        first.save(retry("e1", at(2)), version)
        with pytest.raises(StaleVersionError):
            second.save(execution("e1"), version)
        assert second.load("e1") == (retry("e1", at(2)), 2)
    finally:
        first.close()
        second.close()


def test_sqlite_load_skips_parsing_text_it_wrote(tmp_path: Path) -> None:
    """A load whose stored text is what this store saved returns the saved record itself."""
    store = SQLiteStore(tmp_path / "c.sqlite3", cache_size=2)
    uncached = SQLiteStore(tmp_path / "c.sqlite3", cache_size=0)
    try:
        records = [retry(f"e{i}", at(i)) for i in range(3)]
        for record in records:
            store.save(record, None)
        assert store.load("e2")[0] is records[2]
        assert store.load("e0")[0] == records[0]  # dropped from the cache: parsed again
        assert store.load("e0")[0] is store.load("e0")[0]
        fresh = uncached.load("e2")[0]
        assert fresh == records[2]
        assert fresh is not records[2]
        assert uncached.load("e2")[0] is not fresh
        uncached.save(retry("e2", at(99)), 1)
        assert store.load("e2") == (retry("e2", at(99)), 2)
    finally:
        store.close()
        uncached.close()


def test_sqlite_refuses_a_negative_cache_size() -> None:
    """cache_size below zero is refused, naming the argument."""
    with pytest.raises(InvalidSettingsError, match="cache_size=-1"):
        SQLiteStore(":memory:", cache_size=-1)


# -- PostgreSQL ------------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_claims_hand_each_due_execution_to_one_worker(
    postgres_store: PostgresStore,
) -> None:
    """claim_due leases due executions, earliest first, and skips those another worker holds."""
    for i in range(5):
        postgres_store.save(retry(f"e{i}", at(10 * (5 - i))), None)
    postgres_store.save(retry("later", at(500)), None)
    first = postgres_store.claim_due(at(100), 2, worker="w1")
    assert first == ["e4", "e3"]
    second = postgres_store.claim_due(at(100), 10, worker="w2")
    assert second == ["e2", "e1", "e0"]
    assert postgres_store.claim_due(at(100), 10, worker="w3") == []
    assert len(postgres_store.find_due(at(100))) == 5


@pytest.mark.postgres
def test_postgres_a_claim_ends_at_its_lease_on_save_or_on_release(
    postgres_store: PostgresStore,
) -> None:
    """An expired lease, a save of the execution, or release() makes it claimable again."""
    for eid in ("a", "b", "c"):
        postgres_store.save(retry(eid, at(1)), None)
    lease = timedelta(seconds=30)
    assert postgres_store.claim_due(at(1), worker="w1", lease=lease) == ["a", "b", "c"]
    assert postgres_store.claim_due(at(30), worker="w2") == []
    postgres_store.save(retry("a", at(2)), 1)
    assert postgres_store.release("b", worker="someone-else") is False
    assert postgres_store.release("b", worker="w1") is True
    assert postgres_store.claim_due(at(30), worker="w2") == ["b", "a"]
    assert postgres_store.claim_due(at(31), worker="w3") == ["c"]


@pytest.mark.postgres
def test_postgres_concurrent_claims_never_overlap(postgres_store: PostgresStore) -> None:
    """Four workers claiming at once split the due executions with no id claimed twice."""
    ids = [f"e{i:02d}" for i in range(40)]
    for eid in ids:
        postgres_store.save(retry(eid, at(1)), None)
    results = run_together(
        *(lambda w=w: postgres_store.claim_due(at(1), 15, worker=f"w{w}") for w in range(4))
    )
    claimed = [eid for batch in results for eid in batch]  # type: ignore[attr-defined]
    assert sorted(claimed) == ids


@pytest.mark.postgres
def test_postgres_claim_refuses_bad_arguments(postgres_store: PostgresStore) -> None:
    """claim_due needs a worker name and a positive lease."""
    with pytest.raises(InvalidSettingsError, match="worker"):
        postgres_store.claim_due(at(1), worker="")
    with pytest.raises(InvalidSettingsError, match="lease"):
        postgres_store.claim_due(at(1), worker="w", lease=timedelta(0))


@pytest.mark.postgres
def test_postgres_tables_live_in_the_schema_and_drop_removes_them(
    postgres_store: PostgresStore, postgres_dsn: str
) -> None:
    """setup() creates its tables (and the schema version table) in its schema; drop() too."""
    query = "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1"
    postgres_store.setup()
    with psycopg.connect(postgres_dsn) as conn:
        tables = conn.execute(query, (postgres_store.schema,)).fetchall()
    assert tables == [
        ("prana_executions",),
        ("prana_schedules",),
        ("prana_schema_version",),
        ("prana_workflows",),
    ]
    postgres_store.drop()
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute(query, (postgres_store.schema,)).fetchall() == []


@pytest.mark.postgres
def test_postgres_store_reopens_after_close(postgres_store: PostgresStore) -> None:
    """A closed store opens a new pool on its next use and still finds its data."""
    postgres_store.save(retry("e1", at(1)), None)
    postgres_store.close()
    assert postgres_store.load("e1")[1] == 1


@pytest.mark.postgres
def test_postgres_two_stores_share_versions(
    postgres_store: PostgresStore, postgres_dsn: str
) -> None:
    """A second store (another worker) on the same schema sees the versions the first wrote."""
    other = PostgresStore(postgres_dsn, schema=postgres_store.schema)
    try:
        postgres_store.save(retry("e1", at(1)), None)
        _, version = other.load("e1")
        postgres_store.save(retry("e1", at(2)), version)
        with pytest.raises(StaleVersionError, match="version 2 is stored"):
            other.save(execution("e1"), version)
    finally:
        other.close()


def test_postgres_store_reports_an_unreachable_server() -> None:
    """A server that cannot be reached raises StoreError on first use, not a pool timeout."""
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout_seconds=0.2)
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        store.load("e1")
    store.close()


def test_postgres_store_refuses_a_bad_schema_name() -> None:
    """A schema name that is not a plain identifier is refused before connecting."""
    with pytest.raises(InvalidSettingsError, match="schema"):
        PostgresStore("postgresql://nowhere", schema="x; DROP TABLE y")


# -- a PostgreSQL schema named in mixed case ------------------------------------------------------
# A PostgreSQL schema named in mixed case (``--schema Orders``) is the schema used throughout.
#
# Was: the store created the schema quoted (case kept) but looked its tables up with
# ``to_regclass('Orders.prana_executions')``, which folds the name to ``orders``, so ``prana db
# status`` said the schema held no prana tables; and the procrastinate adapter set
# ``search_path=Orders`` unquoted, so its setup failed with "no schema has been selected to create
# in".


@pytest.fixture
def mixed_schema(postgres_dsn: str) -> Iterator[str]:
    """A fresh schema name in mixed case, dropped afterwards (and its folded twin)."""
    name = f"Prana_Mixed_{uuid.uuid4().hex[:8].upper()}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for schema in (name, name.lower()):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _tables_in(dsn: str, schema: str, prefix: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = %s AND table_name LIKE %s",
            (schema, prefix + "%"),
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.postgres
def test_the_store_reads_its_schema_version_in_a_mixed_case_schema(
    postgres_dsn: str, mixed_schema: str
) -> None:
    """``stored_schema_version`` (``prana db status``) finds the tables setup made."""
    store = PostgresStore(postgres_dsn, schema=mixed_schema)
    try:
        store.setup()
        assert store.stored_schema_version() == SCHEMA_VERSION
    finally:
        store.close()
    assert "prana_executions" in _tables_in(postgres_dsn, mixed_schema, "prana_")
    assert not _tables_in(postgres_dsn, mixed_schema.lower(), "prana_")


@pytest.mark.postgres
def test_procrastinate_sets_up_its_tables_in_a_mixed_case_schema(
    postgres_dsn: str, mixed_schema: str
) -> None:
    """The procrastinate adapter's tables go into the schema named, case kept."""
    pytest.importorskip("procrastinate")
    from scheduling.adapters.procrastinate import ProcrastinateScheduler

    scheduler = ProcrastinateScheduler(postgres_dsn, schema=mixed_schema, run_in_thread=False)
    try:
        scheduler.setup()
    finally:
        scheduler.shutdown()
    assert "procrastinate_jobs" in _tables_in(postgres_dsn, mixed_schema, "procrastinate_")
