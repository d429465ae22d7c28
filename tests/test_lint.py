"""prana.lint: valid but suspicious retry settings, reported per node before anything runs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from doubles import workflow_of

from prana import (
    Connection,
    InvalidSettingsError,
    LintWarning,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Workflow,
    lint,
)

if TYPE_CHECKING:
    from pathlib import Path


def noop(params: Any, ctx: Any) -> Any:
    """An action that does nothing."""
    return None


def node(retry: Any = None, key: str = "n", type_: str = "http.request", **settings: Any) -> Node:
    """A node with the given retry settings."""
    return Node(key=key, type=type_, settings=NodeSettings(retry=retry, **settings))


def codes(warnings: list[LintWarning]) -> list[str]:
    """The warning codes, in order."""
    return [w.code for w in warnings]


def test_a_sensible_workflow_has_no_warnings() -> None:
    """Defaults, named transient errors and the simple form raise nothing."""
    wf = workflow_of(
        node(RetryPolicy(), key="a"),
        node(RetryPolicy(retry_on=("ConnectionError", "TimeoutError"), jitter="full"), key="b"),
        node(key="c", retry_on_failed=True, max_retries=3),
        node(RetryPolicy(max_attempts=None, retry_timeout="1h"), key="d"),
        node(key="e"),
    )
    assert lint(wf) == []


def test_jitter_clipped_by_the_cap() -> None:
    """A +/- jitter whose upper side passes max_delay is reported from the first such retry."""
    wf = workflow_of(node(RetryPolicy(max_attempts=8, jitter=0.2, max_delay=10)))
    (warning,) = lint(wf)
    assert warning.code == "jitter_clipped"
    assert warning.node_key == "n"
    assert "from retry 5 on" in warning.message  # 8s * 1.2 fits; 16s is capped at 10s
    assert lint(workflow_of(node(RetryPolicy(max_attempts=3, jitter=0.2)))) == []


def test_hints_allowed_past_the_cap() -> None:
    """hint_exceeds_max_delay=True is reported, naming the one-day ceiling."""
    (warning,) = lint(workflow_of(node(RetryPolicy(hint_exceeds_max_delay=True))))
    assert warning.code == "hint_uncapped"
    assert "24h" in warning.message


def test_delays_summing_past_the_budget() -> None:
    """Retries whose shortest delays cannot fit retry_timeout are reported with the count."""
    policy = RetryPolicy(max_attempts=6, backoff="constant", initial_delay=10, retry_timeout=35)
    (warning,) = lint(workflow_of(node(policy)))
    assert warning.code == "delays_exceed_budget"
    assert "only 3 retries can run" in warning.message
    fits = RetryPolicy(max_attempts=4, backoff="constant", initial_delay=10, retry_timeout=35)
    assert lint(workflow_of(node(fits))) == []


def test_timeout_longer_than_the_budget() -> None:
    """A per-attempt timeout above retry_timeout is reported, the node's own timeout too."""
    (warning,) = lint(workflow_of(node(RetryPolicy(timeout="2m", retry_timeout="1m"))))
    assert warning.code == "timeout_exceeds_budget"
    (from_node,) = lint(workflow_of(node(RetryPolicy(retry_timeout="1m"), timeout=90)))
    assert from_node.code == "timeout_exceeds_budget"


def test_unlimited_attempts_without_a_budget() -> None:
    """A policy that slipped past validation with no limit at all is still reported."""
    policy = RetryPolicy(max_attempts=None, retry_timeout=60)
    object.__setattr__(policy, "retry_timeout", None)  # as a hand-built record might be
    assert codes(lint(workflow_of(node(policy)))) == ["unbounded_retries"]


@pytest.mark.parametrize(
    ("retry_on", "caught"),
    [
        (("LookupError",), "KeyError, IndexError"),
        ((Exception, "OSError", LookupError), "KeyError, IndexError"),
        (("ValueError", "ConnectionError"), "ValueError"),
    ],
)
def test_retry_on_catching_programming_errors(retry_on: Any, caught: str) -> None:
    """retry_on that covers programming errors is reported, naming them."""
    (warning,) = lint(workflow_of(node(RetryPolicy(retry_on=retry_on))))
    assert warning.code == "retries_programming_errors"
    assert caught in warning.message


