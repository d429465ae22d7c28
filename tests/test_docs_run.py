"""The docs' code runs as written: the tutorial start to finish, and the pages with examples."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest
from test_user_types import dedent

DOCS = Path(__file__).parent.parent / "docs"
RUNNABLE = [
    "tutorial/first-workflow.md",
    "tutorial/first-retry.md",
    "tutorial/runner.md",
    "tutorial/restart.md",
    "tutorial/redrive.md",
    "reference/events.md",
    "reference/types.md",
    "concepts/at-least-once.md",
    "extending/actions.md",
    "deployment/one-machine.md",
    "concepts/security.md",
    "tutorial/schedules.md",
]
BLOCK = re.compile(r"^( *)```python[^\n]*\n(.*?)^\1```", re.S | re.M)
SESSION = re.compile(r"^```(?:pycon|python)\n(>>>.*?)^```", re.S | re.M)
PRINTS = re.compile(r"^It prints:\n\n```text\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", RUNNABLE)
def test_page_code_runs_and_prints_what_the_page_says(
    page: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each python block runs in order in a fresh directory; shown output matches."""
    monkeypatch.chdir(tmp_path)
    text = (DOCS / page).read_text()
    namespace: dict[str, object] = {"__name__": "docs_page"}
    for indent, block in BLOCK.findall(text):
        exec(compile(dedent(block, indent), page, "exec"), namespace)
    out = capsys.readouterr().out
    for shown in PRINTS.findall(text):
        assert shown in out


def test_the_tutorial_prints_the_values_its_comments_promise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The statuses and outputs the tutorial's comments name are what the code prints."""
    monkeypatch.chdir(tmp_path)
    lines: list[str] = []
    for page in RUNNABLE[:4]:
        namespace: dict[str, object] = {"__name__": "docs_page"}
        for indent, block in BLOCK.findall((DOCS / page).read_text()):
            exec(compile(dedent(block, indent), page, "exec"), namespace)
        lines += capsys.readouterr().out.splitlines()
    assert "HELLO, ADA!" in lines
    assert "ExecutionStatus.SUSPENDED" in lines
    assert lines.count("ExecutionStatus.COMPLETED") == 2


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: p.name)
def test_doctest_sessions_print_what_the_page_shows(page: Path) -> None:
    """A ``>>>`` session on a page shows what the code prints today (a session that shows no
    output for a call that prints fails)."""
    for session in SESSION.findall(page.read_text()):
        test = doctest.DocTestParser().get_doctest(session, {}, page.name, str(page), 0)
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        runner.run(test, out=lambda _text: None)
        assert runner.failures == 0, session


def test_the_workflow_format_example_loads_lints_clean_and_routes_a_failure() -> None:
    """The sample file on the Workflow file format page is a valid workflow that ``prana lint``
    passes, and a charge that fails for good reaches the node on its ``error`` port (the
    sample had ``continue_error_output`` with nothing there: the failure completed the run)."""
    yaml = pytest.importorskip("yaml")
    from prana import ActionContext, Completed, Registry, execute_workflow, lint, loads_workflow

    text = (DOCS / "reference/workflow-format.md").read_text()
    (sample,) = re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)
    workflow = loads_workflow(yaml.safe_load(sample))
    registry = Registry()

    @registry.action("shop.charge")
    def charge(params: dict[str, object], ctx: ActionContext) -> object:
        raise ValueError("card declined")  # a programming error: not retried

    assert lint(workflow, registry) == []
    outcome = execute_workflow(workflow, {"amount": 42}, registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == "declined: card declined"
    assert "approve" not in outcome.execution.node_executions
