"""Layout rules, checked on the source: each rule here broke once without any test noticing.

- Tests are filed by subject, and every helper shared by test modules is defined once, in
  ``doubles.py`` (builders and doubles) or ``conftest.py`` (fixtures).
- Every seam of the shell is a protocol in ``scheduling/abc.py``, documented in
  ``docs/extending/backends.md``; a scheduler adapter never imports a store module, nor a
  store an adapter module.
- No module of ``prana`` or ``scheduling`` is over 900 lines.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import conftest
import doubles
import pytest

TESTS = Path(__file__).parent
TEST_MODULES = sorted(TESTS.glob("test_*.py"))


def top_level_names(path: Path) -> set[str]:
    """The names a module binds at its top level (functions, classes, assignments)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def shared_names() -> set[str]:
    """What ``doubles.py`` defines and the fixtures ``conftest.py`` offers."""
    defined = {
        name
        for name, value in vars(doubles).items()
        if not name.startswith("_")
        and getattr(value, "__module__", doubles.__name__) == doubles.__name__
        and (inspect.isfunction(value) or inspect.isclass(value) or name.isupper())
    }
    fixtures = {
        name
        for name, value in vars(conftest).items()
        if not name.startswith("_") and hasattr(value, "_fixture_function_marker")
    }
    return defined | fixtures


def test_shared_names_cover_the_common_helpers() -> None:
    """The helpers several modules used to copy are among the shared names."""
    expected = {"T0", "trigger", "conn", "chain", "workflow", "Flaky", "Harness", "clock"}
    assert expected <= shared_names()


@pytest.mark.parametrize("path", TEST_MODULES, ids=lambda p: p.name)
def test_no_test_module_defines_its_own_copy_of_a_shared_helper(path: Path) -> None:
    """A test module imports the shared builders, doubles and fixtures; it never redefines one."""
    assert top_level_names(path) & shared_names() == set()


def test_tests_are_filed_by_subject_not_by_review_round() -> None:
    """No module collects tests by the review that found them (``test_review_*.py``)."""
    assert sorted(p.name for p in TESTS.glob("test_review*.py")) == []


MAX_MODULE_LINES = 900
ROOT = TESTS.parent
OVER_THE_LIMIT: dict[str, str] = {}
"""Known exceptions, each strict: the test fails once the module is split, to drop it here."""
PACKAGE_MODULES = [
    pytest.param(path, marks=pytest.mark.xfail(strict=True, reason=OVER_THE_LIMIT[name]))
    if (name := str(path.relative_to(ROOT))) in OVER_THE_LIMIT
    else path
    for path in sorted([*ROOT.glob("prana/**/*.py"), *ROOT.glob("scheduling/**/*.py")])
]


@pytest.mark.parametrize("path", PACKAGE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_900_lines(path: Path) -> None:
    """Every module of ``prana`` and ``scheduling`` stays readable: split it along its seams."""
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` counts ``a.b`` and ``a.b.c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize(
    ("folder", "other"),
    [("adapters", "scheduling.stores"), ("stores", "scheduling.adapters")],
)
def test_a_backend_kind_never_imports_the_other(folder: str, other: str) -> None:
    """Adapters and stores share code through ``scheduling/_*.py``, never through each other."""
    offenders = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "scheduling" / folder).glob("*.py"))
        for module in imported_modules(path)
        if module == other or module.startswith(other + ".")
    }
    assert offenders == set()


def test_every_interface_in_abc_is_documented_for_backend_writers() -> None:
    """Each protocol of ``scheduling.abc`` is named in ``docs/extending/backends.md``."""
    import typing

    import scheduling.abc

    protocols = [
        name
        for name, value in vars(scheduling.abc).items()
        if inspect.isclass(value)
        and value.__module__ == "scheduling.abc"
        and getattr(value, "_is_protocol", False)
        and typing.Protocol in value.__mro__
    ]
    assert {"ExecutionStore", "Scheduler", "TransactionalStore", "TransactionalScheduler"} <= set(
        protocols
    )
    doc = (ROOT / "docs" / "extending" / "backends.md").read_text(encoding="utf-8")
    assert [name for name in protocols if f"`{name}`" not in doc] == []
