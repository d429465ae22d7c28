"""A user's code type-checks: the README's, the docs' and the examples' code, as users write it.

Every ``python`` code block of a page is joined in order into one module (a page's blocks
build on each other, as a reader runs them), and each module and every ``examples/`` file
is checked by ``mypy --strict`` and by pyright in strict mode, from outside the project's
own configuration, as a user's project would. Doctest sessions (``>>>``) are not modules.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# A fence may be indented (a block inside a list item): its lines are dedented by as much.
BLOCK = re.compile(r"^( *)```python[^\n]*\n(.*?)^\1```", re.S | re.M)
FENCE = re.compile(r"^ *```python", re.M)
SNIPPET = re.compile(r'^--8<-- "[^"]+"\n?', re.M)
MYPY_CONFIG = """\
[mypy]
strict = true
python_version = 3.10
cache_dir = {cache}

[mypy-apscheduler.*]
ignore_missing_imports = true
"""
REQUIRED_IN_CI = bool(os.environ.get("CI"))
MISTAKES = """\
from typing import Any

from prana import ActionContext, Failed, Registry, RetryData, Suspend, Workflow, execute_workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler

registry = Registry()


@registry.action("x.y")
def act(params: dict[str, Any], ctx: ActionContext) -> int:
    return 1


act(1, 2)  # MISTAKE decorated-call
outcome = execute_workflow(Workflow(id="w", nodes=[], connections=[]), None, registry=registry)
if isinstance(outcome, Suspend):
    print(outcome.data.retry_delay_ms)  # MISTAKE unnarrowed-data
    if isinstance(outcome.data, RetryData):
        print(outcome.data.retry_delay_mss)  # MISTAKE typo
clock = ManualClock()
runner = Runner(registry, None, ManualScheduler(clock=clock), clock)
runner.scheduler.advanse(1)  # MISTAKE scheduler-typo
if isinstance(outcome, Failed):
    print(outcome.error.details["status"])  # MISTAKE details-may-be-none
"""
# What must type-check cleanly: each line leans on a precise type, so a loose one is an error.
PRECISE = """\
from prana import ErrorInfo, JSONValue
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.apscheduler import APSchedulerAdapter
from scheduling.adapters.manual import ManualScheduler

default_runner = Runner()
adapter: APSchedulerAdapter = default_runner.scheduler  # the default scheduler's own class
manual_runner = Runner(scheduler=ManualScheduler(clock=ManualClock()))
manual: ManualScheduler = manual_runner.scheduler
manual_runner.scheduler.advance(1)


def status_of(error: ErrorInfo) -> JSONValue:
    return error.details["status"] if error.details is not None else None
"""


def module_name(page: Path) -> str:
    """The checked file for a page: ``docs/tutorial/x.md`` -> ``page_docs_tutorial_x.py``."""
    return "page_" + re.sub(r"\W", "_", str(page.relative_to(ROOT).with_suffix(""))) + ".py"


def page_module(page: Path) -> str:
    """A page's python blocks joined into one module's source (empty when it has none)."""
    blocks = [dedent(b, i) for i, b in BLOCK.findall(page.read_text())]
    # a ``--8<--`` line includes an example file, which is checked as a module of its own
    blocks = [SNIPPET.sub("", b) for b in blocks if not b.lstrip().startswith(">>>")]
    return "\n\n".join(b for b in blocks if b.strip())


def dedent(block: str, indent: str) -> str:
    """A fenced block's code as written, without the fence's own indentation."""
    return "".join(line.removeprefix(indent) for line in block.splitlines(keepends=True))


@pytest.fixture(scope="module")
def user_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding every checked module, named after where it came from."""
    root = tmp_path_factory.mktemp("user_project")
    for page in PAGES:
        source = page_module(page)
        if source:
            (root / module_name(page)).write_text(source)
    for example in sorted((ROOT / "examples").glob("*.py")):
        shutil.copy(example, root / f"example_{example.name}")
    for backend in sorted((ROOT / "examples" / "backends").glob("*.py")):
        shutil.copy(backend, root / backend.name)  # imported by name, as the docs show
    (root / "mistakes.py").write_text(MISTAKES)
    (root / "precise.py").write_text(PRECISE)
    return root


