"""One-off commands (``prana run``, ``prana deliver``) do only their own work.

Only ``prana worker`` resumes executions it was not asked about: a ``run`` or ``deliver``
over a database holding someone else's overdue retry leaves it alone (no side effect, no
new version, nothing counted in its summary), and ``deliver`` to an execution in backoff is
refused before anything runs.
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from prana import Connection, ExecutionStatus, Node, NodeSettings, RetryPolicy, Workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._cli import load_actions, main
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

ACTIONS = textwrap.dedent(
    """
    from pathlib import Path

    def touch(params, ctx):
        with Path(params["log"]).open("a") as log:
            log.write(f"{ctx.execution_id} {ctx.attempt}\\n")
        if ctx.attempt <= params.get("fails", 0):
            raise ConnectionError(f"down on attempt {ctx.attempt}")
        return {"attempt": ctx.attempt}

    def register(registry):
        registry.register("scope.touch", touch)
    """
)


def touching(workflow_id: str, log: Path, *, fails: int, webhook: bool = False) -> Workflow:
    """trigger -> touch (logs each call, fails ``fails`` times, retried 1 s apart) [-> webhook]."""
    nodes = [
        Node(key="start", type="manual.trigger"),
        Node(
            key="touch",
            type="scope.touch",
            params={"log": str(log), "fails": fails},
            settings=NodeSettings(retry=RetryPolicy(initial_delay=1, max_attempts=5)),
        ),
    ]
    connections = [Connection(from_node="start", to_node="touch")]
    if webhook:
        nodes.insert(1, Node(key="hook", type="wait.wait", params={"mode": "webhook"}))
        connections = [
            Connection(from_node="start", to_node="hook"),
            Connection(from_node="hook", to_node="touch"),
        ]
    return Workflow(id=workflow_id, nodes=nodes, connections=connections)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, Any]:
    """A database holding one *other* execution whose retry has been overdue for an hour."""
    actions = tmp_path / "scope_actions.py"
    actions.write_text(ACTIONS)
    db = tmp_path / "prana.db"
    log = tmp_path / "calls.log"
    registry = load_actions(str(actions))
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=1))
    store = SQLiteStore(db)
    other = Runner(registry, store, ManualScheduler(clock)).start(touching("other", log, fails=1))
    version = store.load(other)[1]
    store.close()
    return {
        "db": str(db),
        "actions": str(actions),
        "log": log,
        "registry": registry,
        "other": other,
        "other_version": version,
        "dir": tmp_path,
    }


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def stored(db: str, execution_id: str) -> tuple[ExecutionStatus, int]:
    store = SQLiteStore(db)
    try:
        execution, version = store.load(execution_id)
    finally:
        store.close()
    return execution.status, version


def assert_other_untouched(env: dict[str, Any]) -> None:
    assert stored(env["db"], env["other"]) == (ExecutionStatus.SUSPENDED, env["other_version"])
    assert [line for line in calls(env["log"]) if line.startswith(env["other"])] == [
        f"{env['other']} 1"
    ]


def test_run_leaves_other_overdue_retries_alone(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana run`` runs its own workflow only: another execution's overdue retry stays due."""
    path = env["dir"] / "mine.json"
    from prana import dumps_workflow

    path.write_text(dumps_workflow(touching("mine", env["log"], fails=0)))
    code = main(["run", str(path), "--db", env["db"], "--actions", env["actions"]])
    out = capsys.readouterr().out
    assert code == 0
    assert "execution " in out
    assert "succeeded after retry:     0" in out
    assert_other_untouched(env)


def test_deliver_leaves_other_overdue_retries_alone(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana deliver`` moves its own execution on and nothing else."""
    store = SQLiteStore(env["db"])
    waiting = Runner(env["registry"], store, ManualScheduler(ManualClock())).start(
        touching("waits", env["log"], fails=0, webhook=True)
    )
    store.close()
    code = main(
        ["deliver", waiting, "--db", env["db"], "--actions", env["actions"], "--data", "{}"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f"execution {waiting}: completed" in out
    assert "succeeded after retry:     0" in out
    assert_other_untouched(env)


def test_deliver_to_an_execution_in_backoff_is_refused_before_anything_runs(
    env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``deliver`` to a retry in backoff is refused (exit 3) at once: its retry does not run."""
    code = main(
        ["deliver", env["other"], "--db", env["db"], "--actions", env["actions"], "--data", "{}"]
    )
    captured = capsys.readouterr()
    assert code == 3
    assert "waits on a retry suspension" in captured.err
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
    assert_other_untouched(env)


def test_a_runner_that_does_not_recover_arms_only_its_own_work(env: dict[str, Any]) -> None:
    """``Runner(recover=False)`` arms nothing from the store when it opens; its own work runs."""
    store = SQLiteStore(env["db"])
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    try:
        with Runner(env["registry"], store, scheduler, recover=False) as runner:
            mine = runner.start(touching("mine", env["log"], fails=1))
            scheduler.advance(5)
            assert runner.get(mine).status is ExecutionStatus.COMPLETED
    finally:
        store.close()
    assert_other_untouched(env)
    assert json.dumps(calls(env["log"])).count(mine) == 2


def test_recover_must_be_a_bool() -> None:
    """``Runner(recover=...)`` takes a bool, or fails in one line naming the choice."""
    from prana import InvalidSettingsError

    with pytest.raises(InvalidSettingsError, match=r"Runner\(recover='no'\): use True"):
        Runner(recover="no")  # type: ignore[call-overload]
