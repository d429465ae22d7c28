"""Claims made ahead by a batch (``scheduling.abc.BatchClaimingStore``, ``scheduling._batch``).

A batch of alarms claims every execution it would claim lightly in one call and one commit,
before any of their steps runs; each step's first checkpoint then finds its claim made. These
tests hold the store's side (one compare-and-set per row), that the claims are made before
the first action and are the light claims a step makes (same final records as a store
without ``claim_many``), that the lease keeper holds them while they wait behind a long
action, and that a cancel, a stopped batch and a record that does not qualify are handled as
the rule next to ``claim_ahead`` says. The store's side runs over every built-in store; the
runner's over the stores that group saves (SQLite, PostgreSQL): a batch is a group, and a
``MemoryStore`` (no groups) runs a batch's alarms one at a time, each claimed by its step.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from doubles import T0, at, flaky_node, workflow
from test_claims import LEASE, Died, claiming

from prana import (
    ActionContext,
    AttemptOutcome,
    ExecutionStatus,
    Node,
    Registry,
    Suspend,
    TimerData,
    dumps,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling._claims import is_claimed
from scheduling._leases import AHEAD_FRESH, Leases
from scheduling.abc import BatchClaimingStore, ClaimingStore, ExecutionStore, GroupingStore
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["batching", "claiming"]  # fixtures; ``claiming`` is tests/test_claims.py's

BATCH = 4


class NotAhead:
    """The same store with ``claim_many`` hidden: each step claims its own execution."""

    def __init__(self, inner: ExecutionStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "claim_many":
            raise AttributeError(name)
        return getattr(self.inner, name)


@pytest.fixture
def batching(claiming: Callable[[], Any]) -> Callable[[], Any]:
    """Makes fresh stores that claim ahead in a batch (``claiming``'s that group saves)."""
    if not isinstance(claiming(), GroupingStore):
        pytest.skip("a store without groups has no batches: each step claims its own")
    return claiming


def in_thread(call: Callable[[], Any]) -> Any:
    """Run ``call`` in a thread of its own (as the lease keeper and another runner do)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    thread.join()
    return out[0]


def keeper_pass(leases: Leases) -> None:
    """What the lease keeper does each time it wakes: renew every claim held long enough."""
    for claim in list(leases._held.values()):
        leases._renew(claim)


def batch_of_retries(
    store: Any, action: Callable[[Any, ActionContext], Any], *, n: int = BATCH
) -> tuple[Runner[ManualScheduler], ManualClock, list[str]]:
    """``n`` executions whose retry of node ``r`` is due at ``at(1)``: one batch when fired.

    ``action`` runs from the second attempt on (the first fails at the start).
    """
    clock = ManualClock(T0)
    registry = Registry()

    def flaky(params: Any, ctx: ActionContext) -> Any:
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return action(params, ctx)

    registry.register("test.flaky", flaky)
    runner = Runner(registry, store, ManualScheduler(clock, batches=True), lease_seconds=LEASE)
    ids = [runner.start(workflow(flaky_node()), execution_id=f"e{i}") for i in range(n)]
    return runner, clock, ids


# -- the store's side ---------------------------------------------------------------------


def test_every_built_in_store_claims_many() -> None:
    assert isinstance(MemoryStore(), BatchClaimingStore)
    assert not isinstance(NotAhead(MemoryStore()), BatchClaimingStore)
    assert isinstance(NotAhead(MemoryStore()), ClaimingStore)


def test_claim_many_is_a_compare_and_set_per_row(claiming: Callable[[], Any]) -> None:
    """Each row at its expected version is claimed as ``claim`` claims it; a row that moved
    on is left as it was, and only the claimed ids come back."""
    store = claiming()
    runner, _, ids = batch_of_retries(store, lambda params, ctx: "done", n=3)
    with runner:
        pass
    loaded = {eid: store.load(eid) for eid in ids}
    moved, kept = ids[1], loaded[ids[1]]
    store.save(kept[0], kept[1])  # moved on: version + 1
    lease, claimed_at = at(1) + timedelta(seconds=LEASE), at(1)
    claims = [(eid, version) for eid, (_, version) in loaded.items()]
    assert sorted(store.claim_many(claims, lease, claimed_at)) == [ids[0], ids[2]]
    for eid in (ids[0], ids[2]):
        record, version = store.load(eid)
        assert version == loaded[eid][1] + 1
        assert is_claimed(record)
        assert (record.updated_at, record.lease_expires_at) == (claimed_at, lease)
        assert record.node_executions == loaded[eid][0].node_executions
    record, version = store.load(moved)
    assert version == kept[1] + 1
    assert record.status is ExecutionStatus.SUSPENDED
    assert store.claim_many([], lease, claimed_at) == []


# -- a batch's claims ---------------------------------------------------------------------


def claimed_in_first_action(store: Any) -> tuple[list[bool], list[str]]:
    """Fire a batch of retries; in the first action, which executions are claimed in the
    store; the final records, serialized."""
    seen: list[bool] = []
    holder: list[list[str]] = []

    def look(params: Any, ctx: ActionContext) -> Any:
        if not seen:
            seen.extend(is_claimed(store.load(eid)[0]) for eid in holder[0])
        return "done"

    runner, _, ids = batch_of_retries(store, look)
    holder.append(ids)
    with runner:
        runner.scheduler.advance(1)
    return seen, [dumps(store.load(eid)[0]) for eid in ids]


def test_a_batch_claims_its_executions_before_the_first_action_runs(
    batching: Callable[[], Any],
) -> None:
    """Over a ``BatchClaimingStore`` every execution of the batch is claimed (lightly) when
    the first action runs; without ``claim_many`` only the first is, by its own step. The
    final records are the same either way."""
    ahead, ahead_records = claimed_in_first_action(batching())
    alone, alone_records = claimed_in_first_action(NotAhead(batching()))
    assert ahead == [True] * BATCH
    assert alone == [True] + [False] * (BATCH - 1)
    assert ahead_records == alone_records


def test_a_long_action_early_in_a_batch_does_not_let_later_claims_lapse(
    batching: Callable[[], Any],
) -> None:
    """The first action runs past the lease of the claims made with it (an injected clock);
    the keeper renews the claims waiting behind it, so another runner recovers none of them,
    and every action runs once."""
    store = batching()
    calls: list[str] = []
    recovered: list[list[str]] = []
    holder: list[Runner[ManualScheduler]] = []

    def slow_first(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.execution_id)
        if len(calls) == 1:
            leases = holder[0]._leases
            for _ in range(2):  # twice two thirds of the lease, a keeper pass after each
                clock.advance(LEASE * 2 / 3)
                in_thread(lambda: keeper_pass(leases))
            other = Runner(holder[0].registry, store, ManualScheduler(clock), lease_seconds=LEASE)
            recovered.append(in_thread(other.run_due))
        return "done"

    runner, clock, ids = batch_of_retries(store, slow_first)
    holder.append(runner)
    with runner:
        runner.scheduler.advance(1)
    assert recovered == [[]]
    assert sorted(calls) == ids
    for eid in ids:
        record = store.load(eid)[0]
        assert record.status is ExecutionStatus.COMPLETED
        node = record.node("r")
        assert node is not None
        assert [a.outcome for a in node.attempts] == [
            AttemptOutcome.FAILED,
            AttemptOutcome.COMPLETED,
        ]


def test_cancelling_an_execution_claimed_ahead_stops_its_step_at_its_claim(
    batching: Callable[[], Any],
) -> None:
    """A cancel (in this process) of an execution waiting in its batch, claimed ahead, is a
    cancel of a claimed execution: the attempt the claim stands for is closed cancelled;
    and its step, when its turn comes, loses its claim before the action runs."""
    store = batching()
    calls: list[str] = []
    holder: list[Runner[ManualScheduler]] = []

    def cancel_the_next(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.execution_id)
        if len(calls) == 1:
            holder[0].cancel("e1", "operator")
        return "done"

    runner, _, ids = batch_of_retries(store, cancel_the_next)
    holder.append(runner)
    with runner:
        runner.scheduler.advance(1)
    assert calls == ["e0", "e2", "e3"]
    cancelled = store.load("e1")[0]
    assert cancelled.status is ExecutionStatus.CANCELLED
    node = cancelled.node("r")
    assert node is not None
    assert [a.outcome for a in node.attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.CANCELLED,
    ]
    assert all(store.load(eid)[0].status is ExecutionStatus.COMPLETED for eid in ids if eid != "e1")


@pytest.mark.parametrize("past", [False, True], ids=["within", "past"])
def test_a_cancel_from_another_runner_while_claimed_ahead(
    batching: Callable[[], Any], past: bool
) -> None:
    """Another runner (another process, its own store) cancels e1 while it waits in its
    batch, claimed ahead. If the claim has stood longer than ``AHEAD_FRESH`` when e1's turn
    comes, its step claims again by compare-and-set, loses, and its action never runs;
    within the bound the cancel found e1 running, and its action may run, as during an
    action: its save is lost and the store keeps it cancelled either way."""
    store = batching()
    if hasattr(store, "path"):  # another process's connection to the same data
        elsewhere = type(store)(store.path)
    else:
        elsewhere = type(store)(store.dsn, schema=store.schema)
    calls: list[str] = []

    def cancel_elsewhere(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.execution_id)
        if len(calls) == 1:
            clock.advance(AHEAD_FRESH.total_seconds() + 0.001 if past else 0)
            other = Runner(Registry(), elsewhere, ManualScheduler(clock), lease_seconds=LEASE)
            in_thread(lambda: other.cancel("e1", "operator"))
        return "done"

    try:
        runner, clock, ids = batch_of_retries(store, cancel_elsewhere)
        with runner:
            runner.scheduler.advance(1)
        assert calls == (["e0", "e2", "e3"] if past else ids)
        assert store.load("e1")[0].status is ExecutionStatus.CANCELLED
        assert all(
            store.load(eid)[0].status is ExecutionStatus.COMPLETED for eid in ids if eid != "e1"
        )
    finally:
        elsewhere.close()


def test_a_batch_that_stops_gives_back_the_claims_of_the_steps_it_did_not_run(
    batching: Callable[[], Any],
) -> None:
    """The process dies in the first action (a BaseException through the batch): the
    executions claimed ahead whose steps never ran are stored suspended again, so a later
    runner resumes them with no interrupted attempt; the one that died is recovered."""
    store = batching()

    def dies_first(params: Any, ctx: ActionContext) -> Any:
        if ctx.execution_id == "e0":
            raise Died
        return "done"

    runner, clock, ids = batch_of_retries(store, dies_first)
    with runner, pytest.raises(Died):
        runner.scheduler.advance(1)
    assert is_claimed(store.load("e0")[0])
    for eid in ids[1:]:
        record = store.load(eid)[0]
        assert record.status is ExecutionStatus.SUSPENDED
        assert record.due_at == at(1)
    clock.advance(LEASE)
    again, _, _ = batch_of_retries(MemoryStore(), lambda params, ctx: "done")
    later = Runner(again.registry, store, ManualScheduler(clock), lease_seconds=LEASE)
    assert sorted(later.run_due()) == ids
    for eid in ids:
        node = store.load(eid)[0].node("r")
        assert node is not None
        interrupted = [a for a in node.attempts if a.outcome is AttemptOutcome.INTERRUPTED]
        assert len(interrupted) == (1 if eid == "e0" else 0)


def test_a_user_timer_with_a_resume_callback_is_not_claimed_ahead(
    batching: Callable[[], Any],
) -> None:
    """The rule of light claims holds ahead too (``claimable``): a user action's timer with
    a ``resume`` callback is resumed by its own step, unclaimed until its checkpoint."""
    store = batching()
    registry = Registry()
    seen: list[bool] = []

    def pause(params: Any, ctx: ActionContext) -> Any:
        return Suspend("timer", TimerData(resume_at=ctx.now + timedelta(seconds=5)))

    def on_resume(params: Any, ctx: ActionContext, data: Any) -> Any:
        if not seen:
            seen.extend(store.load(f"u{i}")[0].status is ExecutionStatus.SUSPENDED for i in (1, 2))
        return 1

    registry.register("u.timer", pause, on_resume)
    clock = ManualClock(T0)
    wf = workflow(Node(key="a", type="u.timer"), wid="user-timer")
    with Runner(
        registry, store, ManualScheduler(clock, batches=True), lease_seconds=LEASE
    ) as runner:
        for i in range(3):
            runner.start(wf, execution_id=f"u{i}")
        runner.scheduler.advance(5)
        assert all(runner.get(f"u{i}").status is ExecutionStatus.COMPLETED for i in range(3))
    assert seen == [True, True]


def test_executions_claimed_ahead_with_a_poison_one_are_charged_once_per_crash(
    batching: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that dies (kill -9: nothing is given back) in the first action of a batch
    leaves the others claimed ahead: each is recovered with one interrupted attempt (its
    action never ran) and completes; a recovery is never claimed ahead, so the poison one
    alone reaches the poison bound."""
    monkeypatch.setattr("scheduling._runner.give_back", lambda *args: None)  # a dead process
    store = batching()
    calls: list[str] = []

    def poison_first(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.execution_id)
        if ctx.execution_id == "e0":
            raise Died
        return "done"

    runner, clock, ids = batch_of_retries(store, poison_first)
    with runner, pytest.raises(Died):
        runner.scheduler.advance(1)
    assert all(is_claimed(store.load(eid)[0]) for eid in ids)
    for _ in range(3):
        clock.advance(LEASE)
        again = Runner(
            runner.registry, store, ManualScheduler(clock, batches=True), lease_seconds=LEASE
        )
        with again, contextlib.suppress(Died):
            again.scheduler.advance(0)
    assert calls.count("e0") == 3  # the third recovery fails it without running it
    assert sorted(eid for eid in calls if eid != "e0") == ids[1:]  # each once, never twice
    poison = store.load("e0")[0]
    assert poison.status is ExecutionStatus.FAILED
    for eid in ids[1:]:
        record = store.load(eid)[0]
        assert record.status is ExecutionStatus.COMPLETED
        node = record.node("r")
        assert node is not None
        assert [a.outcome for a in node.attempts] == [
            AttemptOutcome.FAILED,
            AttemptOutcome.INTERRUPTED,
            AttemptOutcome.COMPLETED,
        ]
