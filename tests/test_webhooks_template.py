"""``$webhooks.<node>``: hand a wait's resume path out before the wait, never recording it."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from typing import Any

import attrs
import pytest
from doubles import detail

from prana import (
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    WebhookData,
    Workflow,
    dumps,
    execute_workflow,
)
from prana._hooks import REDACTED, parse_token
from prana.testing import ManualClock
from scheduling import HookNotFound, Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore


def _notify_then_wait(fails: int = 0) -> tuple[Workflow, Registry, list[str]]:
    sent: list[str] = []
    calls = {"n": 0}
    registry = Registry()

    def send(params: Any, ctx: Any) -> Any:
        calls["n"] += 1
        sent.append(params["link"])
        if calls["n"] <= fails:
            raise ConnectionError("mail server down")
        return {"sent": params["link"]}

    registry.register("mail.send", send)
    workflow = Workflow(
        id="notify-then-wait",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="notify",
                type="mail.send",
                params={"link": "https://example.test/prana{{ $webhooks.approve }}"},
                settings=NodeSettings(retry=RetryPolicy(max_attempts=3, initial_delay=1)),
            ),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="notify"),
            Connection(from_node="notify", to_node="approve"),
        ],
    )
    return workflow, registry, sent


def test_the_path_reaches_the_action_and_the_wait_uses_its_token() -> None:
    """The action gets the real path; the later wait is resumed by that very token."""
    workflow, registry, sent = _notify_then_wait()
    outcome = execute_workflow(workflow, registry=registry)
    assert isinstance(outcome, Suspend)
    data = outcome.data
    assert isinstance(data, WebhookData)
    assert sent == [f"https://example.test/prana{data.path}"]
    assert outcome.execution is not None
    notify = outcome.execution.node("notify")
    assert notify is not None
    assert notify.params == {"link": f"https://example.test/prana/hooks/{REDACTED}"}
    assert notify.output == {"sent": f"https://example.test/prana/hooks/{REDACTED}"}
    assert data.token is not None
    _, secret = parse_token(data.token)  # type: ignore[misc]
    text = dumps(outcome.execution)
    assert secret not in text
    assert outcome.execution.state == {}  # the pending digest moved into the wait


def test_a_handed_out_token_resumes_after_a_reload_elsewhere() -> None:
    """Issued before a retry, the token still names the wait another runner reaches later."""
    workflow, registry, sent = _notify_then_wait(fails=1)
    store = MemoryStore(serialize=True)
    clock = ManualClock()
    with Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=clock)) as first:
        execution_id = first.start(workflow, None)
    assert len(sent) == 1
    assert first.get(execution_id).state  # the digest waits in the shared state
    clock.advance(1)
    with Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=clock)) as second:
        second.run_due()
        assert second.get(execution_id).status is ExecutionStatus.SUSPENDED
        # The retry rendered the params again: a fresh link, the first one is dead.
        assert len(sent) == 2
        assert sent[0] != sent[1]
        with pytest.raises(HookNotFound):
            second.deliver_hook(sent[0].rsplit("/hooks/", 1)[1], {"late": True})
        second.deliver_hook(sent[1].rsplit("/hooks/", 1)[1], {"approved": True})
        assert second.get(execution_id).status is ExecutionStatus.COMPLETED


def test_an_unknown_node_mints_nothing() -> None:
    """``$webhooks.nope`` names no node: no token is minted, nothing waits in the state."""
    workflow, registry, sent = _notify_then_wait()
    nodes = list(workflow.nodes)
    nodes[1] = Node(key="notify", type="mail.send", params={"link": "{{ $webhooks.nope }}"})
    broken = Workflow(id=workflow.id, nodes=nodes, connections=workflow.connections)
    outcome = execute_workflow(broken, registry=registry)
    assert outcome.execution is not None
    assert not any(key.startswith("__webhook__:") for key in outcome.execution.state)
    assert all(link is None for link in sent)


# --- the token never reaches the record through an error ------------------------------------------


_TOKEN_IN_TEXT = re.compile(r"/hooks/([A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22,})")


def _notify_may_fail(*, retries: int = 1) -> Workflow:
    """notify (quotes the link; on error the flow goes on to the wait) -> webhook wait."""
    return Workflow(
        id="notify-may-fail",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="notify",
                type="chat.send",
                params={"link": "https://example.test/prana{{ $webhooks.approve }}"},
                settings=NodeSettings(
                    on_error="continue",
                    retry=RetryPolicy(max_attempts=retries, initial_delay=1),
                ),
            ),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="notify"),
            Connection(from_node="notify", to_node="approve"),
        ],
    )


def _runner(registry: Registry, store: MemoryStore) -> Runner:
    return Runner(registry=registry, store=store, scheduler=ManualScheduler(clock=ManualClock()))


def _quoting_error(params: Any, ctx: Any) -> Any:
    raise ConnectionError(f"chat server refused {params['link']}")


def _store_reader_resumes(store: MemoryStore, registry: Registry, execution_id: str) -> list[str]:
    """What someone who can only read the store finds: tokens that resume the wait."""
    record = dumps(store.load(execution_id)[0])
    found = _TOKEN_IN_TEXT.findall(record)
    worked = []
    with _runner(registry, store) as r:
        for token in found:
            with contextlib.suppress(HookNotFound):
                r.deliver_hook(token, {"approved": "by the reader"})
                worked.append(token)
    return worked


def test_an_error_quoting_the_link_does_not_hand_the_token_to_store_readers() -> None:
    """An action's error quotes its params (here with on_error=continue, so the flow goes on
    to the wait): the token used to be stored in the error and resumed the wait for anyone
    who could read the store."""
    registry = Registry()
    registry.register("chat.send", _quoting_error)
    store = MemoryStore(serialize=True)
    with _runner(registry, store) as r:
        execution_id = r.start(_notify_may_fail(), None)
        path = r.hook_path(execution_id)
        assert path is not None
        execution = r.get(execution_id)
    notify = execution.node("notify")
    assert notify is not None
    assert notify.error is not None
    assert (
        notify.error.message == f"chat server refused https://example.test/prana/hooks/{REDACTED}"
    )
    assert notify.output["message"] == notify.error.message
    assert _store_reader_resumes(store, registry, execution_id) == []
    assert path.removeprefix("/hooks/") not in dumps(execution)


def test_http_request_errors_keep_no_token_in_message_or_details() -> None:
    """``http.request`` records ``HTTP 400 from POST <url>`` and the URL in ``details``."""
    import httpx

    from prana._http import register_http

    registry = Registry()
    register_http(registry, transport=httpx.MockTransport(lambda request: httpx.Response(400)))
    workflow = _notify_may_fail()
    nodes = [
        attrs.evolve(
            node,
            type="http.request",
            params={"url": "https://chat.test/send?link={{ $webhooks.approve }}", "method": "POST"},
        )
        if node.key == "notify"
        else node
        for node in workflow.nodes
    ]
    store = MemoryStore(serialize=True)
    with _runner(registry, store) as r:
        execution_id = r.start(attrs.evolve(workflow, nodes=nodes), None)
        error = r.get(execution_id).node("notify").error  # type: ignore[union-attr]
    assert error is not None
    assert error.message.startswith("HTTP 400 from POST https://chat.test/send?link=/hooks/[")
    assert detail(error, "url").endswith(f"link=/hooks/{REDACTED}")
    assert _store_reader_resumes(store, registry, execution_id) == []


def test_a_retried_attempt_s_error_keeps_no_token() -> None:
    """Each attempt's error in the ledger (and the retry's suspension) is redacted too."""
    registry = Registry()
    registry.register("chat.send", _quoting_error)
    outcome = execute_workflow(_notify_may_fail(retries=2), registry=registry)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "retry"
    assert outcome.execution is not None
    text = dumps(outcome.execution)
    assert REDACTED in text
    assert _TOKEN_IN_TEXT.search(text) is None


def test_custom_suspension_data_is_redacted_in_the_record_only() -> None:
    """An action that pauses with its own data quoting the link: the caller gets the link,
    the record does not."""
    registry = Registry()
    registry.register("chat.send", lambda params, ctx: Suspend("chat.reply", {"asked": params}))
    outcome = execute_workflow(_notify_may_fail(), registry=registry)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "chat.reply"
    assert _TOKEN_IN_TEXT.search(json.dumps(outcome.data)) is not None
    assert outcome.execution is not None
    stored = outcome.execution.suspension
    assert stored is not None
    assert stored.data == {"asked": {"link": f"https://example.test/prana/hooks/{REDACTED}"}}
    assert _TOKEN_IN_TEXT.search(dumps(outcome.execution)) is None


def test_a_retry_condition_that_raises_quoting_the_error_keeps_no_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A retry_when that raises, quoting the exception (which holds the link): the text the
    attempt's error records (retry_condition_failed), the node error and the log line are
    redacted like every other error."""
    registry = Registry()
    registry.register("chat.send", _quoting_error)

    @registry.condition("picky")
    def picky(view: Any) -> bool:
        raise ValueError(f"cannot judge {view.exception}")

    workflow = _notify_may_fail(retries=3)
    nodes = [
        attrs.evolve(
            node,
            settings=attrs.evolve(
                node.settings,
                retry=RetryPolicy(max_attempts=3, initial_delay=1, retry_when="picky"),
            ),
        )
        if node.key == "notify"
        else node
        for node in workflow.nodes
    ]
    with caplog.at_level("WARNING", logger="prana"):
        outcome = execute_workflow(attrs.evolve(workflow, nodes=nodes), registry=registry)
    assert outcome.execution is not None
    error = outcome.execution.node("notify").error  # type: ignore[union-attr]
    assert error is not None
    assert isinstance(error.details, dict)
    said = error.details["retry_condition_failed"]
    assert isinstance(said, str)
    assert "cannot judge chat server refused" in said
    assert REDACTED in said
    text = dumps(outcome.execution)
    assert _TOKEN_IN_TEXT.search(text) is None
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "cannot judge" in logged
    assert _TOKEN_IN_TEXT.search(logged) is None


