"""What a new user met following the README and the docs from a clean install.

Each test is one finding: the command as the user typed it, and what it should say or do.
"""

from __future__ import annotations

import builtins
import json
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from prana import ExecutionStatus, Registry, loads_workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._cli import _parser, main
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore
from scheduling.web import create_app


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        _parser().parse_args([*argv, "--help"])
    out: str = capsys.readouterr().out
    return " ".join(out.split())


# -- a missing extra names the extra that is missing --------------------------------------------


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("procrastinate", "procrastinate"),
        ("psycopg", "postgres"),
        ("psycopg_pool", "postgres"),
        ("yaml", "yaml"),
    ],
)
def test_a_missing_module_names_its_own_extra(
    module: str,
    extra: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`prana worker --scheduler procrastinate` with only the postgres extra installed said
    "install the extra it needs, e.g. pip install 'prana-workflows[postgres]'", the one
    already there; it names the extra that holds the missing module."""
    real_import = builtins.__import__

    def missing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == module or name.startswith(module + "."):
            raise ModuleNotFoundError(f"No module named '{module}'", name=module)
        return real_import(name, *args, **kwargs)

    def needs_it(_args: Any) -> int:
        __import__(module)
        return 0

    monkeypatch.setattr(builtins, "__import__", missing)
    monkeypatch.setattr("scheduling._cli.listing._cmd_list", needs_it)
    code = main(["list", "--db", str(tmp_path / "x.db")])
    err = capsys.readouterr().err
    assert code == 5
    assert f"pip install 'prana-workflows[{extra}]'" in err
    assert err.count("pip install") == 1
    assert err.count("\n") == 1


def test_a_missing_module_of_no_extra_names_the_module_and_no_wrong_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module no extra provides is named as it is, without advice to install postgres."""

    def needs_it(_args: Any) -> int:
        raise ModuleNotFoundError("No module named 'nowhere_to_be_found'", name="nowhere")

    monkeypatch.setattr("scheduling._cli.listing._cmd_list", needs_it)
    code = main(["list", "--db", str(tmp_path / "x.db")])
    err = capsys.readouterr().err
    assert code == 5
    assert "nowhere_to_be_found" in err
    assert "[postgres]" not in err


# -- help texts that said something else than the command does ----------------------------------


def test_demo_help_says_it_keeps_nothing_without_db(capsys: pytest.CaptureFixture[str]) -> None:
    """`prana demo --help` said "--db DB SQLite database (default ./prana.db or $PRANA_DB)",
    but without --db (or $PRANA_DB) the demo keeps its executions in memory only."""
    text = _help(capsys, "demo")
    assert "default ./prana.db" not in text
    assert "in memory" in text


def test_cancel_help_does_not_limit_it_to_suspended_executions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`prana cancel` cancels any execution that has not ended (pending, running or
    suspended); its help said "cancel a suspended execution"."""
    text = _help(capsys, "cancel")
    assert "cancel a suspended execution" not in text
    assert "has not ended" in text


def test_redrive_help_says_it_takes_a_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """`prana redrive 3f9c2a71b0de` (the docs' own example) works; its help said "the
    execution id" where every other command says "or a unique prefix of it"."""
    assert "or a unique prefix of it" in _help(capsys, "redrive")


# -- --lease on every command that runs actions ------------------------------------------------

LEASE_ACTIONS = textwrap.dedent(
    """
    import json
    from datetime import datetime, timezone

    from scheduling.stores.sqlite import SQLiteStore

    def charge(params, ctx):
        if not params["up"]:
            raise ConnectionError("bank down")
        store = SQLiteStore(params["db"])
        try:
            execution = store.load(ctx.execution_id)[0]
        finally:
            store.close()
        left = (execution.lease_expires_at - datetime.now(timezone.utc)).total_seconds()
        return {"lease_left": left}

    def register(registry):
        registry.register("shop.charge", charge)
    """
)


def test_redrive_takes_lease_like_run_and_deliver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The docs ask every process of a deployment for the same --lease, but `prana redrive`
    (which runs actions) had no --lease: a deployment on --lease 120 had its redriven
    attempts taken up by a worker 30 s after a dead redrive. It takes --lease now, and the
    execution is stored running under that lease while the action runs."""
    db = str(tmp_path / "prana.db")
    actions = tmp_path / "lease_actions.py"
    actions.write_text(LEASE_ACTIONS)
    doc = {
        "id": "lease",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {"key": "charge", "type": "shop.charge", "params": {"up": False, "db": db}},
        ],
        "connections": [{"from_node": "start", "to_node": "charge"}],
    }
    path = tmp_path / "lease.json"
    path.write_text(json.dumps(doc))
    assert main(["run", str(path), "--db", db, "--actions", str(actions)]) == 1
    store = SQLiteStore(db)
    try:
        [row] = store.list()
        execution = store.load(row.id)[0]
        assert execution.status is ExecutionStatus.FAILED
        # The cause is fixed: the node's params now say the bank is up.
        fixed = tmp_path / "lease_up.py"
        fixed.write_text(LEASE_ACTIONS.replace('params["up"]', "True"))
        before = datetime.now(timezone.utc)
        code = main(["redrive", row.id[:12], "--db", db, "--actions", str(fixed), "--lease", "120"])
        capsys.readouterr()
        assert code == 0
        done = store.load(row.id)[0]
    finally:
        store.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert isinstance(done.output, dict)
    elapsed = (datetime.now(timezone.utc) - before).total_seconds()
    assert 120 - elapsed - 1 <= done.output["lease_left"] <= 120


def test_redrive_refuses_a_bad_lease_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--lease on redrive is checked like run's: seconds > 0, one line, exit 2."""
    code = main(["redrive", "abc", "--db", str(tmp_path / "x.db"), "--lease", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--lease" in err
    assert err.count("\n") == 1


def test_serve_takes_lease_and_max_interruptions_like_a_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prana serve` resumes due work and recovers a dead process's executions like a worker,
    but took neither --lease nor --max-interruptions: it ran every action under a 30 s lease
    and gave up after 3 interruptions whatever the workers beside it were given."""
    import uvicorn

    served: list[Any] = []

    def serve_once(self: uvicorn.Server) -> None:
        app: Any = self.config.app
        served.append(app.state.runner)

    monkeypatch.delenv("PRANA_WEB_TOKEN", raising=False)
    monkeypatch.setattr(uvicorn.Server, "run", serve_once)
    db = str(tmp_path / "prana.db")
    argv = ["serve", "--db", db, "--port", "0", "--lease", "90", "--max-interruptions", "5"]
    assert main(argv) == 0
    capsys.readouterr()
    [runner] = served
    assert runner._leases.lease == timedelta(seconds=90)
    assert runner.max_interruptions == 5


@pytest.mark.parametrize(("option", "value"), [("--lease", "-1"), ("--max-interruptions", "0")])
def test_serve_refuses_bad_recovery_settings_in_one_line(
    option: str,
    value: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """serve checks --lease and --max-interruptions as the worker does, before it serves."""
    monkeypatch.delenv("PRANA_WEB_TOKEN", raising=False)
    code = main(["serve", "--db", str(tmp_path / "x.db"), option, value])
    err = capsys.readouterr().err
    assert code == 2
    assert option in err
    assert err.count("\n") == 1


# -- which commands need --actions ---------------------------------------------------------------

README = Path(__file__).parent.parent / "README.md"


def test_the_readme_names_every_command_that_refuses_a_file_without_its_actions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README said "Commands that run actions (run, worker, deliver, redrive) need it";
    the README's own `prana workflows add child.yaml` (and `prana lint`) of a file using
    the user's actions is refused too, asking for --actions, and serve runs actions."""
    doc = {
        "id": "own",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {"key": "charge", "type": "shop.charge"},
        ],
        "connections": [{"from_node": "start", "to_node": "charge"}],
    }
    path = tmp_path / "own.json"
    path.write_text(json.dumps(doc))
    db = str(tmp_path / "prana.db")
    refusing = []
    for argv in (["run", str(path)], ["lint", str(path)], ["workflows", "add", str(path)]):
        code = main([*argv, "--db", db])
        err = capsys.readouterr().err
        if code == 2 and "pass --actions" in err:
            refusing.append(" ".join(argv[:-1]))
    assert refusing == ["run", "lint", "workflows add"]
    text = " ".join(README.read_text().split())
    sentence = text[text.index("Commands that run actions") :].split(". ")[0]
    for command in [*refusing, "worker", "serve", "deliver", "redrive"]:
        assert f"`{command}`" in sentence, command


# -- the web view and the short ids the CLI prints -----------------------------------------------


def test_the_view_says_a_short_id_must_be_given_whole() -> None:
    """`prana list` prints 12 characters and the CLI takes them; pasted into
    /executions/<id> (or the API) they answered 404 "no execution '53bf4e648cfc'", nothing
    saying the view wants the whole id. The whole id still answers 200."""
    from starlette.testclient import TestClient

    clock = ManualClock(datetime(2030, 1, 1, tzinfo=timezone.utc))
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    doc = {
        "id": "wait",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {"key": "approve", "type": "wait.wait", "params": {"mode": "webhook"}},
        ],
        "connections": [{"from_node": "start", "to_node": "approve"}],
    }
    token = "an-operator-token-long-enough"
    with runner, TestClient(create_app(runner, token=token)) as client:
        eid = runner.start(loads_workflow(doc))
        client.headers["authorization"] = f"Bearer {token}"
        for path in ("/executions/{}", "/api/executions/{}", "/executions/{}/events"):
            short = client.get(path.format(eid[:12]))
            assert short.status_code == 404
            assert "whole execution id" in short.json()["error"]
        assert client.get(f"/api/executions/{eid}").status_code == 200
