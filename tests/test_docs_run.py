"""The docs' code runs as written: the tutorial start to finish, and the pages with examples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
RUNNABLE = [
    "tutorial/first-workflow.md",
    "tutorial/first-retry.md",
    "tutorial/runner.md",
    "tutorial/restart.md",
    "reference/events.md",
    "reference/types.md",
    "concepts/at-least-once.md",
    "extending/actions.md",
    "deployment/one-machine.md",
]
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
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
    for block in BLOCK.findall(text):
        exec(compile(block, page, "exec"), namespace)
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
        for block in BLOCK.findall((DOCS / page).read_text()):
            exec(compile(block, page, "exec"), namespace)
        lines += capsys.readouterr().out.splitlines()
    assert "HELLO, ADA!" in lines
    assert "ExecutionStatus.SUSPENDED" in lines
    assert lines.count("ExecutionStatus.COMPLETED") == 2
