"""The ``prana`` command, through ``main(argv)`` and once as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from doubles import T0, Harness, fails_first, flaky_node, sub_node, webhook_node, workflow
from processes import ROOT, run_prana

from prana import (
    AttemptOutcome,
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    RecordError,
    Registry,
    RetryPolicy,
    Workflow,
    WorkflowExecution,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._claims import is_claimed
from scheduling._cli import load_actions, main
from scheduling._cli._common import EXIT_UNAVAILABLE
from scheduling._runner import child_execution_id
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

ACTIONS = textwrap.dedent(
    """
    calls = []

    def flaky(params, ctx):
        calls.append(ctx.attempt)
        if ctx.attempt <= params.get("fails", 0):
            raise ConnectionError(f"down on attempt {ctx.attempt}")
        return {"attempt": ctx.attempt}

    def register(registry):
        registry.register("cli.flaky", flaky)
    """
)


def workflow_doc(fails: int, *, webhook: bool = False) -> dict[str, Any]:
    """A trigger -> flaky node (retries 0.05 s apart) [-> webhook wait] workflow as plain data."""
    nodes: list[dict[str, Any]] = [
        {"key": "start", "type": "manual.trigger"},
        {
            "key": "r",
            "type": "cli.flaky",
            "params": {"fails": fails},
            "settings": {"retry_on_failed": True, "max_retries": 3, "retry_delay_ms": 50},
        },
    ]
    connections = [{"from_node": "start", "to_node": "r"}]
    if webhook:
        nodes.append({"key": "w", "type": "wait.wait", "params": {"mode": "webhook"}})
        connections.append({"from_node": "r", "to_node": "w"})
    return {"id": f"cli-{fails}-{webhook}", "nodes": nodes, "connections": connections}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Paths of a fresh database and an actions file in ``tmp_path``."""
    actions = tmp_path / "cli_actions.py"
    actions.write_text(ACTIONS)
    return {"db": str(tmp_path / "prana.db"), "actions": str(actions), "dir": str(tmp_path)}


