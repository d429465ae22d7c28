"""A workflow definition is data, never code (DESIGN §7, issue 7 §1).

The finding: a YAML node with ``settings: {retry: {retry_on_result: "os:system"}}`` and a
``data.set_data`` value of ``"id > pwned.txt"`` ran ``id`` under ``prana run``: any
``"module:qualname"`` text in a definition was imported and called. Now nothing read from
a file, JSON/YAML text, a stored record or resume data imports a module or calls a
callable the application did not register: conditions are registered by name on the
``Registry`` and referenced by that name; exception names match through the MRO.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from doubles import run_to_end
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prana import (
    Completed,
    Connection,
    InvalidSettingsError,
    InvalidWorkflowError,
    Node,
    NodeSettings,
    RecordError,
    Registry,
    RetryPolicy,
    Workflow,
    dumps_workflow,
    execute_workflow,
    loads_workflow,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
CANARY = "prana_canary_module"
"""A module that, if it were ever imported, would leave a marker file behind."""


def payload(marker: Path, condition: str = "os:system") -> dict[str, Any]:
    """The issue's payload: a set_data value that is a shell command, and a reference."""
    return {
        "id": "pwn",
        "nodes": [
            {"key": "start", "type": "manual.trigger"},
            {
                "key": "evil",
                "type": "data.set_data",
                "params": {"value": f"id > {marker}"},
                "settings": {"retry": {"retry_on_result": condition}},
            },
        ],
        "connections": [{"from_node": "start", "to_node": "evil"}],
    }


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable module whose import (or call) writes a marker; returns the marker path."""
    marker = tmp_path / "canary-ran"
    source = f"""
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("imported")

        class BoomError(Exception):
            pass

        def boom(*args):
            pathlib.Path({str(marker)!r}).write_text("called")
            return True
    """
    (tmp_path / f"{CANARY}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, CANARY, raising=False)
    return marker


# --- the payload, refused everywhere --------------------------------------------------------


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_prana_run_refuses_the_payload_and_runs_nothing(tmp_path: Path, form: str) -> None:
    """``prana run`` on the payload exits non-zero in one line, and the command never runs."""
    marker = tmp_path / "pwned.txt"
    doc = payload(marker)
    path = tmp_path / f"evil.{form}"
    path.write_text(yaml.safe_dump(doc) if form == "yaml" else json.dumps(doc))
    result = subprocess.run(
        [sys.executable, "-m", "scheduling._cli", "run", str(path), "--db", str(tmp_path / "db")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert not marker.exists()
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "unknown condition 'os:system'" in result.stderr + result.stdout


def test_loads_workflow_imports_nothing(canary: Path) -> None:
    """Reading a definition keeps reference text as text: no module is imported."""
    doc = payload(canary, condition=f"{CANARY}:boom")
    doc["nodes"][1]["settings"]["retry"]["retry_on"] = [f"{CANARY}:BoomError"]
    for data in (json.dumps(doc), doc, yaml.safe_dump(doc)):
        workflow = loads_workflow(yaml.safe_load(data) if isinstance(data, str) else data)
        policy = workflow.nodes[1].settings.retry
        assert policy is not None
        assert policy[0].retry_on_result == f"{CANARY}:boom"
        assert policy[0].retry_on == (f"{CANARY}:BoomError",)
    assert CANARY not in sys.modules
    assert not canary.exists()


def test_executing_the_payload_is_an_invalid_workflow_and_calls_nothing(canary: Path) -> None:
    """The executor refuses the unknown name before any action runs."""
    for condition in ("os:system", f"{CANARY}:boom"):
        workflow = loads_workflow(payload(canary, condition=condition))
        with pytest.raises(InvalidWorkflowError) as info:
            execute_workflow(workflow, {}, registry=Registry())
        (problem,) = info.value.problems
        assert problem.startswith(
            f"node 'evil': settings.retry.retry_on_result: unknown condition {condition!r}"
        )
        assert "no conditions are registered" in problem
        assert "registry.condition(" in problem
    assert CANARY not in sys.modules
    assert not canary.exists()


def test_the_runner_refuses_the_payload_and_stores_nothing(canary: Path) -> None:
    """``Runner.start`` validates first: nothing runs, nothing is stored."""
    store = MemoryStore()
    clock = ManualClock()
    runner = Runner(registry=Registry(), store=store, scheduler=ManualScheduler(clock), clock=clock)
    with runner, pytest.raises(InvalidWorkflowError, match="unknown condition 'os:system'"):
        runner.start(loads_workflow(payload(canary)), {})
    assert list(store.list()) == []
    assert not canary.exists()


def test_exception_names_match_through_the_mro_without_import(canary: Path) -> None:
    """``retry_on: [mod:Class]`` matches an error of that class by name; nothing is imported."""
    policy = (
        loads_workflow(
            {
                "id": "w",
                "nodes": [
                    {
                        "key": "a",
                        "type": "t",
                        "settings": {"retry": {"retry_on": [f"{CANARY}:BoomError", "OSError"]}},
                    }
                ],
                "connections": [],
            }
        )
        .nodes[0]
        .settings.retry
    )
    assert policy is not None
    assert policy[0].matches(ConnectionError("down"))
    assert not policy[0].matches(ValueError("bad"))
    assert CANARY not in sys.modules


# --- conditions by registered name ------------------------------------------------------------


def polling_workflow(condition: Any) -> Workflow:
    """A node that polls: its output is rejected while the condition holds."""
    return Workflow(
        id="poll",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="check",
                type="svc.status",
                settings=NodeSettings(
                    retry=RetryPolicy(max_attempts=5, initial_delay=1, retry_on_result=condition)
                ),
            ),
        ],
        connections=[Connection(from_node="start", to_node="check")],
    )


def polling_registry() -> Registry:
    registry = Registry()
    registry.register("svc.status", lambda params, ctx: {"ready": ctx.attempt >= 3})

    @registry.condition("not_ready")
    def not_ready(output: Any) -> bool:
        return not output["ready"]

    return registry


def test_a_condition_registered_by_name_is_used_by_name_in_data() -> None:
    """``@registry.condition("not_ready")`` and ``retry_on_result: not_ready`` in YAML."""
    doc = yaml.safe_load(
        """
        id: poll
        nodes:
          - {key: start, type: manual.trigger}
          - key: check
            type: svc.status
            settings: {retry: {max_attempts: 5, initial_delay: 1, retry_on_result: not_ready}}
        connections: [{from_node: start, to_node: check}]
        """
    )
    outcome = run_to_end(loads_workflow(doc), polling_registry())
    assert isinstance(outcome, Completed)
    assert outcome.output == {"ready": True}
    attempts = outcome.execution.node_executions["check"][0].attempts
    assert len(attempts) == 3


def test_register_a_condition_by_plain_call_too() -> None:
    """``registry.condition(name, fn)`` registers and returns ``fn``; names are listed."""
    registry = Registry()

    def is_rate_limited(view: Any) -> bool:
        return True

    assert registry.condition("is_rate_limited", is_rate_limited) is is_rate_limited
    assert registry.conditions() == ["is_rate_limited"]


@pytest.mark.parametrize("bad", ["", "{{ $attempt }}", "has space", 3, None])
def test_a_condition_name_must_be_a_plain_name(bad: Any) -> None:
    """A name is an identifier-like text (not a template, not empty); the error says so."""
    with pytest.raises(InvalidSettingsError, match=r"Registry\.condition"):
        Registry().condition(bad, lambda view: True)


def test_registering_a_non_callable_is_refused() -> None:
    """The condition must be callable."""
    with pytest.raises(InvalidSettingsError, match="not callable"):
        Registry().condition("x", "os:system")  # type: ignore[call-overload]


def test_an_unknown_name_lists_the_registered_ones() -> None:
    """A typo in a condition name is an InvalidWorkflowError naming node, field and names."""
    with pytest.raises(InvalidWorkflowError) as info:
        execute_workflow(polling_workflow("not_redy"), {}, registry=polling_registry())
    (problem,) = info.value.problems
    assert problem.startswith(
        "node 'check': settings.retry.retry_on_result: unknown condition 'not_redy'"
    )
    assert "registered conditions: not_ready" in problem
    assert "did you mean 'not_ready'?" in problem


def test_python_code_may_still_pass_callables_directly() -> None:
    """A callable in a policy built in Python runs as before (registered or not)."""
    registry = polling_registry()
    outcome = run_to_end(polling_workflow(lambda output: not output["ready"]), registry)
    assert isinstance(outcome, Completed)


# --- writing definitions ----------------------------------------------------------------------


def test_dumps_workflow_writes_the_registered_name() -> None:
    """A registered callable is written as its name, and reads back as that name."""
    registry = polling_registry()
    not_ready = registry.get_condition("not_ready")
    workflow = polling_workflow(not_ready)
    text = dumps_workflow(workflow, registry=registry)
    policy = json.loads(text)["workflow"]["nodes"][1]["settings"]["retry"][0]
    assert policy["retry_on_result"] == "not_ready"
    back = loads_workflow(text)
    assert isinstance(run_to_end(back, registry), Completed)
    assert dumps_workflow(workflow) == text  # a registration anywhere in the process counts


def test_dumps_workflow_refuses_an_unregistered_callable_saying_how_to_register() -> None:
    """An unregistered callable cannot be written: the error names the field and the fix."""

    def private_check(output: Any) -> bool:
        return False

    with pytest.raises(InvalidSettingsError) as info:
        dumps_workflow(polling_workflow(private_check), registry=polling_registry())
    message = str(info.value)
    assert "$.workflow.nodes[1].settings.retry[0].retry_on_result" in message
    assert "registry.condition('private_check', private_check)" in message


class FlakyServiceError(ConnectionError):
    """A module-level exception class."""


def test_exception_classes_are_written_by_name() -> None:
    """Classes in retry_on/exclude are written as names, builtins short, others dotted."""

    class LocalError(Exception):
        pass

    policy = RetryPolicy(
        retry_on=(FlakyServiceError, LocalError, "TimeoutError"), exclude=(KeyError,)
    )
    workflow = Workflow(
        id="w",
        nodes=[Node(key="a", type="t", settings=NodeSettings(retry=policy))],
        connections=[],
    )
    written = json.loads(dumps_workflow(workflow))["workflow"]["nodes"][0]["settings"]["retry"][0]
    assert written["retry_on"] == [
        f"{__name__}.FlakyServiceError",
        f"{__name__}.{LocalError.__qualname__}",
        "TimeoutError",
    ]
    assert written["exclude"] == ["KeyError"]
    back = loads_workflow(dumps_workflow(workflow)).nodes[0].settings.retry
    assert back is not None
    assert back[0].matches(FlakyServiceError("x"))
    assert back[0].matches(LocalError("x"))
    assert not back[0].matches(KeyError("x"))


# --- old stored records -----------------------------------------------------------------------


def test_an_old_module_qualname_condition_loads_as_a_name_and_never_imports(canary: Path) -> None:
    """A stored definition from before holds ``module:qualname``: read as a name, not imported.

    Validation explains the change; registering the callable under that text migrates it.
    """
    workflow = loads_workflow(payload(canary, condition=f"{CANARY}:boom"))
    with pytest.raises(InvalidWorkflowError) as info:
        execute_workflow(workflow, {}, registry=Registry())
    assert "an old 'module:qualname' reference" in info.value.problems[0]
    registry = Registry()
    registry.condition(f"{CANARY}:boom", lambda output: False)
    assert isinstance(execute_workflow(workflow, {}, registry=registry), Completed)
    assert not canary.exists()
    assert CANARY not in sys.modules


# --- the fuzz: callable-reference fields never import -----------------------------------------

reference_text = st.sampled_from(
    [
        "os:system",
        "subprocess:call",
        "builtins:eval",
        "builtins:exec",
        f"{CANARY}:boom",
        f"{CANARY}:BoomError",
        f"{CANARY}.boom",
        "importlib:import_module",
        "not_ready",
    ]
) | st.text(alphabet="abcxyz_:.$ {}", max_size=20)
condition_field = st.sampled_from(["retry_when", "stop_when", "retry_on_result"])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fields=st.dictionaries(
        condition_field | st.sampled_from(["retry_on", "exclude"]),
        reference_text | st.lists(reference_text, max_size=3),
        max_size=4,
    )
)
def test_fuzzed_reference_fields_never_import_or_call(canary: Path, fields: dict[str, Any]) -> None:
    """Whatever text sits in a callable or exception field, reading, validating and running
    the definition imports nothing and calls nothing unregistered."""
    doc = payload(canary)
    doc["nodes"][1]["settings"]["retry"] = fields
    try:
        workflow = loads_workflow(json.dumps(doc))
    except RecordError:
        pass
    else:
        with contextlib.suppress(InvalidWorkflowError):
            run_to_end(workflow, polling_registry())
    assert CANARY not in sys.modules
    assert not canary.exists()
    assert not (canary.parent / "pwned.txt").exists()