# --- the engine's bookkeeping is not the data's to write -----------------------------------


def _copy_reply_then_approve() -> tuple[Workflow, Registry]:
    """A manager's link mailed first; a requester's wait whose reply is copied into the
    state; then the manager's approval wait."""
    registry = Registry()
    registry.register("mail.send", lambda params, ctx: {"sent": True})
    wait = {"mode": "webhook"}
    nodes = [
        Node(key="start", type="manual.trigger"),
        Node(key="notify", type="mail.send", params={"link": "{{ $webhooks.approve }}"}),
        Node(key="request", type="wait.wait", params=wait),
        Node(key="copy", type="workflow.set_state", params={"state": "{{ $input.main }}"}),
        Node(key="approve", type="wait.wait", params=wait),
    ]
    keys = [n.key for n in nodes]
    workflow = Workflow(
        id="copy-then-approve",
        nodes=nodes,
        connections=[Connection(from_node=a, to_node=b) for a, b in itertools.pairwise(keys)],
    )
    return workflow, registry


def test_a_sender_cannot_plant_the_digest_of_a_later_wait() -> None:
    """The requester's reply wrote ``__webhook__:approve`` (the digest of a token of their
    own) through ``workflow.set_state`` and then resumed the manager's approval with it.
    A state write of a reserved key now fails the node, and the planted token is refused."""
    from prana._hooks import mint_token, token_digest

    workflow, registry = _copy_reply_then_approve()
    store = MemoryStore(serialize=True)
    scheduler = ManualScheduler(clock=ManualClock())
    with Runner(registry=registry, store=store, scheduler=scheduler) as runner:
        execution_id = runner.start(workflow, None)
        path = runner.hook_path(execution_id)
        assert path is not None
        own, secret = mint_token(execution_id)
        planted = {"__webhook__:approve": token_digest(execution_id, "approve", secret)}
        runner.deliver_hook(path.rsplit("/", 1)[1], planted)
        execution = runner.get(execution_id)
        assert execution.status is ExecutionStatus.FAILED
        assert execution.error is not None
        assert "'__webhook__:approve'" in execution.error.message
        assert "reserved" in execution.error.message
        with pytest.raises(HookNotFound):
            runner.deliver_hook(own, {"approved": True})
        assert runner.get(execution_id).status is ExecutionStatus.FAILED


