"""`prana schedule`: add, list, show (next five), pause, resume, trigger, delete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduling._cli import main

WORKFLOW = {
    "id": "report",
    "version": 1,
    "nodes": [{"key": "start", "type": "manual.trigger"}],
    "connections": [],
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_schedule_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "p.db")
    wf = tmp_path / "wf.json"
    wf.write_text(json.dumps(WORKFLOW))
    assert run(capsys, "workflows", "add", str(wf), "--db", db)[0] == 0
    code, out, _ = run(
        capsys, "schedule", "add", "r", "--workflow", "report", "--cron", "0 9 * * *",
        "--timezone", "America/New_York", "--input", '{"to": "ops"}', "--db", db,
    )  # fmt: skip
    assert code == 0
    assert out.startswith("added r  report@latest")
    code, out, _ = run(capsys, "schedule", "show", "r", "--json", "--db", db)
    doc = json.loads(out)
    assert len(doc["next"]) == 5
    assert all(t.endswith(("T13:00:00+00:00", "T14:00:00+00:00")) for t in doc["next"])
    assert doc["input"] == {"to": "ops"}
    assert (doc["catch_up"], doc["overlap"]) == ("last", "skip")
    assert run(capsys, "schedule", "pause", "r", "--db", db)[1].startswith("paused r")
    listed = json.loads(run(capsys, "schedule", "list", "--json", "--db", db)[1])
    assert [(s["id"], s["paused"], s["next"]) for s in listed["schedules"]] == [("r", True, [])]
    assert run(capsys, "schedule", "resume", "r", "--db", db)[0] == 0
    code, out, _ = run(capsys, "schedule", "trigger", "r", "--json", "--db", db)
    execution_id = json.loads(out)["execution_id"]
    assert execution_id.startswith("sched:r:")
    code, out, _ = run(capsys, "list", "--json", "--db", db)
    assert execution_id in out
    assert run(capsys, "schedule", "delete", "r", "--db", db)[1] == "deleted r\n"
    code, _, err = run(capsys, "schedule", "show", "r", "--db", db)
    assert code == 4
    assert "no schedule 'r'" in err


def test_schedule_add_names_the_bad_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "p.db")
    code, _, err = run(
        capsys, "schedule", "add", "r", "--workflow", "w", "--cron", "61 * * * *", "--db", db
    )
    assert code == 2
    assert "Cron(expression)" in err
    code, _, err = run(capsys, "schedule", "add", "r", "--workflow", "w", "--db", db)
    assert "give --cron, --every or --at" in err
