"""Hostile input at the command line: one line on stderr and a non-zero exit, nothing more.

Each case runs ``prana`` as a real process (a crash of the interpreter, a hang or a huge
allocation would otherwise take the test run down with it), bounded in time.
"""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

import pytest
from processes import run_prana

if TYPE_CHECKING:
    from pathlib import Path


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
