"""The public surface: every exported name is pinned, importable, and nothing private leaks."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import prana
import prana.shell
import prana.testing
import scheduling

PRANA_PUBLIC = {
    "ActionContext", "ActionSpec", "Activation", "AttemptOutcome", "AttemptRecord",
    "AttemptTimeout", "AttemptView", "Completed", "Connection", "DurationError", "ErrorCode",
    "ErrorInfo", "Event", "EventType", "ExecutionStatus", "Failed", "InvalidSettingsError",
    "InvalidWorkflowError", "JSONValue", "Limits", "LintWarning", "Node", "NodeExecution",
    "NodeSettings", "NodeStatus",
    "NonRetryable", "Observer", "Outcome", "Output", "Pause", "PranaError", "RecordError",
    "Registry", "ResumeError", "RetryAfter", "RetryData", "RetryPolicy", "SCHEMA_VERSION",
    "Schedule", "ScheduleRow", "SubWorkflowData", "Suspend", "TimerData", "WebhookData",
    "WebhookTimeout", "Workflow", "WorkflowExecution", "aexecute_workflow",
    "aresume_workflow",
    "cancel_execution", "dumps", "dumps_workflow", "execute_workflow", "lint",
    "loads", "loads_workflow", "make_converter", "redrive_execution",
    "resume_workflow", "validate",
}  # fmt: skip

SHELL_SEAM = {
    "AROUND_CALL", "EXEC_RUNNING", "EXEC_SUSPENDED", "FINAL", "MAX_WORKFLOW_VERSION", "WAIT_UNITS",
    "CheckpointById", "ParentRef", "arecover_execution", "check_clock", "check_max_interruptions",
    "closest_types", "compile_workflow", "delivered", "emit", "expire_webhook", "format_duration",
    "is_aware", "parse_token", "recover_execution", "resolve_policies", "schedule_head",
    "sub_workflow_too_deep", "sub_workflow_tree_too_big", "to_seconds", "used_token", "utcnow",
    "verify_token", "wait_resume", "with_lease",
}  # fmt: skip
"""``prana.shell``: the core's seam for the ``scheduling`` package, outside the user API."""

SCHEDULING_PUBLIC = {
    "ConsoleView", "ExecutionNotFound", "ExecutionStore", "ExecutionSummary", "Fire",
    "HookAlreadyDelivered", "HookConflict", "HookError", "HookGone", "HookNotFound",
    "RetryStats", "Runner", "Scheduler", "SchedulerStateError", "StaleVersionError",
    "StoreError", "At", "Cron", "Every", "Schedule", "ScheduleNotFound", "SlotOutcome",
    "StoredSchedule", "UnreadableRow", "UnreadableRowsError", "WorkflowConflictError",
    "WorkflowNotFound",
}  # fmt: skip


@pytest.mark.parametrize(
    ("module", "expected"),
    [(prana, PRANA_PUBLIC), (scheduling, SCHEDULING_PUBLIC), (prana.shell, SHELL_SEAM)],
    ids=["prana", "scheduling", "prana.shell"],
)
def test_exported_members(module: object, expected: set[str]) -> None:
    """__all__ lists exactly the public names, sorted, and each resolves on the module."""
    names = module.__all__  # type: ignore[attr-defined]
    assert set(names) == expected
    assert list(names) == sorted(names)
    for name in names:
        assert getattr(module, name) is not None


def test_the_shell_seam_is_outside_the_user_api() -> None:
    """What only a shell needs is in ``prana.shell``, not ``prana``; its docstring says it
    is for the ``scheduling`` package and not covered by the user API's stability."""
    assert set(prana.shell.__all__).isdisjoint(prana.__all__)
    assert [name for name in prana.shell.__all__ if hasattr(prana, name)] == []
    doc = " ".join((prana.shell.__doc__ or "").split())
    assert "for the ``scheduling`` package" in doc
    assert "not covered by the user API's stability promise" in doc


PRIVATE_NAME = re.compile(r"`+((?:\w+\.)*_[A-Za-z0-9][\w.]*)`+")
"""A code span naming a private module or attribute (``_x``, ``mod._x``), not a dunder."""


def _public_modules() -> list[str]:
    """The packages and every public module of the adapters and stores."""
    names = [
        "prana",
        "prana.dialects",
        "prana.testing",
        "scheduling",
        "scheduling.abc",
        "scheduling.testing",
    ]
    for package in ("scheduling.adapters", "scheduling.stores"):
        path = importlib.import_module(package).__path__
        names += [f"{package}.{m.name}" for m in pkgutil.iter_modules(path) if m.name[0] != "_"]
    return names


@pytest.mark.parametrize("module_name", _public_modules())
def test_public_docstrings_name_no_private_names(module_name: str) -> None:
    """The API docs (mkdocstrings renders these) explain in user terms, not private names."""
    module = pytest.importorskip(module_name)
    found = []
    names = getattr(module, "__all__", None) or [
        name
        for name, value in vars(module).items()
        if name[0] != "_" and getattr(value, "__module__", None) == module_name
    ]
    for name in names:
        obj = getattr(module, name)
        docs = {name: inspect.getdoc(obj) or ""}
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if (attr == "__init__" or attr[0] != "_") and (
                    callable(value) or isinstance(value, (property, classmethod, staticmethod))
                ):
                    docs[f"{name}.{attr}"] = inspect.getdoc(value) or ""
        found += [
            f"{where}: {m[0]}" for where, doc in docs.items() for m in PRIVATE_NAME.finditer(doc)
        ]
    assert found == []


