"""``prana list`` tables at 80 columns: one line per execution, long names cut with an
ellipsis, the id, error code, attempts and time never cut; piped output is never cut.

Was: the dead-letter table (``--status failed``) folded every cell of a long workflow id
or node key over three lines at 80 columns, the time split from its date.
"""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

import pytest
from processes import run_prana

if TYPE_CHECKING:
    from pathlib import Path

ACTIONS = """
def down(params, ctx):
    raise ConnectionError("down")

def register(registry):
    registry.register("op.down", down)
"""
WORKFLOW = "payments-reconciliation-nightly"
NODE = "charge_customer_card_with_stored_mandate"


def prana(tmp_path: Path, *argv: str, columns: int | None) -> subprocess.CompletedProcess[str]:
    """Run ``prana ARGV`` on ``op.db`` in ``tmp_path`` with ``COLUMNS`` set (unless None)."""
    env = {} if columns is None else {"COLUMNS": str(columns)}
    return run_prana(tmp_path, *argv, "--db", str(tmp_path / "op.db"), env=env, check=True)


@pytest.fixture
def two_dead_letters(tmp_path: Path) -> Path:
    """Two failed executions of a workflow with a long id and a long node key."""
    (tmp_path / "op_actions.py").write_text(ACTIONS)
    doc = {
        "id": WORKFLOW,
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {
                "key": NODE,
                "type": "op.down",
                "settings": {"retry_on_failed": True, "max_retries": 2, "retry_delay_ms": 0},
            },
        ],
        "connections": [{"from_node": "start", "to_node": NODE}],
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
    out = prana(two_dead_letters, *argv, columns=80).stdout
    lines = out.splitlines()
    assert len(lines) == 3, out
    assert max(len(line) for line in lines) <= 80, out
    for row in lines[1:]:
        cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
        assert len(cells[0]) == 12  # the id, whole
        assert cells[1].startswith(WORKFLOW[:6])
        assert cells[1].endswith("… v1")  # the version stays: v1 and v2 are told apart
        date, time = cells[-1].split()
        assert (len(date), date[4], len(time), time[2]) == (10, "-", 5, ":")


def test_the_dead_letter_row_keeps_node_code_and_attempts(two_dead_letters: Path) -> None:
    """The dead-letter view at 80 columns: its header whole, and per row the start of the
    node key, the whole error code and the attempts."""
    lines = prana(two_dead_letters, "list", "--status", "failed", columns=80).stdout.splitlines()
    assert lines[0].split() == ["id", "workflow", "node", "error", "attempts", "failed", "at",
                                "(UTC)"]  # fmt: skip
    for row in lines[1:]:
        cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
        assert cells[2].startswith(NODE[:6])
        assert cells[2].endswith("…")
        assert cells[3:5] == ["action_error", "3"]


def test_a_wide_terminal_cuts_nothing(two_dead_letters: Path) -> None:
    """At 200 columns everything is whole, seconds included."""
    lines = prana(two_dead_letters, "list", "--status", "failed", columns=200).stdout.splitlines()
    for row in lines[1:]:
        assert f"{WORKFLOW} v1" in row
        assert NODE in row
        assert row.split()[-1].count(":") == 2


def test_piped_output_without_a_width_is_never_cut(two_dead_letters: Path) -> None:
    """Piped (no terminal, no COLUMNS), every name is printed whole, one line per row."""
    out = prana(two_dead_letters, "list", "--status", "failed", columns=None).stdout
    lines = out.splitlines()
    assert len(lines) == 3, out
    for row in lines[1:]:
        assert f"{WORKFLOW} v1" in row
        assert NODE in row
        assert "…" not in row