@pytest.mark.parametrize("key", ["__for_each__:loop", "__webhook__:approve", "__delivered__:w"])
def test_no_state_write_may_use_a_reserved_key(key: str) -> None:
    """``__for_each__:`` (a loop's progress), ``__webhook__:`` and ``__delivered__:`` keys
    are the engine's: ``workflow.set_state`` (or any action's ``ctx.update_state``) writing
    one fails its node without retry, naming the key."""
    workflow = Workflow(
        id="plant",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="set", type="workflow.set_state", params={"state": {key: {"index": 0}}}),
        ],
        connections=[Connection(from_node="start", to_node="set")],
    )
    outcome = execute_workflow(workflow, registry=Registry())
    assert outcome.execution is not None
    assert outcome.execution.status is ExecutionStatus.FAILED
    assert key not in outcome.execution.state
    error = outcome.execution.error
    assert error is not None
    assert repr(key) in error.message


# --- redaction: encodings and $secrets ------------------------------------------------------


def _decodes_to(text: str, needle: str) -> bool:
    """Whether any base64 run of ``text``, at any alignment, decodes to hold ``needle``."""
    import base64
    import binascii

    for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", text):
        for start in range(4):
            chunk = run[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            for alt in (b"+/", b"-_"):
                try:
                    decoded = base64.b64decode(chunk, altchars=alt)
                except (binascii.Error, ValueError):
                    continue
                if needle.encode() in decoded:
                    return True
    return False


@pytest.mark.parametrize("prefix", ["", "x", "xy"])  # each of base64's three alignments
def test_a_token_in_an_encoded_output_is_redacted_too(prefix: str) -> None:
    """An action output holding the link base64-encoded (an e-mail's raw body), hex or
    percent-encoded let a read-only operator take the token from the record and resume the
    wait; the record now holds none of those forms."""
    import base64
    import urllib.parse

    registry = Registry()

    def send(params: Any, ctx: Any) -> Any:
        body = f"{prefix}Subject: approve\r\n\r\nPlease open {params['link']} today".encode()
        return {
            "raw": base64.b64encode(body).decode(),
            "urlsafe": base64.urlsafe_b64encode(body).decode(),
            "hex": body.hex(),
            "query": "https://mail.test/?next=" + urllib.parse.quote(params["link"], safe=""),
        }

    registry.register("mail.send", send)
    workflow = Workflow(
        id="encoded",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="notify", type="mail.send", params={"link": "{{ $webhooks.approve }}"}),
            Node(key="approve", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="notify"),
            Connection(from_node="notify", to_node="approve"),
        ],
    )
    outcome = execute_workflow(workflow, registry=registry)
    assert isinstance(outcome, Suspend)
    assert isinstance(outcome.data, WebhookData)
    assert outcome.data.token is not None
    secret = outcome.data.token.rpartition(".")[2]
    text = dumps(outcome.execution)
    assert secret not in text
    assert secret.encode().hex() not in text.lower()
    assert not _decodes_to(text, secret)
    assert REDACTED in text