def _prana_imports(path: Path) -> set[str]:
    """The prana modules ``path`` imports (``from prana import _x`` counts as ``prana._x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "prana")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "prana":
                found.update(f"prana.{a.name}" for a in node.names)
            elif node.module.split(".")[0] == "prana":
                found.add(node.module)
    return found


def test_the_core_never_imports_its_public_modules() -> None:
    """Private modules import only private ones: dependencies point from public to private."""
    core = Path(prana.__file__).parent
    for path in sorted(core.glob("_*.py")):
        if path.name == "__init__.py":
            continue
        public = {m for m in _prana_imports(path) if not m.split(".")[-1].startswith("_")}
        assert public == set(), f"{path.name} imports {sorted(public)}"


def test_testing_module_exports() -> None:
    """prana.testing offers the test doubles users need."""
    assert {"ManualClock", "set_testing", "is_testing"} <= set(prana.testing.__all__)


def test_contract_import_paths() -> None:
    """The import paths the design card promises all resolve."""
    for path, name in [
        ("prana.testing", "ManualClock"),
        ("scheduling", "Runner"),
        ("scheduling.adapters.manual", "ManualScheduler"),
        ("scheduling.adapters.apscheduler", "APSchedulerAdapter"),
        ("scheduling.stores.memory", "MemoryStore"),
        ("scheduling.stores.sqlite", "SQLiteStore"),
        ("scheduling.stores.postgres", "PostgresStore"),
    ]:
        assert hasattr(importlib.import_module(path), name), f"{path}.{name}"


PLAIN_RUN = """
import sys
from prana import Connection, Node, NodeSettings, Registry, Workflow, execute_workflow
registry = Registry()
registry.register("t.ok", lambda params, ctx: {"ok": True})
nodes = [
    Node(key="s", type="manual.trigger"),
    Node(key="a", type="t.ok", params={"n": 1}, settings=NodeSettings(retry_on_failed=True)),
]
workflow = Workflow(id="w", nodes=nodes, connections=[Connection(from_node="s", to_node="a")])
assert type(execute_workflow(workflow, {"x": 1}, registry=registry)).__name__ == "Completed"
print(" ".join(sorted(sys.modules)))
"""
"""A plain run: public names imported, a workflow without templates run to completion."""

NOT_FOR_A_PLAIN_RUN = (
    # the shell, I/O drivers and optional libraries
    "scheduling", "apscheduler", "psycopg", "sqlite3", "rich", "asyncio", "httpx", "socket",
    # templates, serialization, linting, HTTP and webhook tokens: loaded when first used
    "jinja2", "cattrs", "orjson", "hashlib", "prana._templates", "prana._template_env",
    "prana._serialization", "prana._compact", "prana._fast_hooks", "prana._lint",
    "prana._http", "prana._egress", "prana._redrive",
)  # fmt: skip


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (which prints them)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_prana_imports_no_submodule() -> None:
    """``import prana`` loads nothing but the package: each public name is imported when it
    is first used, so the import costs next to nothing."""
    bare = _modules_after("import sys; print(' '.join(sys.modules))")
    loaded = _modules_after("import sys, prana; print(' '.join(sys.modules))")
    assert sorted(loaded - bare) == ["__future__", "prana"]


def test_a_plain_run_imports_nothing_it_does_not_use() -> None:
    """The lazy boundary: running a workflow without templates, webhooks or HTTP nodes
    imports neither the shell, nor an I/O driver, nor the template, serialization, lint or
    HTTP modules (each costs import time a run that does not use it should not pay)."""
    loaded = _modules_after(PLAIN_RUN)
    assert "prana._engine" in loaded  # the run did run
    assert sorted(loaded & set(NOT_FOR_A_PLAIN_RUN)) == []


def test_every_public_name_imports_first_in_a_fresh_interpreter() -> None:
    """Whichever public name a program imports first, its module imports (no import cycle
    hides behind the order ``prana/__init__`` used to impose)."""
    modules = prana._MODULES
    assert sorted(name for names in modules.values() for name in names.split()) == sorted(
        prana.__all__
    )
    for module, names in modules.items():
        code = f"from prana import {', '.join(names.split())}"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 0, f"{module}: {done.stderr}"


def test_errors_subclass_the_nearest_builtin() -> None:
    """Errors about bad values are ValueErrors; every caller-facing error is a PranaError."""
    for cls in (
        prana.InvalidWorkflowError,
        prana.InvalidSettingsError,
        prana.ResumeError,
        prana.RecordError,
        prana.DurationError,
    ):
        assert issubclass(cls, prana.PranaError)
        assert issubclass(cls, ValueError)
    assert issubclass(scheduling.ExecutionNotFound, LookupError)
    with pytest.raises(ValueError, match="max_retries"):
        prana.NodeSettings(max_retries=11)
