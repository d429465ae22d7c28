"""A stored row that cannot be read (a hand-edited status) is listed as unreadable, by its id,
and every other row is listed as usual: by ``prana list`` and by the web list, JSON and HTML."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import httpx
import pytest
from doubles import flaky_node, workflow

from prana import ActionContext, ExecutionStatus, RecordError, Registry
from prana.testing import ManualClock
from scheduling import Runner, UnreadableRow, UnreadableRowsError
from scheduling._cli import main
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores._sql import to_micros
from scheduling.stores.sqlite import SQLiteStore
from scheduling.web import create_app

if TYPE_CHECKING:
    from pathlib import Path

    from scheduling.abc import ExecutionStore

from test_web import OPERATOR, approval, make_runner, waiting


def three_with_one_bogus(db: Path) -> tuple[list[str], str]:
    """Three stored executions (newest first) and the id of the one whose status was edited."""
    with make_runner(SQLiteStore(db)) as runner:
        ids = [waiting(runner, approval())[0] for _ in range(3)]
    bad = ids[1]
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE prana_executions SET status = 'bogus' WHERE id = ?", (bad,))
    return ids[::-1], bad


def test_the_store_error_carries_every_row_in_order(tmp_path: Path) -> None:
    """``list`` still raises a RecordError naming the row, and the error holds the whole page:
    readable rows as summaries, the bad one as an ``UnreadableRow`` with its id and problem."""
    newest_first, bad = three_with_one_bogus(tmp_path / "prana.db")
    store: ExecutionStore = SQLiteStore(tmp_path / "prana.db")
    try:
        with pytest.raises(UnreadableRowsError) as caught:
            store.list()
    finally:
        store.close()
    assert isinstance(caught.value, RecordError)
    assert repr(bad) in str(caught.value)
    assert "bogus" in str(caught.value)
    rows = caught.value.rows
    assert [row.id for row in rows] == newest_first
    (unreadable,) = [row for row in rows if isinstance(row, UnreadableRow)]
    assert unreadable.id == bad
    assert "status: 'bogus' is not an execution status" in unreadable.problem
    readable = [row for row in rows if not isinstance(row, UnreadableRow)]
    assert [row.status for row in readable] == [ExecutionStatus.SUSPENDED] * 2


def test_prana_list_shows_the_bad_row_as_unreadable_and_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana list`` exits 0, lists every readable row, shows the bad one as unreadable by
    its id, and says on stderr which row could not be read and why."""
    db = tmp_path / "prana.db"
    newest_first, bad = three_with_one_bogus(db)
    code = main(["list", "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 0
    lines = out.splitlines()[1:]
    assert len(lines) == 3
    assert [line.split()[0] for line in lines] == [eid[:12] for eid in newest_first]
    assert "unreadable" in lines[1]
    assert lines[0].split()[3] == lines[2].split()[3] == "suspended"
    assert bad in err
    assert "bogus" in err
    assert "\n" not in err.strip()


def test_prana_list_json_marks_the_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana list --json``: the bad row has status ``unreadable`` and a ``problem``."""
    db = tmp_path / "prana.db"
    newest_first, _ = three_with_one_bogus(db)
    code = main(["list", "--db", str(db), "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    rows = json.loads(out)["executions"]
    assert [row["id"] for row in rows] == newest_first
    assert rows[1]["status"] == "unreadable"
    assert "bogus" in rows[1]["problem"]
    assert rows[0]["status"] == "suspended"
    assert rows[0]["problem"] is None


def test_an_id_prefix_still_resolves_beside_a_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana show PREFIX`` finds a readable execution though another row is unreadable."""
    db = tmp_path / "prana.db"
    newest_first, _ = three_with_one_bogus(db)
    code = main(["show", newest_first[0][:12], "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert newest_first[0] in out


def _get(runner: Runner, *paths: str) -> list[httpx.Response]:
    app = create_app(runner, token=OPERATOR)

    async def calls() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 4000))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8000"
        ) as client:
            client.headers["Authorization"] = f"Bearer {OPERATOR}"
            return [await client.get(path) for path in paths]

    return asyncio.run(calls())


def _reopened(db: Path) -> Runner:
    clock = ManualClock()
    return Runner(
        registry=make_runner().registry, store=SQLiteStore(db), scheduler=ManualScheduler(clock)
    )


def test_the_web_json_list_marks_the_bad_row_and_lists_the_rest(tmp_path: Path) -> None:
    """``GET /api/executions`` answers 200: the bad row as ``unreadable`` with its problem."""
    db = tmp_path / "prana.db"
    newest_first, _ = three_with_one_bogus(db)
    with _reopened(db) as runner:
        (response,) = _get(runner, "/api/executions")
    assert response.status_code == 200
    items = response.json()["items"]
    assert [item["id"] for item in items] == newest_first
    assert items[1]["status"] == "unreadable"
    assert "bogus" in items[1]["problem"]
    assert items[0]["status"] == items[2]["status"] == "suspended"


def test_the_web_json_list_pages_past_the_bad_row(tmp_path: Path) -> None:
    """A page that ends on the bad row hands out its id as the next cursor, which works."""
    db = tmp_path / "prana.db"
    newest_first, _ = three_with_one_bogus(db)
    with _reopened(db) as runner:
        (first,) = _get(runner, "/api/executions?limit=2")
        (second,) = _get(runner, f"/api/executions?limit=2&after={first.json()['next_after']}")
    assert [item["id"] for item in first.json()["items"]] == newest_first[:2]
    assert [item["id"] for item in second.json()["items"]] == newest_first[2:]


def test_the_web_html_list_marks_the_bad_row_and_lists_the_rest(tmp_path: Path) -> None:
    """``GET /`` (the executions page) answers 200 and shows every id, the bad one unreadable."""
    db = tmp_path / "prana.db"
    newest_first, bad = three_with_one_bogus(db)
    with _reopened(db) as runner:
        (response,) = _get(runner, "/executions")
    assert response.status_code == 200, response.text
    page = response.text
    for eid in newest_first:
        assert eid in page
    row = page[page.index(f">{bad}<") :]
    row = row[: row.index("</tr>")]
    assert "unreadable" in row
    assert "bogus" in row


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("workflow_id", b"\x00\xff", "workflow_id: the row's workflow id is b'\\x00\\xff'"),
        ("workflow_version", "x", "workflow_version: the row's workflow version is 'x'"),
        ("workflow_version", 1.5, "workflow_version: the row's workflow version is 1.5"),
        ("workflow_version", 0, "workflow_version: the row's workflow version is 0"),
        ("version", "zz", "version: the row's version is 'zz'"),
        ("version", 0, "version: the row's version is 0"),
    ],
)
def test_a_listed_column_of_another_type_is_unreadable_not_listed_as_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: object, problem: str
) -> None:
    """SQLite keeps any value in any column: a row whose workflow id was edited to a blob
    crashed ``prana list --json`` (``TypeError: Object of type bytes is not JSON
    serializable``, a traceback) and the web JSON list (500); text in the workflow version
    or the version was listed as it stood (``"record_version": "zz"``, where the format
    promises a whole number), though ``load`` refuses such a version. The row is listed as
    unreadable, naming the column, beside the others."""
    db = tmp_path / "prana.db"
    with make_runner(SQLiteStore(db)) as runner:
        ids = [waiting(runner, approval())[0] for _ in range(3)]
    bad = ids[1]
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute(f"UPDATE prana_executions SET {column} = ? WHERE id = ?", (value, bad))
    code = main(["list", "--db", str(db), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)["executions"]}
    assert set(rows) == set(ids)
    assert rows[bad]["status"] == "unreadable"
    assert problem in rows[bad]["problem"]
    assert all(rows[eid]["status"] == "suspended" for eid in ids if eid != bad)
    with _reopened(db) as reopened:
        (response,) = _get(reopened, "/api/executions")
    assert response.status_code == 200
    items = {item["id"]: item for item in response.json()["items"]}
    assert items[bad]["status"] == "unreadable"


