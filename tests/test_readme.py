"""The README's code runs as written and prints what it shows."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The retry example and the Runner example run in order and end completed."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for block in BLOCKS:
        if not block.lstrip().startswith(">>>"):
            exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 200 API down"
    assert out[1] == "3 400 API down"
    assert out[2] == "{'city': 'Lisbon', 'temp_c': 21}"
    assert out[3] == "ExecutionStatus.COMPLETED"


def test_readme_schedule_output_is_current() -> None:
    """The policy.schedule() table in the README is what the code prints today."""
    sessions = [b for b in BLOCKS if b.lstrip().startswith(">>>")]
    assert sessions
    for session in sessions:
        test = doctest.DocTestParser().get_doctest(session, {}, "README", "README.md", 0)
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        assert runner.failures == 0


def test_readme_links_work_outside_the_repository() -> None:
    """Was: a link relative to the repository, broken wherever the README is shown alone
    (a package index page, an unpacked sdist, a mirror). Every link is absolute."""
    targets = re.findall(r"\]\(([^)\s]+)\)", README)
    assert targets
    assert [t for t in targets if not t.startswith(("https://", "http://", "#", "mailto:"))] == []