SECRET = "sk-live-0123456789abcdef"


def test_secrets_reach_the_action_and_never_the_record() -> None:
    """``$secrets.<name>`` (the registry's) renders the real value for the action; the
    params, output, state, errors and their encoded forms in the record hold ``[secret]``
    instead. ``$env`` values are kept as rendered: that is what ``$secrets`` is for."""
    import base64

    from prana import ExecutionStatus as Status
    from prana._hooks import SECRET_REDACTED

    seen: list[str] = []
    registry = Registry(secrets={"API_KEY": SECRET})

    def call(params: Any, ctx: Any) -> Any:
        seen.append(params["auth"])
        ctx.update_state({"last": params["auth"]})
        if len(seen) == 1:
            raise ConnectionError(f"refused with {params['auth']}")
        return {"echo": params["auth"], "b64": base64.b64encode(params["auth"].encode()).decode()}

    registry.register("api.call", call)
    policy = RetryPolicy(max_attempts=2, initial_delay=0)
    workflow = Workflow(
        id="secret",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="api.call",
                params={"auth": "Bearer {{ $secrets.API_KEY }}"},
                settings=NodeSettings(retry=policy),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    clock = ManualClock()
    outcome = execute_workflow(workflow, registry=registry, clock=clock)
    from prana import resume_workflow

    while isinstance(outcome, Suspend):
        assert outcome.execution is not None
        outcome = resume_workflow(
            outcome.execution, workflow=workflow, registry=registry, clock=clock
        )
    assert outcome.execution is not None
    assert outcome.execution.status is Status.COMPLETED
    assert seen == [f"Bearer {SECRET}"] * 2
    text = dumps(outcome.execution)
    assert SECRET not in text
    assert not _decodes_to(text, SECRET)
    run = outcome.execution.node("call")
    assert run is not None
    assert run.params == {"auth": f"Bearer {SECRET_REDACTED}"}
    assert run.output is not None
    assert run.output["echo"] == f"Bearer {SECRET_REDACTED}"
    assert outcome.execution.state == {"last": f"Bearer {SECRET_REDACTED}"}
    error = run.attempts[0].error
    assert error is not None
    assert error.message == f"refused with Bearer {SECRET_REDACTED}"


@pytest.mark.parametrize(
    "secrets",
    [{"short": "1234"}, {"not a name": "long enough value"}, {"k": 12345678}],
)
def test_a_secret_the_registry_cannot_redact_safely_is_refused(secrets: Any) -> None:
    """A secret must be text of 8 characters or more, under a name ``$secrets.<name>`` reads."""
    from prana import InvalidSettingsError

    with pytest.raises(InvalidSettingsError, match="Registry secrets"):
        Registry(secrets=secrets)


def test_a_secret_in_a_sub_workflow_input_fails_the_node_and_is_not_recorded() -> None:
    """The child starts from the input the parent's record keeps, so a ``$secrets`` value
    there would be stored as it is: the node fails, naming the fix, and the record holds no
    trace of the secret (the child reads ``$secrets`` itself: it shares the registry)."""
    from prana import ExecutionStatus as Status

    workflow = Workflow(
        id="parent",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="sub",
                type="workflow.execute_workflow",
                params={"workflow_id": "child", "input": {"auth": "{{ $secrets.API_KEY }}"}},
            ),
        ],
        connections=[Connection(from_node="start", to_node="sub")],
    )
    outcome = execute_workflow(workflow, registry=Registry(secrets={"API_KEY": SECRET}))
    assert outcome.execution is not None
    text = dumps(outcome.execution)
    assert SECRET not in text
    assert not _decodes_to(text, SECRET)
    assert outcome.execution.status is Status.FAILED
    assert outcome.execution.error is not None
    assert "$secrets" in outcome.execution.error.message


def test_a_port_an_action_names_after_a_secret_is_recorded_redacted() -> None:
    """An action may name its output port from its params; the record's ``output_port``
    keeps ``[secret]`` in place of a ``$secrets`` value, as the output does."""
    from prana import Output
    from prana._hooks import SECRET_REDACTED

    registry = Registry(secrets={"API_KEY": SECRET})
    registry.register("api.route", lambda params, ctx: Output({}, port=params["to"]))
    workflow = Workflow(
        id="port",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="route", type="api.route", params={"to": "p-{{ $secrets.API_KEY }}"}),
        ],
        connections=[Connection(from_node="start", to_node="route")],
    )
    outcome = execute_workflow(workflow, registry=registry)
    assert outcome.execution is not None
    assert SECRET not in dumps(outcome.execution)
    run = outcome.execution.node("route")
    assert run is not None
    assert run.output_port == f"p-{SECRET_REDACTED}"
