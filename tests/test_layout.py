"""Layout rules, checked on the source: each rule here broke once without any test noticing.

- Tests are filed by subject, and every helper shared by test modules is defined once, in
  ``doubles.py`` (builders and doubles) or ``conftest.py`` (fixtures).
- Every seam of the shell is a protocol in ``scheduling/abc.py``, documented in
  ``docs/extending/backends.md``; a scheduler adapter never imports a store module, nor a
  store an adapter module.
- One class, one module: no import cycles inside ``prana`` or ``scheduling``, and no
  function reads the private members of another module's class. A module may be long
  where it is one concept (as h11's ``_state.py`` is); it is split along seams, not size.
- ``scheduling`` imports the core through ``prana`` and ``prana.shell`` only.
"""

from __future__ import annotations

import ast
import contextlib
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


ROOT = TESTS.parent


def module_name(path: Path) -> str:
    """``scheduling/web/_app.py`` is ``scheduling.web._app``; a package is its ``__init__``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def load_time_imports(path: Path) -> set[str]:
    """The modules ``path`` imports outside its functions, those under ``TYPE_CHECKING`` too
    (``from a.b import c`` counts ``a.b`` and ``a.b.c``; relative imports resolved).

    Imports inside functions are left out: they are deferred on purpose (import time: a run
    loads what it needs when it needs it) and run once both modules are loaded. Imports under
    ``TYPE_CHECKING`` count: a module that needs another's class only to annotate functions
    taking it apart is the split a cycle there reveals (``Run``'s methods in modules that
    import ``Run`` back)."""
    me = module_name(path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    visit(inner)
            for handler in getattr(node, "handlers", None) or []:
                visit(handler.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return found


def import_cycles(package: str) -> list[list[str]]:
    """The import cycles among ``package``'s modules (strongly connected groups of two or
    more, by ``load_time_imports``; a module importing its own package is no cycle)."""
    paths = {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}
    graph = {
        name: sorted(
            m
            for m in load_time_imports(path)
            if m in paths and m != name and not name.startswith(m + ".")
        )
        for name, path in paths.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(name: str) -> None:  # Tarjan's strongly connected components
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in graph[name]:
            if other not in index:
                connect(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            group: list[str] = []
            while not group or group[-1] != name:
                group.append(stack.pop())
            if len(group) > 1:
                cycles.append(sorted(group))

    for name in graph:
        if name not in index:
            connect(name)
    return sorted(cycles)


KNOWN_CYCLES: dict[str, list[list[str]]] = {
    "prana": [
        # Run's methods live in modules that import Run back (issue 21, item 5).
        ["prana._engine", "prana._failure", "prana._pause", "prana._scope"],
        # Type-only, left by the dialects' move out of the policy (issue 21, item 6):
        # _dialects annotates AttemptView (_decision), _decision annotates Registry.
        ["prana._decision", "prana._dialects", "prana._registry", "prana._resolve"],
        # Type-only: a node's settings annotate RetryPolicy, a policy ErrorInfo.
        ["prana._model", "prana._policy"],
    ],
    "scheduling": [],
}
"""Cycles still to remove, each named; a new one fails the test. Drop an entry once gone."""


@pytest.mark.parametrize("package", ["prana", "scheduling"])
def test_no_import_cycles(package: str) -> None:
    """No module of ``prana`` or ``scheduling`` imports itself back through others: one
    class, one module; a module split by size rather than by seam shows up as a cycle."""
    new = [cycle for cycle in import_cycles(package) if cycle not in KNOWN_CYCLES[package]]
    assert new == []


def _annotation_names(annotation: ast.expr | None) -> set[str]:
    """The class names an annotation mentions (string annotations parsed too)."""
    names: set[str] = set()
    for node in ast.walk(annotation) if annotation is not None else ():
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            with contextlib.suppress(SyntaxError):
                names |= _annotation_names(ast.parse(node.value, mode="eval").body)
    return names


def functions_taking_apart(package: str) -> set[str]:
    """Module-level functions that take a parameter typed as a class of another module and
    read its private members (``steps._local``): code of that class living elsewhere."""
    paths = sorted((ROOT / package).rglob("*.py"))
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in paths}
    homes: dict[str, set[Path]] = {}
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                homes.setdefault(node.name, set()).add(path)
    found: set[str] = set()
    for path, tree in trees.items():
        for function in tree.body:
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            arguments = function.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                foreign = {
                    name
                    for name in _annotation_names(arg.annotation)
                    if name in homes and path not in homes[name]
                }
                private = {
                    node.attr
                    for node in ast.walk(function)
                    if isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == arg.arg
                    and node.attr.startswith("_")
                    and not node.attr.endswith("_")  # dunders and enum sunders are protocol
                }
                if foreign and private:
                    found.add(
                        f"{path.relative_to(ROOT)}: {function.name}({arg.arg}: "
                        f"{'|'.join(sorted(foreign))}) reads {', '.join(sorted(private))}"
                    )
    return found


KNOWN_TAKING_APART = {
    "prana/_lint.py: _check_policy(policy: RetryPolicy) reads _bounds, _curve",
    "prana/_lint.py: _known_exception_names(registry: Registry) reads _exceptions",
}
"""Still to move onto their classes (or the classes to say it publicly); a new one fails."""


@pytest.mark.parametrize("package", ["prana", "scheduling"])
def test_no_function_takes_another_modules_class_apart(package: str) -> None:
    """A function that reads a class's private members is that class's method, in its
    module: behaviour of one class stays in one module (``Runner``, ``Run``)."""
    assert functions_taking_apart(package) - KNOWN_TAKING_APART == set()


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


def private_core_imports(path: Path) -> set[str]:
    """What ``path`` imports from ``prana`` that is private: a ``prana._x`` module, or an
    underscore name from ``prana`` or ``prana.shell`` (``from prana._entry import _utcnow``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(
                alias.name
                for alias in node.names
                if alias.name.split(".")[0] == "prana"
                and any(part.startswith("_") for part in alias.name.split("."))
            )
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "prana":
                continue
            if any(part.startswith("_") for part in parts):
                found.add(node.module)
            found.update(
                f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")
            )
    return found


def test_the_shell_imports_the_core_only_through_its_public_seam() -> None:
    """``scheduling`` imports ``prana``'s public names and ``prana.shell`` (the core's seam for
    it), never a private module or name of the core: the core's insides stay its own."""
    offenders = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "scheduling").rglob("*.py"))
        for module in private_core_imports(path)
    }
    assert offenders == set()