def test_exclude_silences_the_programming_error_warning() -> None:
    """Excluding the programming errors makes a broad retry_on fine."""
    policy = RetryPolicy(
        retry_on=("Exception",),
        exclude=("ValueError", "TypeError", "LookupError", "AttributeError", "NameError",
                 "NotImplementedError", "AssertionError"),
    )  # fmt: skip
    assert lint(workflow_of(node(policy))) == []


def test_side_effects_without_idempotency_key() -> None:
    """A retried side-effecting action must declare uses_idempotency_key."""
    registry = Registry()
    registry.register("mail.send", noop, side_effects=True)
    registry.register("pay.charge", noop, side_effects=True, uses_idempotency_key=True)
    registry.register("db.write", noop, side_effects=True, retry=RetryPolicy())
    wf = workflow_of(
        node(RetryPolicy(), key="mail", type_="mail.send"),
        node(RetryPolicy(), key="charge", type_="pay.charge"),
        node(key="quiet", type_="mail.send"),
        node(RetryPolicy(max_attempts=1), key="once", type_="mail.send"),
        node(RetryPolicy(enabled=False), key="off", type_="mail.send"),
        node(key="write", type_="db.write"),
    )
    warnings = lint(wf, registry)
    assert [(w.node_key, w.code) for w in warnings] == [
        ("mail", "side_effects_without_idempotency"),
        ("write", "side_effects_without_idempotency"),
    ]
    assert "ctx.idempotency_key" in warnings[0].message
    assert lint(wf) == []  # without a registry nothing is known about side effects


def test_lint_checks_the_policies_a_node_really_uses() -> None:
    """Workflow defaults and action defaults are linted through the precedence."""
    registry = Registry()
    registry.register("http.request", noop, retry=RetryPolicy(hint_exceeds_max_delay=True))
    star = workflow_of(node(), retry_defaults={"*": RetryPolicy(retry_on=("LookupError",))})
    assert codes(lint(star, registry)) == ["retries_programming_errors"]
    assert codes(lint(workflow_of(node()), registry)) == ["hint_uncapped"]
    own = workflow_of(node(RetryPolicy()))
    assert lint(own, registry) == []


def test_several_policies_are_numbered() -> None:
    """With several policies the message says which one."""
    wf = workflow_of(
        node([RetryPolicy(retry_on=("OSError",)), RetryPolicy(retry_on="LookupError")])
    )
    (warning,) = lint(wf)
    assert warning.message.startswith("policy 2 ")
    assert str(warning).startswith("n: [retries_programming_errors] policy 2 ")


def test_warnings_come_in_node_order() -> None:
    """Warnings are grouped by node, in the workflow's node order."""
    wf = workflow_of(
        node(RetryPolicy(hint_exceeds_max_delay=True), key="z"),
        node(RetryPolicy(retry_on="LookupError", hint_exceeds_max_delay=True), key="a"),
    )
    assert [(w.node_key, w.code) for w in lint(wf)] == [
        ("z", "hint_uncapped"),
        ("a", "hint_uncapped"),
        ("a", "retries_programming_errors"),
    ]


# --- names in retry_on / exclude -----------------------------------------------------------


def test_a_misspelt_exception_name_is_reported_with_the_closest_name() -> None:
    """``retry_on=["ConectionError"]`` matches nothing ever raised: lint says so and suggests."""
    wf = workflow_of(node(RetryPolicy(retry_on=["ConectionError"], exclude=["TimeoutEror"])))
    warnings = lint(wf)
    assert codes(warnings) == ["unknown_exception", "unknown_exception"]
    assert "retry_on: no built-in or registered exception is named 'ConectionError'" in (
        warnings[0].message
    )
    assert "did you mean 'ConnectionError'?" in warnings[0].message
    assert "exclude: no built-in or registered exception is named 'TimeoutEror'" in (
        warnings[1].message
    )
    assert "did you mean 'TimeoutError'?" in warnings[1].message


class RateLimitError(ConnectionError):
    """An application's own exception."""


def test_registered_exceptions_and_their_bases_are_known() -> None:
    """A name the registry knows (``registry.exception``) is not reported; unregistered ones are."""
    wf = workflow_of(node(RetryPolicy(retry_on=["RateLimitError", "OSError"])))
    before = lint(wf, Registry())
    assert codes(before) == ["unknown_exception"]
    assert "register it with registry.exception(RateLimitError)" in before[0].message
    registry = Registry()
    assert registry.exception(RateLimitError) is RateLimitError
    assert lint(wf, registry) == []
    qualified = workflow_of(node(RetryPolicy(retry_on=[f"{__name__}.RateLimitError"])))
    assert lint(qualified, registry) == []


