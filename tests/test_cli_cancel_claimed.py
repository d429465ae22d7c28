"""``prana cancel`` of an execution a worker has claimed (a due retry it is running).

The ledger gets the attempt in flight (closed ``cancelled``) only when the cancel can rebuild
it, which needs the workflow's actions (``--actions``); without them the command says which
attempt the record leaves out, instead of cancelling in silence.
"""

from __future__ import annotations

import textwrap
from datetime import timedelta
from typing import TYPE_CHECKING

from doubles import T0, fails_first, flaky_node, workflow

from prana import AttemptOutcome, ExecutionStatus, Registry
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._claims import is_claimed
from scheduling._cli import main
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


ACTIONS = textwrap.dedent(
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
    (tmp_path / "acts.py").write_text(ACTIONS)
    eid = claimed_retry(db)
    code, err, outcomes = cancel(db, eid, capsys, "--actions", str(tmp_path / "acts.py"))
    assert code == 0
    assert outcomes == [AttemptOutcome.FAILED, AttemptOutcome.CANCELLED]
    assert err == ""
