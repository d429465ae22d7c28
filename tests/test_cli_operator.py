"""The operator's CLI: JSON output, short ids, exit codes, sub-workflows and --actions help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from scheduling._cli import main
from scheduling._console import short_id

if TYPE_CHECKING:
    from pathlib import Path

ACTIONS = textwrap.dedent(
    """
    def flaky(params, ctx):
        if ctx.attempt <= params.get("fails", 0):
            raise ConnectionError("down")
        return {"attempt": ctx.attempt}

    def register(registry):
        registry.register("op.flaky", flaky)
    """
)


def flaky_doc(wid: str = "op", fails: int = 1) -> dict[str, Any]:
    """trigger -> op.flaky retried 10 ms apart."""
    return {
        "id": wid,
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {
                "key": "call",
                "type": "op.flaky",
                "params": {"fails": fails},
                "settings": {"retry_on_failed": True, "max_retries": 3, "retry_delay_ms": 10},
            },
        ],
        "connections": [{"from_node": "start", "to_node": "call"}],
    }


def parent_doc(child: str = "child") -> dict[str, Any]:
    """trigger -> a sync sub-workflow node running ``child``."""
    return {
        "id": "parent",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {"key": "sub", "type": "workflow.execute_workflow", "params": {"workflow_id": child}},
            {"key": "after", "type": "data.set_data", "params": {"value": "after ran"}},
        ],
        "connections": [
            {"from_node": "start", "to_node": "sub"},
            {"from_node": "sub", "to_node": "after"},
        ],
    }


@pytest.fixture
def site(tmp_path: Path) -> dict[str, str]:
    """A database path, an actions file and workflow files in ``tmp_path``."""
    (tmp_path / "op_actions.py").write_text(ACTIONS)
    (tmp_path / "flaky.json").write_text(json.dumps(flaky_doc()))
    (tmp_path / "child.json").write_text(json.dumps(flaky_doc("child", fails=0)))
    (tmp_path / "parent.json").write_text(json.dumps(parent_doc()))
    return {"dir": str(tmp_path), "db": str(tmp_path / "op.db")}


def cli(
    site: dict[str, str], capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:
    code = main([*argv, "--db", site["db"]])
    out, err = capsys.readouterr()
    return code, out, err


def actions(site: dict[str, str]) -> list[str]:
    return ["--actions", f"{site['dir']}/op_actions.py"]


def test_list_and_show_json_have_stable_documented_fields(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``list --json`` and ``show --json`` print the documented fields, every attempt included."""
    code, _, _ = cli(site, capsys, "run", f"{site['dir']}/flaky.json", *actions(site))
    assert code == 0
    code, out, _ = cli(site, capsys, "list", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["format"] == 1
    (row,) = doc["executions"]
    assert set(row) == {
        "id", "workflow_id", "workflow_version", "status", "record_version", "due_at",
        "updated_at", "failure", "problem",
    }  # fmt: skip
    assert row["failure"] is None  # set on failed executions only
    assert (row["workflow_id"], row["status"], row["due_at"]) == ("op", "completed", None)
    code, out, _ = cli(site, capsys, "show", row["id"], "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["id"] == row["id"]
    assert shown["status"] == "completed"
    assert shown["record_version"] == row["record_version"]
    assert shown["output"] == {"attempt": 2}
    (call,) = shown["node_executions"]["call"]
    assert [a["outcome"] for a in call["attempts"]] == ["failed", "completed"]
    assert call["attempts"][0]["error"]["type"] == "ConnectionError"
    assert call["attempts"][0]["error"]["traceback"].endswith(", in flaky\nConnectionError: down")
    assert call["attempts"][0]["retry_delay_ms"] == 10
    assert "pending" not in shown
    code, out, _ = cli(site, capsys, "show", row["id"])
    assert code == 0
    text = out[out.index("  traceback of call run 0 of attempt 1:\n") :]
    assert "    Traceback (most recent call last):\n" in text
    assert 'op_actions.py", line ' in text
    assert ", in flaky\n    ConnectionError: down\n" in text


def test_list_filters_by_workflow_and_pages_after_an_id(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``list --workflow W`` asks the store for one workflow; ``--after ID`` (a printed prefix
    works) continues below that execution; an unknown cursor exits 4."""
    for path in ("flaky.json", "child.json", "flaky.json", "flaky.json"):
        cli(site, capsys, "run", f"{site['dir']}/{path}", *actions(site), "--input", "{}")
    _, out, _ = cli(site, capsys, "list", "--json")
    every = [(row["id"], row["workflow_id"]) for row in json.loads(out)["executions"]]
    ops = [eid for eid, wid in every if wid == "op"]
    assert len(ops) == 3
    _, out, _ = cli(site, capsys, "list", "--json", "--workflow", "op")
    assert [row["id"] for row in json.loads(out)["executions"]] == ops
    _, out, _ = cli(site, capsys, "list", "--json", "--workflow", "op", "--after", ops[0])
    assert [row["id"] for row in json.loads(out)["executions"]] == ops[1:]
    _, table, _ = cli(site, capsys, "list", "--workflow", "op", "--after", short_id(ops[1]))
    assert short_id(ops[2]) in table
    assert short_id(ops[0]) not in table
    assert "child" not in table
    code, _, err = cli(site, capsys, "list", "--after", "zz")
    assert code == 4
    assert "no execution 'zz'" in err


def test_a_full_page_says_where_the_next_one_starts(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``list --limit N`` with more than N executions says so: the table ends with the
    ``--after`` that gives the next page, ``--json`` has ``next_after`` (``null`` on the last
    page), so an operator reading 50 dead letters knows there are more (it was silent)."""
    for _ in range(3):
        cli(site, capsys, "run", f"{site['dir']}/flaky.json", *actions(site), "--input", "{}")
    _, out, _ = cli(site, capsys, "list", "--json", "--limit", "2")
    page = json.loads(out)
    ids = [row["id"] for row in page["executions"]]
    assert len(ids) == 2
    assert page["next_after"] == ids[-1]
    _, table, _ = cli(site, capsys, "list", "--limit", "2")
    assert table.splitlines()[-1] == f"more: the next page is --after {ids[-1]}"
    _, out, _ = cli(site, capsys, "list", "--json", "--limit", "2", "--after", ids[-1])
    last = json.loads(out)
    assert len(last["executions"]) == 1
    assert last["next_after"] is None
    _, table, _ = cli(site, capsys, "list", "--limit", "3")
    assert "more:" not in table
    assert len(table.splitlines()) == 4


def test_ids_are_accepted_by_the_prefix_the_console_prints(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``show`` takes the 12-character id ``list`` and the console print; a miss exits 4."""
    cli(site, capsys, "run", f"{site['dir']}/flaky.json", *actions(site))
    _, out, _ = cli(site, capsys, "list", "--json")
    full = json.loads(out)["executions"][0]["id"]
    _, table, _ = cli(site, capsys, "list")
    assert short_id(full) in table
    assert full not in table
    code, out, _ = cli(site, capsys, "show", short_id(full))
    assert code == 0
    assert full in out
    code, _, err = cli(site, capsys, "show", "zz")
    assert code == 4
    assert "no execution 'zz' is stored" in err


def test_an_ambiguous_prefix_is_a_one_line_mistake(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A prefix matching several executions lists them and exits 2."""
    for _ in range(20):
        cli(site, capsys, "run", f"{site['dir']}/flaky.json", *actions(site), "--input", "{}")
    _, out, _ = cli(site, capsys, "list", "--json", "--limit", "100")
    ids = [row["id"] for row in json.loads(out)["executions"]]
    first = ids[0][0]
    if sum(1 for i in ids if i.startswith(first)) < 2:  # 20 hex ids share a first character
        first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) >= 2)
    code, _, err = cli(site, capsys, "show", first)
    assert code == 2
    assert "matches" in err
    assert err.count("\n") == 1


def test_a_parents_printed_id_names_the_parent_not_its_children(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A child's id starts with its parent's, so the 12 characters printed for the parent were
    an "ambiguous prefix"; they name the parent, and the child is named with its suffix."""
    code, _, err = cli(
        site, capsys, "run", f"{site['dir']}/parent.json",
        "--workflow", f"{site['dir']}/child.json", *actions(site),
    )  # fmt: skip
    assert code == 0, err
    _, out, _ = cli(site, capsys, "list", "--json")
    ids = [row["id"] for row in json.loads(out)["executions"]]
    (parent,) = [eid for eid in ids if ":" not in eid]
    (child,) = [eid for eid in ids if ":" in eid]
    _, table, _ = cli(site, capsys, "list")
    assert short_id(parent) in table.split()
    code, out, err = cli(site, capsys, "show", short_id(parent))
    assert code == 0, err
    assert out.startswith(f"execution {parent}\n")
    code, out, err = cli(site, capsys, "show", short_id(child))
    assert code == 0, err
    assert out.startswith(f"execution {child}\n")
    code, out, err = cli(site, capsys, "show", parent[:6], "--json")
    assert code == 0, err
    assert json.loads(out)["id"] == parent


def test_a_reader_that_stops_early_breaks_nothing(site: dict[str, str], tmp_path: Path) -> None:
    """``prana run ... | head -1``, ``prana show ID | head``: once the reader has gone, the
    command goes quiet and finishes its work (the run's execution completes, not left running)
    and exits as it would have; no BrokenPipeError traceback."""
    db = site["db"]

    def gone_reader(*argv: str) -> tuple[int, str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prana", *argv, "--db", db],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )  # fmt: skip
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the first line is written
        err = proc.stderr.read()
        proc.stderr.close()
        return proc.wait(timeout=60), err

    assert gone_reader("run", f"{site['dir']}/flaky.json", *actions(site)) == (0, "")
    listed = subprocess.run(
        [sys.executable, "-m", "prana", "list", "--db", db, "--json"],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    (row,) = json.loads(listed.stdout)["executions"]
    assert row["status"] == "completed"
    for argv in (["list"], ["list", "--json"], ["show", row["id"]], ["workflows", "list"]):
        assert gone_reader(*argv) == (0, ""), argv


def test_a_child_run_is_shown_with_its_own_id() -> None:
    """A child's id is its parent's plus a suffix; the console keeps the suffix, not 12 chars."""
    parent = "0123456789abcdef0123456789abcdef"
    child = f"{parent}:sub:0:1"
    assert short_id(parent) == "0123456789ab"
    assert short_id(child) == "0123456789ab:sub:0:1"
    assert short_id(child) != short_id(parent)


def test_the_list_table_fits_a_narrow_terminal(site: dict[str, str], tmp_path: Path) -> None:
    """``prana list`` in an 80-column terminal prints no line wider than 80."""
    env = {**os.environ, "COLUMNS": "80"}
    db = site["db"]
    subprocess.run(
        [sys.executable, "-m", "prana", "run", f"{site['dir']}/flaky.json", "--db", db,
         *actions(site)],
        check=True, capture_output=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    listed = subprocess.run(
        [sys.executable, "-m", "prana", "list", "--db", db],
        check=True, capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    lines = listed.stdout.splitlines()
    assert len(lines) == 2
    assert max(len(line) for line in lines) <= 80


def test_delivering_to_a_completed_execution_is_refused_not_a_usage_error(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused operation exits 3; usage errors keep 2."""
    cli(site, capsys, "run", f"{site['dir']}/flaky.json", *actions(site))
    _, out, _ = cli(site, capsys, "list", "--json")
    eid = json.loads(out)["executions"][0]["id"]
    code, _, err = cli(site, capsys, "deliver", eid, "--data", "{}", *actions(site))
    assert code == 3
    assert err.count("\n") == 1
    code, _, _ = cli(site, capsys, "cancel", eid)
    assert code == 3


def test_run_registers_child_workflows_given_with_workflow(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run parent.json --workflow child.json`` runs the child and the parent completes."""
    code, out, err = cli(
        site, capsys, "run", f"{site['dir']}/parent.json",
        "--workflow", f"{site['dir']}/child.json", *actions(site),
    )  # fmt: skip
    assert code == 0, err
    assert "after ran" in out
    code, out, _ = cli(site, capsys, "workflows", "list", "--json")
    assert code == 0
    assert {"id": "child", "version": 1} in json.loads(out)["workflows"]


def test_workflows_add_then_run_the_parent(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana workflows add child.json`` registers it; a later ``run parent.json`` finds it."""
    code, out, _ = cli(
        site, capsys, "workflows", "add", f"{site['dir']}/child.json", *actions(site)
    )
    assert (code, out.strip()) == (0, "registered child v1")
    code, out, _ = cli(site, capsys, "workflows", "list")
    assert out.strip() == "child v1"
    code, out, _ = cli(site, capsys, "run", f"{site['dir']}/parent.json", *actions(site))
    assert code == 0
    assert "after ran" in out


def test_an_unknown_child_is_refused_before_anything_runs(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A sub-workflow node naming an unregistered child is refused at start: nothing is stored."""
    code, _, err = cli(site, capsys, "run", f"{site['dir']}/parent.json")
    assert code == 2
    assert "sub-workflow 'child'" in err
    assert "--workflow" in err
    code, out, _ = cli(site, capsys, "list", "--json")
    assert json.loads(out)["executions"] == []


def test_missing_actions_says_to_pass_actions(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A workflow using an unregistered type, run without --actions, says to pass --actions."""
    code, _, err = cli(site, capsys, "run", f"{site['dir']}/flaky.json")
    assert code == 2
    assert "'op.flaky'" in err
    assert "pass --actions" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("given", ["op_actons.py", "sub/op_actions", "op_actons"])
def test_a_mistyped_actions_path_says_the_file_does_not_exist(
    given: str,
    site: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mistyped --actions file or module says it does not exist, in one line."""
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(site, capsys, "run", f"{site['dir']}/flaky.json", "--actions", given)
    assert code == 2
    assert "does not exist" in err or "no file" in err
    assert err.count("\n") == 1


def test_deliver_without_actions_to_a_waiting_custom_workflow_says_to_pass_actions(
    site: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``deliver`` to a waiting execution whose workflow needs actions asks for --actions."""
    doc = flaky_doc("waits", fails=0)
    doc["nodes"].append({"key": "w", "type": "wait.wait", "params": {"mode": "webhook"}})
    doc["connections"].append({"from_node": "call", "to_node": "w"})
    (tmp_path / "waits.json").write_text(json.dumps(doc))
    code, _, _ = cli(site, capsys, "run", f"{site['dir']}/waits.json", *actions(site))
    assert code == 0
    _, out, _ = cli(site, capsys, "list", "--json")
    eid = json.loads(out)["executions"][0]["id"]
    code, _, err = cli(site, capsys, "deliver", eid[:12], "--data", "{}")
    assert code == 2
    assert "pass --actions" in err
    assert err.count("\n") == 1
    code, out, _ = cli(site, capsys, "deliver", eid[:12], "--data", "{}", *actions(site))
    assert code == 0
    assert "completed" in out


def test_the_dead_letter_view_shows_where_why_and_how_often(
    site: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``list --status failed`` shows the failed node, error code, attempts and when; the
    JSON rows carry the same as ``failure``."""
    (tmp_path / "dead.json").write_text(json.dumps(flaky_doc("dead", fails=9)))
    code, _, _ = cli(site, capsys, "run", f"{site['dir']}/dead.json", *actions(site))
    assert code == 1
    cli(site, capsys, "run", f"{site['dir']}/flaky.json", *actions(site))
    code, out, _ = cli(site, capsys, "list", "--status", "failed")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["id", "workflow", "node", "error", "attempts", "failed", "at",
                              "(UTC)"]  # fmt: skip
    assert row.split()[1:5] == ["dead", "v1", "call", "action_error"]
    assert row.split()[5] == "4"
    code, out, _ = cli(site, capsys, "list", "--status", "failed", "--json")
    (dead,) = json.loads(out)["executions"]
    failure = dead["failure"]
    assert (failure["node"], failure["code"], failure["attempts"]) == ("call", "action_error", 4)
    assert (failure["type"], failure["message"]) == ("ConnectionError", "down")
    assert failure["failed_at"] is not None
    assert row.split()[6] == failure["failed_at"][:10]
    # --code keeps the dead letters with that error code (a failed run's list: dead only)
    code, out, _ = cli(site, capsys, "list", "--code", "action_error", "--json")
    assert [row["id"] for row in json.loads(out)["executions"]] == [dead["id"]]
    code, out, _ = cli(site, capsys, "list", "--code", "timeout")
    assert (code, out) == (0, "no executions\n")
    code, _, err = cli(site, capsys, "list", "--code", "timeout", "--status", "completed")
    assert code != 0
    assert "only failed executions have an error code" in err


def test_list_and_show_read_while_another_process_holds_the_write_lock(
    site: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Read-only ``list`` and ``show`` never need SQLite's write lock: with another
    connection holding it (``BEGIN IMMEDIATE``), they answer (they waited ``busy_timeout``
    and exited 5, "check the path and its permissions", while opening the store took it)."""
    import sqlite3

    code, _, _ = cli(site, capsys, "run", f"{site['dir']}/flaky.json", *actions(site))
    assert code == 0
    writer = sqlite3.connect(site["db"], isolation_level=None, timeout=0)
    try:
        writer.execute("BEGIN IMMEDIATE")  # holds the write lock until the end
        other = sqlite3.connect(site["db"], isolation_level=None, timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")  # the lock is held indeed
        other.close()
        code, out, err = cli(site, capsys, "list", "--json")
        assert (code, err) == (0, "")
        (row,) = json.loads(out)["executions"]
        code, out, err = cli(site, capsys, "show", row["id"], "--json")
        assert (code, err) == (0, "")
        assert json.loads(out)["status"] == "completed"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