def _problems(output: str, root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        match = re.match(rf"\s*(?:{re.escape(str(root))}/)?(\w+\.py):(\d+):.*error", line)
        if match:
            found.setdefault(match.group(1), []).append(line.strip())
    return found


@pytest.fixture(scope="module")
def mypy_problems(user_project: Path) -> dict[str, list[str]]:
    """``mypy --strict`` over the user project: file name -> error lines."""
    config = user_project / "mypy.ini"
    config.write_text(MYPY_CONFIG.format(cache=user_project / ".mypy_cache"))
    files = sorted(p.name for p in user_project.glob("*.py"))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), *files],
        cwd=user_project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    return _problems(result.stdout, user_project)


@pytest.fixture(scope="module")
def pyright_problems(user_project: Path) -> dict[str, list[str]]:
    """pyright in strict mode over the user project: file name -> error lines."""
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    if pyright is None:
        if REQUIRED_IN_CI:
            pytest.fail("pyright is not installed; CI installs it with the dev extra")
        pytest.skip("pyright is not installed (pip install -e . --group dev brings it)")
    (user_project / "pyrightconfig.json").write_text(
        json.dumps({"typeCheckingMode": "strict", "pythonVersion": "3.10"})
    )
    result = subprocess.run(
        [pyright, "--pythonpath", sys.executable],
        cwd=user_project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return _problems(result.stdout, user_project)


def _checked_files() -> list[str]:
    pages = [module_name(page) for page in PAGES if page_module(page)]
    return pages + [f"example_{p.name}" for p in sorted((ROOT / "examples").glob("*.py"))]


@pytest.mark.parametrize("name", _checked_files())
def test_mypy_strict_accepts_user_code(name: str, mypy_problems: dict[str, list[str]]) -> None:
    """The page's (or example's) code passes ``mypy --strict`` as a user would run it."""
    assert mypy_problems.get(name, []) == []


@pytest.mark.parametrize("name", _checked_files())
def test_pyright_strict_accepts_user_code(
    name: str, pyright_problems: dict[str, list[str]]
) -> None:
    """The page's (or example's) code passes pyright in strict mode."""
    assert pyright_problems.get(name, []) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_of_a_page_is_checked(page: Path) -> None:
    """No ```python block escapes the checks, an indented one (inside a list item) included."""
    text = page.read_text()
    assert len(BLOCK.findall(text)) == len(FENCE.findall(text))


def test_readme_retry_example_checks_the_retry_data_fields() -> None:
    """The README's loop reads RetryData fields after narrowing, so a typo would be an error."""
    source = page_module(ROOT / "README.md")
    assert "isinstance(outcome.data, RetryData)" in source
    assert "runner.scheduler.advance" in source


@pytest.mark.parametrize("checker", ["mypy", "pyright"])
def test_the_types_catch_mistakes(checker: str, request: pytest.FixtureRequest) -> None:
    """Each marked mistake (a bad call, unnarrowed data, a field typo) is an error for both."""
    problems = request.getfixturevalue(f"{checker}_problems")["mistakes.py"]
    lines = MISTAKES.splitlines()
    expected = {n for n, line in enumerate(lines, 1) if "# MISTAKE" in line}
    reported = {int(re.search(r"mistakes\.py:(\d+)", p).group(1)) for p in problems}  # type: ignore[union-attr]
    assert reported == expected, problems


@pytest.mark.parametrize("checker", ["mypy", "pyright"])
def test_the_types_are_precise(checker: str, request: pytest.FixtureRequest) -> None:
    """``Runner()`` without a scheduler is typed with its default's class (APSchedulerAdapter)."""
    assert request.getfixturevalue(f"{checker}_problems").get("precise.py", []) == []