def test_register_an_exception_as_a_decorator() -> None:
    """``@registry.exception`` on a class registers it and returns it unchanged."""
    registry = Registry()

    @registry.exception
    class QuotaExceededError(Exception):
        pass

    assert registry.exceptions() == ["QuotaExceededError"]
    wf = workflow_of(node(RetryPolicy(retry_on=["QuotaExceededError", "AttemptTimeout"])))
    assert lint(wf, registry) == []


def test_registering_something_that_is_not_an_exception_class_is_refused() -> None:
    """A clear error names what was given and what is expected."""
    with pytest.raises(InvalidSettingsError, match=r"Registry\.exception: expected an exception"):
        Registry().exception("ConnectionError")  # type: ignore[type-var]


def test_classes_in_retry_on_are_not_checked_by_name() -> None:
    """A class given directly is what it is; only names can be misspelt."""
    wf = workflow_of(node(RetryPolicy(retry_on=[RateLimitError])))
    assert lint(wf) == []


def test_lint_with_a_registry_reports_an_unknown_condition_name() -> None:
    """Given the registry, lint flags a condition name nobody registered."""
    wf = workflow_of(node(RetryPolicy(retry_on_result="is_pendng")))
    registry = Registry()
    registry.condition("is_pending", lambda output: False)
    warnings = lint(wf, registry)
    assert codes(warnings) == ["invalid_condition"]
    assert "unknown condition 'is_pendng'; did you mean 'is_pending'?" in warnings[0].message
    assert lint(wf) == []  # without the registry the name cannot be checked


@pytest.mark.parametrize(
    "retry",
    [
        "[retry: 3, backoff: 60]",
        "[retry: 3, backoff: 60s, timeout: 5m]",
        ("Exception",),
        (BaseException,),
    ],
)
def test_a_catch_all_filter_is_not_second_guessed(retry: Any) -> None:
    """A bracket without a filter (Rappel: "catch all exceptions") or retry_on=Exception is
    meant: lint reports nothing about it."""
    policy = RetryPolicy.parse(retry) if isinstance(retry, str) else RetryPolicy(retry_on=retry)
    assert lint(workflow_of(node(policy))) == []


def test_rappel_brackets_with_their_own_exception_names_stay_quiet_but_honest() -> None:
    """Rappel's own example names an application error: lint asks to register it and never
    suggests an unrelated or internal name (no "did you mean 'RecordError'")."""
    policy = RetryPolicy.parse("[NetworkError -> retry: 5, backoff: 2m] [retry: 3, backoff: 60]")
    warnings = lint(workflow_of(node(policy)))
    assert codes(warnings) == ["unknown_exception"]
    assert "did you mean" not in warnings[0].message
    assert "registry.exception(NetworkError)" in warnings[0].message


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("objct", None),
        ("NetworkError", None),
        ("HttpError", None),
        ("Timeout", "TimeoutError"),
        ("KeyErorr", "KeyError"),
        ("ValeuError", "ValueError"),
        ("WebhookTimout", "WebhookTimeout"),
        ("RecordEror", None),
        ("InvalidWorkflowEror", None),
        ("_IncompleteInputEror", None),
        ("RateLimitEror", "RateLimitError"),
    ],
)
def test_suggestions_come_only_from_public_and_registered_names(
    name: str, suggested: str | None
) -> None:
    """ "did you mean" offers Python's public exceptions, the ones an attempt meets in prana,
    and registered ones; never ``object``, a private name or an internal prana error."""
    registry = Registry()
    registry.exception(RateLimitError)
    (warning,) = lint(workflow_of(node(RetryPolicy(retry_on=[name]))), registry)
    if suggested is None:
        assert "did you mean" not in warning.message
    else:
        assert f"did you mean {suggested!r}?" in warning.message


@pytest.mark.parametrize("name", ["TemplateError", "ParamsInvalid", "LimitExceeded", "Cancelled"])
def test_the_error_types_prana_records_are_known(name: str) -> None:
    """A name prana records for a failure it found itself (``ErrorInfo.type``) is not unknown."""
    assert lint(workflow_of(node(RetryPolicy(retry_on=["OSError"], exclude=[name])))) == []