def test_a_time_column_edited_to_text_reads_as_the_first_datetime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SQLite time column holding text (edited by hand) reads as the first datetime, as an
    out-of-range number does: ``prana list``, ``prana show`` and a worker's re-arming read it
    (each ended in a ``TypeError`` traceback)."""
    db = tmp_path / "prana.db"
    with make_runner(SQLiteStore(db)) as runner:
        eid = waiting(runner, approval())[0]
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute(
            "UPDATE prana_executions SET due_at = 'soon', updated_at = x'00' WHERE id = ?", (eid,)
        )
    assert main(["list", "--db", str(db), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["executions"]
    assert (row["id"], row["status"]) == (eid, "suspended")
    assert row["due_at"] == row["updated_at"] == "0001-01-01T00:00:00+00:00"
    assert main(["show", eid[:12], "--db", str(db)]) == 0
    assert eid in capsys.readouterr().out
    store = SQLiteStore(db)
    try:
        assert store.alarms() == [(eid, datetime.min.replace(tzinfo=timezone.utc))]
    finally:
        store.close()


@pytest.mark.parametrize("text", ["2030-01-01T00:00:05+00:00", "soon"])
def test_a_due_time_edited_to_text_is_found_due_and_runs(tmp_path: Path, text: str) -> None:
    """A SQLite ``due_at`` holding text (written by hand or by a tool) reads as the first
    datetime (``alarms`` says so): ``find_due`` finds it, and ``run_due`` (``prana worker
    --once``) resumes it once its record is due. It was never found: SQLite orders any text
    after every number, so ``due_at <= now`` never held and it silently never ran."""
    db = tmp_path / "prana.db"
    store = SQLiteStore(db)
    clock = ManualClock()
    registry = Registry()

    def fails_once(params: object, ctx: ActionContext) -> object:
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return {"attempt": ctx.attempt}

    registry.register("test.flaky", fails_once)
    runner = Runner(registry, store, ManualScheduler(clock=clock))
    try:
        eid = runner.start(workflow(flaky_node(attempts=2, delay=5)))
        assert store.find_due(clock() + timedelta(seconds=5)) == [
            (eid, clock() + timedelta(seconds=5))
        ]
        with contextlib.closing(sqlite3.connect(db)) as connection, connection:
            connection.execute("UPDATE prana_executions SET due_at = ? WHERE id = ?", (text, eid))
        first = datetime.min.replace(tzinfo=timezone.utc)
        assert store.alarms() == [(eid, first)]
        assert store.find_due(clock()) == [(eid, first)]
        clock.advance(5)  # the record's own due time
        assert runner.run_due() == [eid]
        assert runner.get(eid).status is ExecutionStatus.COMPLETED
        assert store.find_due(clock() + timedelta(days=1)) == []
    finally:
        store.close()


@pytest.mark.parametrize("written", ["the due time", 1e300, float("inf")])
def test_a_due_time_written_as_a_float_reads_as_its_number(
    tmp_path: Path, written: str | float
) -> None:
    """A SQLite ``due_at`` holding a float (a ``REAL`` a tool wrote) reads as that many
    microseconds, rounded up, as SQLite compares it: ``alarms`` and ``find_due`` agree.
    ``alarms`` (a runner's rebuilt alarms, ``prana list``) read it as the first datetime, due
    at once, while ``find_due`` (``prana worker --once``) never found one past now."""
    db = tmp_path / "prana.db"
    store = SQLiteStore(db)
    clock = ManualClock()
    registry = Registry()

    def fails_once(params: object, ctx: ActionContext) -> object:
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return {"attempt": ctx.attempt}

    registry.register("test.flaky", fails_once)
    runner = Runner(registry, store, ManualScheduler(clock=clock))
    try:
        eid = runner.start(workflow(flaky_node(attempts=2, delay=5)))
        due = clock() + timedelta(seconds=5)
        value = to_micros(due) - 0.5 if written == "the due time" else written  # stays REAL
        with contextlib.closing(sqlite3.connect(db)) as connection, connection:
            connection.execute("UPDATE prana_executions SET due_at = ? WHERE id = ?", (value, eid))
        if written == "the due time":
            assert store.alarms() == [(eid, due)]
            assert store.find_due(clock()) == []
            clock.advance(5)
            assert store.find_due(clock()) == [(eid, due)]
            assert runner.run_due() == [eid]
            assert runner.get(eid).status is ExecutionStatus.COMPLETED
        else:  # past every datetime: never due, as a whole number past them reads
            assert store.alarms() == [(eid, datetime.max.replace(tzinfo=timezone.utc))]
            assert store.find_due(clock() + timedelta(days=36_500)) == []
    finally:
        store.close()


def test_rows_whose_due_time_is_text_do_not_hold_back_a_row_due_by_its_time(
    tmp_path: Path,
) -> None:
    """Rows whose ``due_at`` holds text read as due at once, but their records decide, and
    records not due yet are not run. They came first: as many of them as ``limit`` filled
    every page of ``find_due``, so ``run_due`` (``prana worker --once``) and a worker's
    re-arming never reached an execution due by its time, and it never ran."""
    db = tmp_path / "prana.db"
    store = SQLiteStore(db)
    clock = ManualClock()
    registry = Registry()

    def fails_once(params: object, ctx: ActionContext) -> object:
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return {"attempt": ctx.attempt}

    registry.register("test.flaky", fails_once)
    runner = Runner(registry, store, ManualScheduler(clock=clock))
    try:
        due = runner.start(workflow(flaky_node(attempts=2, delay=5)), execution_id="due")
        clock.advance(10)  # due's retry is due; the next two's will be in 5 s
        later = [
            runner.start(workflow(flaky_node(attempts=2, delay=5)), execution_id=f"later{i}")
            for i in range(2)
        ]
        with contextlib.closing(sqlite3.connect(db)) as connection, connection:
            for eid in later:
                connection.execute(
                    "UPDATE prana_executions SET due_at = 'soon' WHERE id = ?", (eid,)
                )
        assert [eid for eid, _ in store.find_due(clock(), limit=2)] == [due, *later][:2]
        assert due in runner.run_due(limit=2)
        assert runner.get(due).status is ExecutionStatus.COMPLETED
        for eid in later:  # found, their records not due yet: left as they are
            assert runner.get(eid).status is ExecutionStatus.SUSPENDED
    finally:
        store.close()