def write_workflow(tmp_path: Path, doc: dict[str, Any], name: str = "wf.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def execution_id_in(text: str) -> str:
    found = re.search(r"execution ([0-9a-f]{32}): ", text)
    assert found is not None, text
    return found.group(1)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# -- happy paths ------------------------------------------------------------------------------


def test_run_retries_then_completes_and_show_prints_the_timeline(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run`` retries a flaky node to completion; ``list`` and ``show`` report it."""
    path = write_workflow(tmp_path, workflow_doc(fails=2))
    code, out, _ = run(
        ["run", path, "--db", env["db"], "--actions", env["actions"], "--input", '{"a": 1}'],
        capsys,
    )
    assert code == 0
    assert "↻ r (attempt 2/4) retrying in 50ms after ConnectionError: down on attempt 1" in out
    assert "✓ r succeeded on attempt 3 after 2 retries (ConnectionError)" in out
    assert "total retry attempts:      2" in out
    eid = execution_id_in(out)
    code, out, _ = run(["list", "--db", env["db"]], capsys)
    assert code == 0
    assert eid[:12] in out
    assert "completed" in out
    code, out, _ = run(["list", "--db", env["db"], "--status", "failed"], capsys)
    assert (code, out.strip()) == (0, "no executions")
    code, out, _ = run(["show", eid, "--db", env["db"]], capsys)
    assert code == 0
    assert "attempt 3: completed" in out
    assert "(retry in 50ms)" in out
    assert "late " in out


def test_run_yaml_failing_workflow_exits_1(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A YAML workflow whose retries run out ends with exit code 1 and the failure block."""
    import yaml

    path = tmp_path / "wf.yaml"
    path.write_text(yaml.safe_dump(workflow_doc(fails=9)))
    code, out, _ = run(["run", str(path), "--db", env["db"], "--actions", env["actions"]], capsys)
    assert code == 1
    assert "✗ r failed after 4 attempts" in out
    assert "failed after all retries:  1" in out


def test_webhook_run_then_deliver_then_cancel(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` stops at a webhook wait, ``deliver`` finishes it, ``cancel`` refuses an ended one."""
    path = write_workflow(tmp_path, workflow_doc(fails=0, webhook=True))
    code, out, _ = run(["run", path, "--db", env["db"], "--actions", env["actions"]], capsys)
    assert code == 0
    eid = execution_id_in(out)
    assert f"prana deliver {eid} --data JSON" in out
    code, out, _ = run(
        ["deliver", eid, "--db", env["db"], "--actions", env["actions"], "--data", '{"ok": 1}'],
        capsys,
    )
    assert code == 0
    assert f"execution {eid}: completed" in out
    assert '"ok": 1' in out
    code, _, err = run(["cancel", eid, "--db", env["db"]], capsys)
    assert code == 3  # refused by the execution's state: not a usage error
    assert "completed" in err


def test_cancel_a_waiting_execution(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana cancel`` cancels an execution waiting on a webhook."""
    path = write_workflow(tmp_path, workflow_doc(fails=0, webhook=True))
    _, out, _ = run(["run", path, "--db", env["db"], "--actions", env["actions"]], capsys)
    eid = execution_id_in(out)
    code, out, _ = run(["cancel", eid, "--db", env["db"], "--reason", "no longer needed"], capsys)
    assert (code, out.strip()) == (0, f"execution {eid}: cancelled")


def test_worker_once_resumes_due_executions(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana worker --once`` resumes every execution already due, then exits."""
    registry = load_actions(env["actions"])
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=1))
    store = SQLiteStore(env["db"])
    wf = Workflow(
        id="due",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="r",
                type="cli.flaky",
                params={"fails": 1},
                settings=NodeSettings(retry=RetryPolicy(initial_delay=1)),
            ),
        ],
        connections=[Connection(from_node="start", to_node="r")],
    )
    eid = Runner(registry, store, ManualScheduler(clock)).start(wf)
    store.close()
    code, out, _ = run(["worker", "--once", "--db", env["db"], "--actions", env["actions"]], capsys)
    assert (code, out.splitlines()[-1]) == (0, "resumed 1 due execution(s)")
    store = SQLiteStore(env["db"])
    assert store.load(eid)[0].status is ExecutionStatus.COMPLETED
    store.close()


def test_worker_once_counts_records_it_could_not_resume_apart(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--once`` reports an unresumable due record (edited by hand) apart from the ones it
    resumed (was: "resumed 2 due execution(s)" for one resumed and one left as stored), and
    exits 1 so that a cron job notices (it exited 0)."""
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=1))
    store = SQLiteStore(env["db"])
    wf = Workflow(
        id="due",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="w", type="wait.wait", params={"mode": "interval", "duration": 1}),
        ],
        connections=[Connection(from_node="start", to_node="w")],
    )
    runner = Runner(Registry(), store, ManualScheduler(clock))
    good, bad = runner.start(wf), runner.start(wf)
    store.close()
    with sqlite3.connect(env["db"]) as conn:
        conn.execute("UPDATE prana_executions SET data = '{' WHERE id = ?", (bad,))
    conn.close()
    code, out, err = run(["worker", "--once", "--db", env["db"]], capsys)
    assert code == 1
    assert out.splitlines()[-1] == (
        "resumed 1 due execution(s); 1 could not be resumed, left as stored (said above; "
        "prana show ID, prana cancel ID)"
    )
    assert bad in err
    store = SQLiteStore(env["db"])
    assert store.load(good)[0].status is ExecutionStatus.COMPLETED
    store.close()


def test_worker_once_says_when_a_running_execution_s_lease_ends(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Right after a crash, --once leaves a leased running execution alone and says until
    when (was: only "resumed 0 due execution(s)", with nothing saying to come back)."""
    lease_end = datetime.now(timezone.utc) + timedelta(hours=1)
    store = SQLiteStore(env["db"])
    store.save(
        WorkflowExecution(
            id="crashed",
            workflow_id="wf",
            workflow_version=1,
            status=ExecutionStatus.RUNNING,
            lease_expires_at=lease_end,
        ),
        None,
    )
    store.close()
    code, out, _ = run(["worker", "--once", "--db", env["db"], "--actions", env["actions"]], capsys)
    assert code == 0
    assert out.splitlines()[-1] == (
        "resumed 0 due execution(s); 1 running under a lease, the first ending "
        f"{lease_end:%Y-%m-%d %H:%M:%S} UTC (if its process died, a worker takes it up once "
        "the lease has ended)"
    )


def test_worker_without_actions_says_to_pass_them_and_leaves_the_work(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker lacking the actions of a due execution says "pass --actions" in one line.

    The execution is left suspended, not failed; a worker given ``--actions`` finishes it.
    """
    registry = load_actions(env["actions"])
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=1))
    store = SQLiteStore(env["db"])
    wf = Workflow(
        id="needs-actions",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="r",
                type="cli.flaky",
                params={"fails": 1},
                settings=NodeSettings(retry=RetryPolicy(initial_delay=1)),
            ),
        ],
        connections=[Connection(from_node="start", to_node="r")],
    )
    eid = Runner(registry, store, ManualScheduler(clock)).start(wf)
    store.close()
    code, _, err = run(["worker", "--once", "--db", env["db"]], capsys)
    said = [line for line in err.splitlines() if "pass --actions" in line]
    assert code == 1  # left as stored: a cron job notices
    assert len(said) == 1, err
    assert "'needs-actions' v1" in said[0]
    assert "'cli.flaky'" in said[0]
    assert "Traceback" not in err
    store = SQLiteStore(env["db"])
    assert store.load(eid)[0].status is ExecutionStatus.SUSPENDED
    store.close()
    code, _, _ = run(["worker", "--once", "--db", env["db"], "--actions", env["actions"]], capsys)
    store = SQLiteStore(env["db"])
    assert (code, store.load(eid)[0].status) == (0, ExecutionStatus.COMPLETED)
    store.close()


def test_actions_module_by_name_with_a_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--actions NAME`` imports a module from the current directory and uses its ``registry``."""
    (tmp_path / "my_registry_mod.py").write_text(
        "from prana import Registry\nregistry = Registry()\n"
        "registry.register('mine.x', lambda p, c: 1)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "mine.x" in load_actions("my_registry_mod")


def test_demo_runs_and_summarises(capsys: pytest.CaptureFixture[str]) -> None:
    """``prana demo`` runs three flaky calls on the real scheduler and prints the summary."""
    code, out, _ = run(["demo"], capsys)
    assert code == 0
    assert "succeeded after retry:     2" in out
    assert "failed after all retries:  1" in out
    assert out.count(": completed") == 2


def test_demo_as_a_subprocess(tmp_path: Path) -> None:
    """``python -m scheduling._cli demo`` works as a program, in its own process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-m", "scheduling._cli", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": root},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Retry summary" in result.stdout
    assert "↻ call_api (attempt 2/4) retrying in 200ms" in result.stdout
    assert list(tmp_path.iterdir()) == []  # no database left in the current directory
    assert "kept in memory only: nothing was written" in result.stdout


def test_cli_cancel_of_a_child_succeeds_and_a_runner_moves_the_parent_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cancelling a child from the CLI (no --actions) succeeds; the next runner resumes its parent.

    The parent uses a custom action, so the CLI without ``--actions`` cannot resume it (every
    resume validates the action types); the cancel still stands, and a runner that has the
    actions reconciles the parent when it opens.
    """
    db = tmp_path / "child.db"
    h = Harness(SQLiteStore(db))
    h.runner.register_workflow(workflow(webhook_node(), wid="child"))
    with h.runner as runner:
        pid = runner.start(workflow(sub_node("child", "sync"), flaky_node(), wid="parent"))
        cid = child_execution_id(runner.get(pid))
    assert cid is not None
    code, out, _ = run(["cancel", cid, "--db", str(db)], capsys)
    assert (code, out.strip()) == (0, f"execution {cid}: cancelled")
    assert h.store.load(pid)[0].status is ExecutionStatus.SUSPENDED
    with h.runner:
        parent = h.store.load(pid)[0]
    h.store.close()
    assert parent.status is ExecutionStatus.FAILED
    assert parent.error is not None
    assert parent.error.code == "sub_workflow_failed"


# -- mistakes: one line on stderr, exit code 2 --------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "{dir}/missing.json"], "missing.json: no such file"),
        (["run", "{dir}/bad.json"], "bad.json: cannot read the workflow: not valid JSON"),
        (["run", "{dir}/bad.yaml"], "bad.yaml: not valid YAML"),
        (["run", "{dir}/list.yaml"], "a workflow is a YAML mapping, got list"),
        (["run", "{dir}/fields.json"], "$.nodes: required field missing"),
        (["run", "{dir}/good.json", "--input", "{nope"], "--input: not valid JSON"),
        (["run", "{dir}/good.json", "--actions", "no_such_mod_xyz"], "cannot import"),
        (["run", "{dir}/good.json", "--actions", "{dir}/none.py"], "no such file"),
        (["run", "{dir}/good.json", "--actions", "{dir}/empty.py"], "neither a `registry`"),
        (["run", "{dir}/good.json"], "cli.flaky"),
        (["show", "nope"], "no execution 'nope' is stored"),
        (["deliver", "nope", "--data", "1"], "no execution 'nope' is stored"),
        (["deliver", "nope", "--data", "{x"], "--data: not valid JSON"),
        (["list", "--status", "weird"], "--status weird: use one of"),
    ],
)
def test_mistakes_are_one_line_errors(
    argv: list[str],
    message: str,
    env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each mistake prints one clear line to stderr and exits with 2, no traceback."""
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "bad.yaml").write_text("a: [unclosed")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "fields.json").write_text('{"id": "x"}')
    (tmp_path / "empty.py").write_text("x = 1\n")
    write_workflow(tmp_path, workflow_doc(fails=0), "good.json")
    SQLiteStore(env["db"]).close()
    args = [a.replace("{dir}", env["dir"]) for a in argv] + ["--db", env["db"]]
    code, _, err = run(args, capsys)
    assert code == (4 if message.startswith("no execution") else 2)
    assert err.startswith("prana: error: ")
    assert message in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_missing_database_and_corrupt_record(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``show`` without a database, or of a corrupt record, is a one-line error."""
    code, _, err = run(["show", "x", "--db", env["db"]], capsys)
    assert code == 5
    assert "no database at" in err
    store = SQLiteStore(env["db"])
    store.close()
    with sqlite3.connect(env["db"]) as conn:
        conn.execute(
            "INSERT INTO prana_executions (id, workflow_id, workflow_version, status, version,"
            " data) VALUES ('bad', 'wf', 1, 'completed', 1, '{\"schema_version\": 1}')"
        )
    code, _, err = run(["show", "bad", "--db", env["db"]], capsys)
    assert code == 5  # the store cannot be read
    assert "stored execution 'bad' cannot be read" in err
    assert err.count("\n") == 1


def assert_one_line_error(code: int, err: str, message: str, expected: int = 2) -> None:
    """Exit code ``expected`` and one stderr line, ``prana: error: ...``, holding ``message``."""
    assert code == expected
    assert err.startswith("prana: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_cli_mistakes_on_ids_limits_and_databases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown ids, a bad limit, a non-database file and an ended execution: one line each.

    Each exits with its documented code: 4 not found, 2 a mistake, 5 the store cannot be
    used, 3 refused by the execution's state.
    """
    db = str(tmp_path / "cli.db")
    h = Harness(SQLiteStore(db))
    done = h.runner.start(workflow(Node(key="d", type="data.set_data", params={"value": 1})))
    h.store.close()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    cases = [
        (["cancel", "nope", "--db", db], "no execution 'nope' is stored", 4),
        (["list", "--limit", "0", "--db", db], "limit=0", 2),
        (["list", "--db", str(garbage)], str(garbage), 5),
        (["deliver", done, "--data", "1", "--db", db], "completed", 3),
        (["cancel", done, "--db", db], "completed", 3),
    ]
    for argv, message, expected in cases:
        code, _, err = run(argv, capsys)
        assert_one_line_error(code, err, message, expected)


def test_cancel_of_an_ended_execution_says_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana cancel`` of a failed or completed execution says the execution has ended and
    there is nothing to cancel (exit 3); it printed the state table's internals, "from
    failed it may become: suspended", as if a cancel could make it suspended."""
    db = str(tmp_path / "ended.db")
    h = Harness(SQLiteStore(db))
    failed = h.runner.start(
        workflow(Node(key="d", type="data.set_data", params={"value": "{{ $input.main.x }}"}))
    )
    done = h.runner.start(
        workflow(Node(key="d", type="data.set_data", params={"value": 1}), version=2)
    )
    h.store.close()
    for eid, status in [(failed, "failed"), (done, "completed")]:
        code, _, err = run(["cancel", eid, "--db", db], capsys)
        assert_one_line_error(
            code, err, f"execution {eid!r} is {status}: it has ended, there is nothing to cancel", 3
        )
        assert "may become" not in err


def test_an_edited_workflow_file_is_refused_naming_the_file_and_the_version_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run a file, edit it, run it again: the stored definition never changes, so the run is
    refused (exit 3, nothing run) with the file and the line to change (``version: 2``),
    not the Python attribute ``Workflow.version``; so is ``workflows add`` and a child
    file given with ``--workflow``. With the version bumped it runs."""
    db = str(tmp_path / "edit.db")
    doc: dict[str, Any] = {
        "id": "edited",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {"key": "v", "type": "data.set_data", "params": {"value": 1}},
        ],
        "connections": [{"from_node": "start", "to_node": "v"}],
    }
    path = write_workflow(tmp_path, doc, "edited.json")
    assert run(["run", path, "--db", db], capsys)[0] == 0
    doc["nodes"][1]["params"] = {"value": 2}
    write_workflow(tmp_path, doc, "edited.json")
    for argv in (["run", path], ["workflows", "add", path], ["run", path, "--workflow", path]):
        code, _, err = run([*argv, "--db", db], capsys)
        assert_one_line_error(code, err, f"{path}: workflow 'edited' version 1 is already", 3)
        assert "set `version: 2` in" in err
        assert "Workflow.version" not in err
    doc["version"] = 2
    write_workflow(tmp_path, doc, "edited.json")
    code, out, _ = run(["run", path, "--db", db], capsys)
    assert code == 0
    assert out.rstrip().endswith("2")


def test_cli_list_shows_a_corrupt_status_row_as_unreadable_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose status column is garbage is listed as unreadable (exit 0), with one
    stderr line naming its id and the bad value; the store's ``list`` raises RecordError."""
    db = tmp_path / "corrupt.db"
    h = Harness(SQLiteStore(db))
    eid = h.runner.start(workflow(webhook_node()))
    h.store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE prana_executions SET status = 'zombie' WHERE id = ?", (eid,))
    conn.close()
    code, out, err = run(["list", "--db", str(db)], capsys)
    assert code == 0
    assert "unreadable" in out.splitlines()[1]
    assert len(err.strip().splitlines()) == 1
    assert repr(eid) in err
    assert "zombie" in err
    store = SQLiteStore(db)
    try:
        with pytest.raises(RecordError, match="zombie"):
            store.list()
    finally:
        store.close()


@pytest.mark.parametrize("argv", [[], ["--status", "failed"], ["--json"]])
def test_cli_list_shows_a_failed_row_whose_record_is_unreadable_and_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A failed row is loaded for its failure (node, error, attempts); one whose record
    cannot be read (edited by hand) stopped the whole listing, exit 5 and no row listed,
    so one bad row hid every other execution from ``prana list``. It is listed as
    unreadable by its id, with one stderr line, beside the rest (exit 0)."""
    db = tmp_path / "corrupt.db"
    h = Harness(SQLiteStore(db))
    bad = h.runner.start(workflow(webhook_node()))
    good = h.runner.start(workflow(webhook_node()))
    h.store.close()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE prana_executions SET status = 'failed', data = '{garbage' WHERE id = ?",
            (bad,),
        )
    conn.close()
    code, out, err = run(["list", "--db", str(db), *argv], capsys)
    assert code == 0, err
    assert len(err.strip().splitlines()) == 1, err
    assert repr(bad) in err
    assert "not valid JSON" in err
    if "--json" in argv:
        listed = {row["id"]: row for row in json.loads(out)["executions"]}
        assert listed[bad]["status"] == "unreadable"
        assert "not valid JSON" in listed[bad]["problem"]
        assert listed[good]["status"] == "suspended"
    elif argv:
        (line,) = [line for line in out.splitlines() if bad[:12] in line]
        assert "unreadable" in line
    else:
        lines = out.splitlines()
        assert any(good[:12] in line and "suspended" in line for line in lines)
        assert any(bad[:12] in line and "unreadable" in line for line in lines)


def test_cli_list_pages_past_an_unreadable_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last row of a page may be one whose record cannot be read: ``prana list`` names it
    as the next page's cursor (``--after ID``), and that command loaded the record to check
    the id, failing with exit 5: the pages after it could not be reached. The id is stored,
    which is all a cursor needs."""
    db = tmp_path / "corrupt.db"
    h = Harness(SQLiteStore(db))
    oldest, bad, newest = (h.runner.start(workflow(webhook_node())) for _ in range(3))
    h.store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE prana_executions SET data = '{garbage' WHERE id = ?", (bad,))
    conn.close()
    code, out, err = run(["list", "--db", str(db), "--limit", "2", "--json"], capsys)
    assert code == 0, err
    page = json.loads(out)
    assert [row["id"] for row in page["executions"]] == [newest, bad]
    assert page["next_after"] == bad
    code, out, err = run(["list", "--db", str(db), "--after", bad, "--json"], capsys)
    assert code == 0, err
    assert [row["id"] for row in json.loads(out)["executions"]] == [oldest]
    code, _, err = run(["list", "--db", str(db), "--after", bad[:12]], capsys)
    assert code == 0, err


def test_cli_a_binary_workflow_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workflow file that is not UTF-8 text is refused in one line with exit code 2."""
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00\x01 not text")
    code, _, err = run(["run", str(path), "--db", str(tmp_path / "x.db")], capsys)
    assert_one_line_error(code, err, "binary.json")


def test_cli_an_actions_module_whose_register_raises_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``--actions`` module whose ``register`` raises is reported in one line, exit code 2."""
    actions = tmp_path / "raising_actions.py"
    actions.write_text("def register(registry):\n    raise RuntimeError('boom')\n")
    wf = tmp_path / "wf.json"
    wf.write_text(
        '{"id": "w", "nodes": [{"key": "start", "type": "manual.trigger"}], "connections": []}'
    )
    code, _, err = run(
        ["run", str(wf), "--actions", str(actions), "--db", str(tmp_path / "x.db")], capsys
    )
    assert_one_line_error(code, err, "boom")


# -- PostgreSQL ---------------------------------------------------------------------------------


@pytest.mark.postgres
def test_run_list_and_show_on_postgres(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_dsn: str
) -> None:
    """With --postgres the same commands keep executions in PostgreSQL (in their own schema)."""
    import uuid

    import psycopg
    from psycopg import sql

    schema = f"prana_cli_{uuid.uuid4().hex[:10]}"
    where = ["--postgres", postgres_dsn, "--schema", schema]
    try:
        path = write_workflow(tmp_path, workflow_doc(fails=1))
        code, out, _ = run(["run", path, "--actions", env["actions"], *where], capsys)
        assert code == 0
        eid = execution_id_in(out)
        code, out, _ = run(["list", *where], capsys)
        assert (code, eid[:12] in out, "completed" in out) == (0, True, True)
        code, out, _ = run(["show", eid, *where], capsys)
        assert code == 0
        assert "attempt 2: completed" in out
        assert not os.path.exists(env["db"])
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_procrastinate_worker_needs_postgres(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The procrastinate worker refuses to start without a PostgreSQL DSN, in one line."""
    monkeypatch.delenv("PRANA_POSTGRES_DSN", raising=False)
    code, _, err = run(
        ["worker", "--db", env["db"], "--scheduler", "procrastinate", "--actions", env["actions"]],
        capsys,
    )
    assert code == 2
    assert err.strip() == (
        "prana: error: --scheduler procrastinate needs --postgres DSN (or $PRANA_POSTGRES_DSN)"
    )


def test_unreachable_postgres_is_one_line(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A PostgreSQL DSN that cannot be used is reported in one line, not a traceback."""
    code, _, err = run(
        ["list", "--postgres", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"], capsys
    )
    assert code == 5
    assert err.startswith("prana: error: --postgres: cannot use the database:")
    assert "\n" not in err.strip()


def test_procrastinate_worker_rearm_loop_rearms_until_stopped() -> None:
    """The worker's re-arm loop calls rearm_due every round until its stop event is set."""
    import threading

    from scheduling._cli.worker import rearm_until as _rearm_until

    stop = threading.Event()
    calls: list[int] = []

    class Rearming:
        def rearm_due(self) -> int:
            calls.append(1)
            if len(calls) == 3:
                stop.set()
            if len(calls) == 2:
                raise RuntimeError("a failing round is logged, and the loop goes on")
            return 0

    _rearm_until(Rearming(), stop, 0.001)  # type: ignore[arg-type]
    assert len(calls) == 3


def test_demo_keeps_its_executions_in_the_given_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana demo --db FILE`` stores its executions there, for ``list`` to show."""
    db = str(tmp_path / "demo.db")
    code, out, _ = run(["demo", "--db", db], capsys)
    assert code == 0
    assert f"executions kept in {db}: see them with prana list --db {db}" in out
    code, out, _ = run(["list", "--db", db], capsys)
    assert code == 0
    assert out.count("demo.flaky_api") == 3


def test_a_missing_optional_driver_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command whose optional driver is not installed says which extra to install."""
    import builtins

    real_import = builtins.__import__

    def no_psycopg(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("scheduling.stores.postgres"):
            raise ImportError("No module named 'psycopg_pool'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    code, _, err = run(["list", "--postgres", "postgresql://x@127.0.0.1:1/none"], capsys)
    assert code == 5
    assert "pip install 'prana-workflows[postgres]'" in err
    assert err.count("\n") == 1


# -- untrusted text on the operator's terminal --------------------------------------------------


def test_escape_sequences_from_a_definition_never_reach_the_terminal(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workflow id, a node key and an error carrying terminal control sequences (clear the
    screen, set the title, OSC 52: write the clipboard) are printed escaped by run, list and
    show, and rich markup in them is shown as text, not read as markup (a hyperlink)."""
    title = "\x1b]0;owned\x07"
    clipboard = "\x1b]52;c;cHduZWQ=\x07"
    actions = tmp_path / "quoting.py"
    actions.write_text(
        "def send(params, ctx):\n"
        "    raise ValueError('refused ' + params['to'])\n"
        "def register(registry):\n"
        "    registry.register('cli.send', send)\n"
    )
    doc = {
        "id": "[link=https://evil.test]w[/link]\x1b[2J",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {"key": f"say{title}", "type": "data.set_data", "params": {"value": "hi"}},
            {"key": "send", "type": "cli.send", "params": {"to": "{{ $nodes.start.output.k }}"}},
        ],
        "connections": [
            {"from_node": "start", "to_node": f"say{title}"},
            {"from_node": f"say{title}", "to_node": "send"},
        ],
    }
    path = write_workflow(tmp_path, doc)
    given = json.dumps({"k": clipboard})
    argv = ["run", path, "--db", env["db"], "--input", given, "--actions", str(actions)]
    code, out, err = run(argv, capsys)
    assert code == 1
    eid = execution_id_in(out)
    printed = [out, err]
    for argv in (["list", "--db", env["db"]], ["show", eid, "--db", env["db"]]):
        code, out, err = run(argv, capsys)
        assert code == 0
        printed += [out, err]
    text = "".join(printed)
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\\x1b]52;c;" in text  # the failing node's error, escaped
    assert "say\\x1b]0;owned\\x07" in text
    assert "[link=https://evil.test]w[/link]\\x1b[2J v1" in text  # the list's table


def test_an_unknown_node_type_in_a_file_suggests_the_closest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run`` with a mistyped type names the closest built-in and ``--actions``."""
    path = tmp_path / "typo.json"
    path.write_text(
        json.dumps(
            {
                "id": "typo",
                "nodes": [
                    {"key": "t", "type": "manual.trigger"},
                    {"key": "n", "type": "http.reqest"},
                ],
                "connections": [{"from_node": "t", "to_node": "n"}],
            }
        )
    )
    code, _, err = run(["run", str(path), "--db", str(tmp_path / "x.db")], capsys)
    assert code == 2
    assert "'http.reqest' -> 'http.request'" in err
    assert "--actions MODULE" in err


def test_worker_view_off_a_terminal_writes_the_same_plain_lines(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal the worker's view writes each line itself (rich would print the same
    text, without colours, at several times the cost); on a terminal it keeps rich."""
    from scheduling import ConsoleView
    from scheduling._cli.worker import _console_view

    plain = _console_view(ConsoleView)
    assert plain._console is None
    rich = ConsoleView()
    for view in (plain, rich):
        view._write("✓ flow completed (abc123)")
    assert capsys.readouterr().out == "✓ flow completed (abc123)\n" * 2
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert _console_view(ConsoleView)._console is not None


# -- a store command on a database that does not exist --------------------------------------------
# A command that reads the store, pointed at a database that does not exist: one line saying so,
# exit 5 (the store cannot be used), and nothing created (was: exit 2, a usage mistake, and on
# PostgreSQL the schema and tables were created by ``prana list``).


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["list", "--status", "failed", "--json"],
        ["show", "abc"],
        ["cancel", "abc"],
        ["deliver", "abc", "--data", "{}"],
        ["redrive", "abc"],
        ["workflows", "list"],
        ["db", "status"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_a_missing_sqlite_database_is_exit_5_and_stays_missing(
    tmp_path: Path, argv: list[str]
) -> None:
    """``prana list --db missing.sqlite`` (as a process): one line naming the path, exit 5,
    no file made."""
    result = subprocess.run(
        [sys.executable, "-m", "prana", *argv, "--db", "missing.sqlite"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_UNAVAILABLE == 5, result.stderr
    assert result.stderr.startswith("prana: error: no database at missing.sqlite"), result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""
    assert not (tmp_path / "missing.sqlite").exists()


@pytest.mark.postgres
@pytest.mark.parametrize("argv", [["list"], ["show", "abc"], ["db", "status"]], ids=" ".join)
def test_a_postgres_schema_without_prana_tables_is_exit_5_and_stays_empty(
    postgres_dsn: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """PostgreSQL: a schema without prana tables is "no database", exit 5; nothing created."""
    schema = f"prana_missing_{uuid.uuid4().hex[:12]}"
    try:
        code = main([*argv, "--postgres", postgres_dsn, "--schema", schema])
        err = capsys.readouterr().err
        assert code == 5
        assert err.startswith(f"prana: error: no database at PostgreSQL schema {schema}")
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
            ).fetchone()
        assert found is None
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- prana cancel of an execution a worker claimed ------------------------------------------------
# ``prana cancel`` of an execution a worker has claimed (a due retry it is running).
#
# The ledger gets the attempt in flight (closed ``cancelled``) only when the cancel can rebuild it,
# which needs the workflow's actions (``--actions``); without them the command says which attempt
# the record leaves out, instead of cancelling in silence.


CANCEL_ACTIONS = textwrap.dedent(
    """
    def flaky(params, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return "done"

    def register(registry):
        registry.register("test.flaky", flaky)
    """
)


def claimed_retry(db: str) -> str:
    """Store an execution whose due retry (attempt 2 of ``r``) a worker claimed; its id."""
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", fails_first)
    store = SQLiteStore(db)
    try:
        with Runner(registry, store, ManualScheduler(clock), clock=clock) as runner:
            eid = runner.start(workflow(flaky_node()))
        clock.advance(1)
        _, version = store.load(eid)
        store.claim(eid, version, clock() + timedelta(seconds=30), clock())  # then it runs
        assert is_claimed(store.load(eid)[0])
    finally:
        store.close()
    return eid


def cancel(
    db: str, eid: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, list[AttemptOutcome]]:
    code = main(["cancel", eid, "--db", db, *extra])
    _, err = capsys.readouterr()
    store = SQLiteStore(db)
    try:
        cancelled, _ = store.load(eid)
    finally:
        store.close()
    assert cancelled.status is ExecutionStatus.CANCELLED
    record = cancelled.node("r")
    assert record is not None
    return code, err, [a.outcome for a in record.attempts]


def test_cancel_without_actions_says_which_attempt_the_ledger_leaves_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "c.db")
    eid = claimed_retry(db)
    code, err, outcomes = cancel(db, eid, capsys)
    assert code == 0
    assert outcomes == [AttemptOutcome.FAILED]  # attempt 2 ran, and is not in the ledger
    assert "attempt 2 of node 'r'" in err
    assert "--actions" in err
    assert err.count("\n") == 1


def test_cancel_with_actions_records_the_attempt_in_flight_and_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "c.db")
    (tmp_path / "acts.py").write_text(CANCEL_ACTIONS)
    eid = claimed_retry(db)
    code, err, outcomes = cancel(db, eid, capsys, "--actions", str(tmp_path / "acts.py"))
    assert code == 0
    assert outcomes == [AttemptOutcome.FAILED, AttemptOutcome.CANCELLED]
    assert err == ""


# -- prana list tables at 80 columns --------------------------------------------------------------
# ``prana list`` tables at 80 columns: one line per execution, long names cut with an ellipsis, the
# id, error code, attempts and time never cut; piped output is never cut.
#
# Was: the dead-letter table (``--status failed``) folded every cell of a long workflow id or node
# key over three lines at 80 columns, the time split from its date.


NARROW_ACTIONS = """
def down(params, ctx):
    raise ConnectionError("down")

def register(registry):
    registry.register("op.down", down)
"""
LONG_WORKFLOW = "payments-reconciliation-nightly"
LONG_NODE = "charge_customer_card_with_stored_mandate"


def prana_at_width(
    tmp_path: Path, *argv: str, columns: int | None
) -> subprocess.CompletedProcess[str]:
    """Run ``prana ARGV`` on ``op.db`` in ``tmp_path`` with ``COLUMNS`` set (unless None)."""
    env = {} if columns is None else {"COLUMNS": str(columns)}
    return run_prana(tmp_path, *argv, "--db", str(tmp_path / "op.db"), env=env, check=True)


@pytest.fixture
def two_dead_letters(tmp_path: Path) -> Path:
    """Two failed executions of a workflow with a long id and a long node key."""
    (tmp_path / "op_actions.py").write_text(NARROW_ACTIONS)
    doc = {
        "id": LONG_WORKFLOW,
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {
                "key": LONG_NODE,
                "type": "op.down",
                "settings": {"retry_on_failed": True, "max_retries": 2, "retry_delay_ms": 0},
            },
        ],
        "connections": [{"from_node": "start", "to_node": LONG_NODE}],
    }
    (tmp_path / "dead.json").write_text(json.dumps(doc))
    for _ in range(2):
        run_prana(tmp_path, "run", "dead.json", "--db", str(tmp_path / "op.db"),
                  "--actions", "op_actions.py")  # fmt: skip
    return tmp_path


@pytest.mark.parametrize("argv", [["list", "--status", "failed"], ["list"]], ids=" ".join)
def test_at_80_columns_each_execution_is_one_line(two_dead_letters: Path, argv: list[str]) -> None:
    """At 80 columns: a header and one line per execution, none wider than 80; the long
    names are cut with an ellipsis, the id and the time (to the minute) stay whole."""
    out = prana_at_width(two_dead_letters, *argv, columns=80).stdout
    lines = out.splitlines()
    assert len(lines) == 3, out
    assert max(len(line) for line in lines) <= 80, out
    for row in lines[1:]:
        cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
        assert len(cells[0]) == 12  # the id, whole
        assert cells[1].startswith(LONG_WORKFLOW[:6])
        assert cells[1].endswith("… v1")  # the version stays: v1 and v2 are told apart
        date, time = cells[-1].split()
        assert (len(date), date[4], len(time), time[2]) == (10, "-", 5, ":")


def test_the_dead_letter_row_keeps_node_code_and_attempts(two_dead_letters: Path) -> None:
    """The dead-letter view at 80 columns: its header whole, and per row the start of the
    node key, the whole error code and the attempts."""
    lines = prana_at_width(
        two_dead_letters, "list", "--status", "failed", columns=80
    ).stdout.splitlines()
    assert lines[0].split() == ["id", "workflow", "node", "error", "attempts", "failed", "at",
                                "(UTC)"]  # fmt: skip
    for row in lines[1:]:
        cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
        assert cells[2].startswith(LONG_NODE[:6])
        assert cells[2].endswith("…")
        assert cells[3:5] == ["action_error", "3"]


def test_a_wide_terminal_cuts_nothing(two_dead_letters: Path) -> None:
    """At 200 columns everything is whole, seconds included."""
    lines = prana_at_width(
        two_dead_letters, "list", "--status", "failed", columns=200
    ).stdout.splitlines()
    for row in lines[1:]:
        assert f"{LONG_WORKFLOW} v1" in row
        assert LONG_NODE in row
        assert row.split()[-1].count(":") == 2


def test_piped_output_without_a_width_is_never_cut(two_dead_letters: Path) -> None:
    """Piped (no terminal, no COLUMNS), every name is printed whole, one line per row."""
    out = prana_at_width(two_dead_letters, "list", "--status", "failed", columns=None).stdout
    lines = out.splitlines()
    assert len(lines) == 3, out
    for row in lines[1:]:
        assert f"{LONG_WORKFLOW} v1" in row
        assert LONG_NODE in row
        assert "…" not in row


# -- hostile input at the command line ------------------------------------------------------------
# Hostile input at the command line: one line on stderr and a non-zero exit, nothing more.
#
# Each case runs ``prana`` as a real process (a crash of the interpreter, a hang or a huge
# allocation would otherwise take the test run down with it), bounded in time.


def prana(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``prana ARGV`` in ``tmp_path`` with a database there."""
    return run_prana(tmp_path, *argv, env={"PRANA_DB": str(tmp_path / "prana.db")})


def assert_one_line(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert result.stderr.startswith("prana"), result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr


def a_workflow(tmp_path: Path) -> str:
    path = tmp_path / "ok.json"
    path.write_text(
        json.dumps(
            {"id": "ok", "nodes": [{"key": "t", "type": "manual.trigger"}], "connections": []}
        )
    )
    return str(path)


def test_a_20k_deep_flow_yaml_is_refused(tmp_path: Path) -> None:
    """``[[[[...]]]]`` 20,000 deep in YAML: refused for its nesting, not a RecursionError."""
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 20_000 + "]" * 20_000)
    assert_one_line(prana(tmp_path, "run", str(path)), "deep.yaml", "nested deeper than")


def test_a_3k_deep_block_yaml_is_refused(tmp_path: Path) -> None:
    """A mapping nested 3,000 deep by indentation: refused for its nesting."""
    path = tmp_path / "deep.yml"
    path.write_text("".join(f"{'  ' * level}a:\n" for level in range(3_000)) + "  " * 3_000 + "1\n")
    assert_one_line(prana(tmp_path, "run", str(path)), "deep.yml", "nested deeper than")


def test_yaml_aliases_that_expand_without_bound_are_refused(tmp_path: Path) -> None:
    """A "billion laughs" of YAML aliases is refused before anything walks it."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 9)]
    lines += ["id: laughs", "nodes: *a8", "connections: []"]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert_one_line(prana(tmp_path, "run", str(path)), "laughs.yaml", "more than")


@pytest.mark.parametrize(
    ("where", "field"),
    [("duration", "$.nodes[1].params.duration"), ("version", "$.version")],
)
def test_a_5000_digit_yaml_integer_names_the_file_and_field(
    tmp_path: Path, where: str, field: str
) -> None:
    """A YAML integer of 5,000 digits is refused naming the file, the field and the limit
    (was: Python's int-limit message alone, with neither file nor field)."""
    big = "9" * 5000
    path = tmp_path / "big.yaml"
    path.write_text(
        f"id: big\nversion: {big if where == 'version' else 1}\nnodes:\n"
        "  - {key: start, type: manual.trigger}\n"
        "  - key: w\n    type: wait.wait\n    params:\n      mode: interval\n"
        f"      duration: {big if where == 'duration' else 1}\n      unit: seconds\n"
        "connections:\n  - {from_node: start, to_node: w}\n"
    )
    result = prana(tmp_path, "run", str(path))
    assert_one_line(result, "big.yaml", field, "5000 digits", "line ")
    assert "set_int_max_str_digits" not in result.stderr


def test_dev_zero_as_a_workflow_is_refused(tmp_path: Path) -> None:
    """``/dev/zero`` is read up to the size limit, then refused: no hang, no memory blow-up."""
    assert_one_line(prana(tmp_path, "run", "/dev/zero"), "/dev/zero", "larger than")


def test_a_150_mb_workflow_file_is_refused(tmp_path: Path) -> None:
    """A 150 MB file is refused for its size without being read whole."""
    path = tmp_path / "huge.json"
    with path.open("wb") as file:
        file.truncate(150 * 1024 * 1024)
    assert_one_line(prana(tmp_path, "run", str(path)), "huge.json", "larger than")


def test_a_deep_json_workflow_file_is_refused(tmp_path: Path) -> None:
    """JSON nested 30,000 deep in the workflow file: refused for its nesting."""
    path = tmp_path / "deep.json"
    path.write_text('{"id": ' + "[" * 30_000 + "]" * 30_000 + "}")
    assert_one_line(prana(tmp_path, "run", str(path)), "deep.json", "nested deeper than")


def test_30k_deep_json_input_is_refused(tmp_path: Path) -> None:
    """``--input`` nested 30,000 deep: refused before anything runs or is stored."""
    deep = "[" * 30_000 + "]" * 30_000
    result = prana(tmp_path, "run", a_workflow(tmp_path), "--input", deep)
    assert_one_line(result, "--input", "nested deeper than")
    assert not (tmp_path / "prana.db").exists()


def test_30k_deep_json_data_is_refused(tmp_path: Path) -> None:
    """``--data`` nested 30,000 deep: refused before the store is touched."""
    deep = "[" * 30_000 + "]" * 30_000
    result = prana(tmp_path, "deliver", "some-id", "--data", deep)
    assert_one_line(result, "--data", "nested deeper than")


def test_data_just_within_the_nesting_limit_is_accepted(tmp_path: Path) -> None:
    """Nesting up to the limit runs and is stored as usual."""
    from scheduling._cli._bounded import MAX_NESTING

    deep = "[" * (MAX_NESTING - 10) + "]" * (MAX_NESTING - 10)
    result = prana(tmp_path, "run", a_workflow(tmp_path), "--input", deep)
    assert result.returncode == 0, result.stderr
    assert "completed" in result.stdout


@pytest.mark.parametrize("limit", [str(10**30), "0", "-5"])
def test_list_with_an_impossible_limit_is_refused(tmp_path: Path, limit: str) -> None:
    """``list --limit 10**30`` (or 0, or negative) is a one-line error naming the limit."""
    prana(tmp_path, "run", a_workflow(tmp_path))
    assert_one_line(prana(tmp_path, "list", "--limit", limit), f"limit={limit}")


@pytest.mark.parametrize("poll", ["-1", "nan", "inf", "0", "soon", "1e308"])
def test_worker_poll_must_be_a_sane_number_of_seconds(tmp_path: Path, poll: str) -> None:
    """``worker --poll -1`` / ``nan`` / ... is a one-line error, never a busy loop or a hang."""
    assert_one_line(prana(tmp_path, "worker", "--poll", poll), "--poll")


def test_worker_lease_must_be_a_sane_number_of_seconds(tmp_path: Path) -> None:
    """``worker --lease nan`` is a one-line error."""
    assert_one_line(prana(tmp_path, "worker", "--lease", "nan"), "--lease")


@pytest.mark.parametrize(
    ("option", "value"),
    [("--concurrency", "0"), ("--concurrency", "100000"), ("--fetch-poll", "nan")],
)
def test_worker_concurrency_and_fetch_poll_must_be_sane(
    tmp_path: Path, option: str, value: str
) -> None:
    """``worker --concurrency 0`` or ``--fetch-poll nan`` is a one-line error naming the option."""
    assert_one_line(prana(tmp_path, "worker", option, value), option)


def test_worker_async_commits_needs_the_procrastinate_scheduler(tmp_path: Path) -> None:
    """``--async-commits`` names what it applies to instead of being ignored on SQLite."""
    assert_one_line(prana(tmp_path, "worker", "--async-commits"), "--async-commits")