# --- prana lint (the command) -------------------------------------------------------------

LINTED = """\
id: lw
nodes:
  - {key: t, type: manual.trigger}
  - key: call
    type: http.request
    params: {url: "http://x"}
    settings: {retry: "[NetworkError -> retry: 5, backoff: 2m] [retry: 3, backoff: 60]"}
  - key: simple
    type: http.request
    params: {url: "http://x"}
    settings: {retry_on_failed: true, max_retries: 2, retry_delay_ms: 500}
  - key: noetl
    type: http.request
    params: {url: "http://x"}
    settings: {retry: 3}
connections:
  - {from_node: t, to_node: call}
  - {from_node: call, to_node: simple}
  - {from_node: simple, to_node: noetl}
"""


def test_prana_lint_prints_warnings_and_every_forms_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``prana lint --schedule`` previews each form's policy (simple and short forms too) and
    prints the warnings; it exits 1 when there are warnings, 0 when clean."""
    from scheduling._cli import main

    path = tmp_path / "lw.yaml"
    path.write_text(LINTED)
    assert main(["lint", str(path), "--schedule"]) == 1
    out = capsys.readouterr().out
    assert f"{path} (lw): simple: constant 500ms, cap 1m0s, 3 attempts" in out
    assert f"{path} (lw): noetl: exponential 1.0s x2, cap 1m0s, 3 attempts" in out
    assert "    retry 2: 500ms (500ms..500ms), 1.0s in all" in out
    assert "[unknown_exception] policy 1 retry_on" in out
    assert "--actions module" in out
    assert "retries_programming_errors" not in out  # the catch-all bracket is meant
    clean = tmp_path / "clean.yaml"
    clean.write_text(LINTED.replace("NetworkError", "ConnectionError"))
    assert main(["lint", str(clean)]) == 0
    assert capsys.readouterr().out.strip() == f"{clean} (lw): no warnings"


def test_prana_lint_json_and_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` carries warnings and policies; an invalid workflow is a mistake (exit 2)."""
    from scheduling._cli import main

    path = tmp_path / "lw.yaml"
    path.write_text(LINTED)
    assert main(["lint", str(path), "--json"]) == 1
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    assert [w["code"] for w in entry["warnings"]] == ["unknown_exception"]
    by_node = {p["node"]: p["policies"] for p in entry["policies"]}
    assert [r["typical_delay_s"] for r in by_node["simple"][0]["schedule"]] == [0.5, 0.5]
    assert by_node["noetl"][0]["describe"].endswith("3 attempts, on (Exception)")
    broken = tmp_path / "broken.yaml"
    broken.write_text(LINTED.replace("retry: 3}", "retry: {backof: linear}}"))
    assert main(["lint", str(broken)]) == 2
    assert "backof" in capsys.readouterr().err


# --- on_error: continue_error_output with nothing on the error port -----------------------


def test_an_error_output_with_no_edge_is_reported() -> None:
    """``continue_error_output`` sends a failure to the node's ``error`` port; with no edge
    leaving that port the failure goes nowhere and the execution completes (exit 0) with the
    error as its output, a failure passed off as a success. An edge from ``error`` clears it;
    ``continue`` (main port) and the default are not reported."""
    from prana import Connection

    def wf(*connections: Connection) -> Workflow:
        return Workflow(
            id="w",
            nodes=[
                Node(key="t", type="manual.trigger"),
                node(key="charge", on_error="continue_error_output"),
                node(key="next", type_="data.set_data"),
            ],
            connections=[Connection(from_node="t", to_node="charge"), *connections],
        )

    main_only = wf(Connection(from_node="charge", to_node="next"))
    (warning,) = lint(main_only)
    assert (warning.node_key, warning.code) == ("charge", "error_output_unconnected")
    assert "from_port: error" in warning.message
    assert "completes" in warning.message
    handled = Connection(from_node="charge", to_node="next", from_port="error")
    assert lint(wf(handled)) == []
    plain = Workflow(
        id="w",
        nodes=[Node(key="t", type="manual.trigger"), node(key="charge", on_error="continue")],
        connections=[Connection(from_node="t", to_node="charge")],
    )
    assert lint(plain) == []


