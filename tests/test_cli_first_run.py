"""What a new user meets first: a clashing folder, a missing extra, the command's answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from processes import ACTIONS, Prana, wait_until

from prana import Connection, Node, Registry, Workflow, dumps_workflow
from prana._builtins import http_available
from prana.http import register_http

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).parent.parent

WORKFLOW = """\
id: fetch
version: 1
nodes:
  - key: start
    type: manual.trigger
  - key: get
    type: http.request
    params: {url: "https://example.test"}
connections:
  - {from_node: start, to_node: get}
"""


def prana(cwd: Path, *args: str, path: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``python -m prana ARGS`` in ``cwd``, this checkout first on the path after ``path``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((*path, str(ROOT))))
    return subprocess.run(
        [sys.executable, "-m", "prana", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_users_own_scheduling_folder_is_named_not_a_traceback(tmp_path: Path) -> None:
    """Was: ``ModuleNotFoundError: No module named 'scheduling._cli'``, since ``python -m``
    imports the current directory's ``scheduling/`` before prana's shell."""
    (tmp_path / "scheduling").mkdir()
    (tmp_path / "scheduling" / "__init__.py").write_text("")
    result = prana(tmp_path, "--version")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert str(tmp_path / "scheduling") in result.stderr
    assert "folder named `scheduling`" in result.stderr
    assert "installed `prana` command" in result.stderr


@pytest.fixture
def no_httpx(tmp_path: Path) -> str:
    """A folder whose ``sitecustomize`` hides httpx, as on a machine without the extra."""
    folder = tmp_path / "no_httpx"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text("import sys\nsys.modules['httpx'] = None\n")
    return str(folder)


def test_without_httpx_a_workflow_using_http_request_names_the_extra(
    tmp_path: Path, no_httpx: str
) -> None:
    """Was: "not built in: pass --actions MODULE", for an action the docs say is built in."""
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    result = prana(tmp_path, "run", "wf.yaml", "--db", "prana.db", path=(no_httpx,))
    assert result.returncode == 2, result.stderr
    assert "pip install 'prana-workflows[http]'" in result.stderr
    assert "--actions" not in result.stderr


@pytest.fixture
def httpx_missing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """httpx hidden from this process (``http_available`` asked again, before and after)."""
    monkeypatch.setitem(sys.modules, "httpx", None)
    http_available.cache_clear()
    yield
    http_available.cache_clear()


@pytest.mark.usefixtures("httpx_missing")
def test_register_http_without_httpx_raises_naming_the_extra() -> None:
    """Was: ``register_http`` returned having registered nothing."""
    registry = Registry()
    with pytest.raises(ModuleNotFoundError, match=r"prana-workflows\[http\]") as info:
        register_http(registry)
    assert info.value.name == "httpx"
    assert "http.request" not in registry


def test_prana_run_stopped_by_sigterm_says_so_and_exits_143(
    tmp_path: Path, processes: list[Prana]
) -> None:
    """Was: exit 143 without a word (Ctrl-C says "interrupted" and exits 130)."""
    workflow = Workflow(
        id="gated",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="gate",
                type="fault.gate",
                params={"started": str(tmp_path / "started"), "release": str(tmp_path / "never")},
            ),
        ],
        connections=[Connection(from_node="start", to_node="gate")],
    )
    (tmp_path / "wf.json").write_text(dumps_workflow(workflow))
    run = Prana(["run", "wf.json", "--actions", ACTIONS, "--db", "prana.db"], cwd=tmp_path)
    processes.append(run)
    assert wait_until(lambda: (tmp_path / "started").exists()), run.stderr
    run.send(signal.SIGTERM)
    assert run.wait() == 143
    assert run.stdout.splitlines()[-1] == (
        "terminated (SIGTERM); suspended executions stay in the store for the next worker"
    )
    assert "Traceback" not in run.stderr


def test_a_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    """Was: ``in "<unicode string>", line 2``: YAML's marks now name the file."""
    (tmp_path / "broken.yaml").write_text("id: x\nnodes: [a\n")
    result = prana(tmp_path, "run", "broken.yaml", "--db", "prana.db")
    assert result.returncode == 2
    assert '"broken.yaml", line 2' in result.stderr
    assert "<unicode string>" not in result.stderr


def test_db_status_json_says_the_schema_versions(tmp_path: Path) -> None:
    """``prana db status --json``: where, the stored and the code's schema version, a state."""
    assert prana(tmp_path, "db", "upgrade", "--db", "prana.db").returncode == 0
    result = prana(tmp_path, "db", "status", "--json", "--db", "prana.db")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status == {
        "format": 1,
        "database": "prana.db",
        "schema_version": status["code_schema_version"],
        "code_schema_version": status["code_schema_version"],
        "state": "current",
    }
    assert isinstance(status["code_schema_version"], int)


def test_version_says_what_is_installed(tmp_path: Path, no_httpx: str) -> None:
    """Was: the version only, while the README says it "says what is installed"."""
    result = prana(tmp_path, "--version", path=(no_httpx,))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("prana ")
    assert lines[1].startswith("schema version: SQLite ")
    assert "  [http] not installed (no httpx)" in lines
    assert "  [yaml] installed" in lines


def test_bash_completion_completes_commands_and_options(tmp_path: Path) -> None:
    """``prana completion bash`` (shtab, the completion extra) completes what the parser has."""
    result = prana(tmp_path, "completion", "bash")
    assert result.returncode == 0, result.stderr
    (tmp_path / "prana.bash").write_text(result.stdout)
    script = (
        "source ./prana.bash\n"
        'complete_line() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=();\n'
        '  _shtab_prana prana "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"; printf "%s\\n" '
        '"${COMPREPLY[@]}"; }\n'
        "complete_line prana wor\n"
        "echo --\n"
        "complete_line prana db st\n"
    )
    out = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    first, second = out.split("--\n")
    assert first.split() == ["worker", "workflows"]
    assert second.split() == ["status"]


def test_zsh_completion_is_generated(tmp_path: Path) -> None:
    """The zsh script is shtab's, naming the commands."""
    result = prana(tmp_path, "completion", "zsh")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#compdef prana")
    assert "worker" in result.stdout