def test_prana_lint_previews_only_the_rows_it_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``prana lint --json`` (and ``--schedule``) previewed each node's policy by computing
    every retry (up to 1,000) to show five: a file (untrusted, as a linter's input is) of
    2,000 nodes under ``retry_defaults: {"*": {max_attempts: 1001}}`` took ~6 s more for
    the preview alone. It asks for the rows it shows; they are ``schedule()``'s first."""
    from prana import RetryPolicy
    from scheduling._cli import main
    from scheduling._cli.lint import SCHEDULE_ROWS

    doc = {
        "id": "many",
        "retry_defaults": {"*": {"max_attempts": 1001, "backoff": "fibonacci"}},
        "nodes": [{"key": "t", "type": "manual.trigger"}]
        + [{"key": f"n{i}", "type": "data.set_data", "params": {"value": i}} for i in range(3)],
        "connections": [{"from_node": "t", "to_node": "n0"}]
        + [{"from_node": f"n{i}", "to_node": f"n{i + 1}"} for i in range(2)],
    }
    path = tmp_path / "many.json"
    path.write_text(json.dumps(doc))
    asked: list[int | None] = []
    schedule = RetryPolicy.schedule

    def recorded(policy: RetryPolicy, attempts: int | None = None) -> Any:
        asked.append(attempts)
        return schedule(policy, attempts)

    monkeypatch.setattr(RetryPolicy, "schedule", recorded)
    assert main(["lint", str(path), "--json"]) == 0
    monkeypatch.undo()
    assert asked
    assert all(attempts is not None and attempts <= SCHEDULE_ROWS + 1 for attempts in asked)
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    expected = RetryPolicy(max_attempts=1001, backoff="fibonacci").schedule()[:SCHEDULE_ROWS]
    for node in entry["policies"]:
        (policy,) = node["policies"]
        assert [r["typical_delay_s"] for r in policy["schedule"]] == [
            r.typical_delay for r in expected
        ]
        assert [r["cumulative_typical_s"] for r in policy["schedule"]] == [
            r.cumulative_typical for r in expected
        ]


@pytest.mark.parametrize(
    ("node_type", "params", "field", "fix"),
    [
        ("wait.wait", {"mode": "intervall", "duration": 1}, "mode", "'interval'"),
        ("wait.wait", {"mode": "interval", "duration": 1, "unit": "second"}, "unit", "'seconds'"),
        ("wait.wait", {"duration": 1}, "mode", "webhook, interval, schedule"),
        ("workflow.execute_workflow", {"workflow_id": "c", "mode": "asnyc"}, "mode", "'async'"),
    ],
    ids=["mode", "unit", "no-mode", "sub-workflow-mode"],
)
def test_a_built_in_param_outside_its_choices_is_reported_before_it_runs(
    node_type: str, params: dict[str, Any], field: str, fix: str
) -> None:
    """A typo in a built-in's choice param was found only when the node ran (it failed)."""
    flow = Workflow(
        id="w",
        nodes=[Node(key="t", type="manual.trigger"), Node(key="n", type=node_type, params=params)],
        connections=[Connection(from_node="t", to_node="n")],
    )
    (warning,) = lint(flow)
    assert (warning.node_key, warning.code) == ("n", "invalid_param")
    assert f"{node_type}: {field}=" in warning.message
    assert fix in warning.message
    assert "fails when it runs" in warning.message


def test_built_in_params_that_are_templates_or_right_are_not_reported() -> None:
    """Only literal values are checked: a template is known only when the node runs."""
    nodes = [
        Node(key="a", type="wait.wait", params={"mode": "interval", "duration": 1}),
        Node(key="b", type="wait.wait", params={"mode": "interval", "duration": 1, "unit": "ms"}),
        Node(key="c", type="wait.wait", params={"mode": "{{ $input.main.mode }}"}),
        Node(
            key="d",
            type="wait.wait",
            params={"mode": "interval", "duration": 1, "unit": "{{ $input.main.unit }}"},
        ),
        Node(key="e", type="wait.wait", params={"mode": "webhook", "unit": "nonsense"}),
        Node(key="f", type="workflow.execute_workflow", params={"workflow_id": "c"}),
    ]
    flow = Workflow(
        id="w",
        nodes=[Node(key="t", type="manual.trigger"), *nodes],
        connections=[Connection(from_node="t", to_node=n.key) for n in nodes],
    )
    assert lint(flow) == []
