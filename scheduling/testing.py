"""Conformance suites for your own store or scheduler, run by your own pytest suite.

``StoreConformance`` checks an ``ExecutionStore``, ``SchedulerConformance`` a
``Scheduler``. Subclass one in a test module, give it a fixture that builds a fresh
backend, and pytest runs every check against it::

    from scheduling.testing import StoreConformance

    class TestDictStore(StoreConformance):
        @pytest.fixture
        def store(self):
            return DictStore()

The checks are the promises of "Writing your own store or scheduler" in the docs, no more:
behaviour and the error *types* named there, never the built-in backends' wording. A check
of an optional capability (``TreeCountingStore``, reading a corrupt record) is skipped when
the backend does not offer it. Importing this module needs pytest.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from prana import (
    AttemptOutcome,
    AttemptRecord,
    Connection,
    ErrorInfo,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    NodeExecution,
    NodeStatus,
    RecordError,
    RetryData,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
    Workflow,
    WorkflowExecution,
    dumps,
)
from scheduling._errors import (
    ExecutionNotFound,
    StaleVersionError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling.abc import ExecutionStore, Scheduler, TreeCountingStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["FireRecorder", "SchedulerConformance", "StoreConformance"]

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
_BOOM = ErrorInfo(code="action_error", type="RuntimeError", module="builtins", message="boom")


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def _node_run(status: NodeStatus) -> NodeExecution:
    return NodeExecution(
        node_key="a",
        status=status,
        execution_index=1,
        run_index=0,
        started_at=T0,
        params={"url": "https://example.test"},
        attempts=(
            AttemptRecord(
                number=1,
                started_at=T0,
                ended_at=at(1),
                outcome=AttemptOutcome.FAILED,
                error=_BOOM,
                retry_delay_ms=1000,
            ),
        ),
    )


def execution(
    eid: str = "e1",
    *,
    status: ExecutionStatus = ExecutionStatus.COMPLETED,
    suspension: Suspend | None = None,
    updated: datetime = T0,
    workflow_id: str = "wf",
    state: dict[str, Any] | None = None,
) -> WorkflowExecution:
    """A record built by hand; ``suspension`` implies status ``suspended``."""
    if suspension is not None:
        status = ExecutionStatus.SUSPENDED
    return WorkflowExecution(
        id=eid,
        workflow_id=workflow_id,
        workflow_version=1,
        status=status,
        input={"n": 1},
        node_executions={
            "a": (_node_run(NodeStatus.SUSPENDED if suspension else NodeStatus.COMPLETED),)
        },
        state=state or {},
        next_index=2,
        suspended_node="a" if suspension else None,
        suspension=suspension,
        output=None if suspension else {"ok": True},
        started_at=T0,
        updated_at=updated,
        completed_at=None if suspension else updated,
    )


def retry(eid: str, due: datetime, **kwargs: Any) -> WorkflowExecution:
    """A suspended execution waiting for its retry at ``due``."""
    data = RetryData(
        retry_delay_ms=1000, attempt_number=2, max_attempts=3, original_error=_BOOM, resume_at=due
    )
    return execution(eid, suspension=Suspend("retry", data), **kwargs)


def timer(eid: str, due: datetime) -> WorkflowExecution:
    """A suspended execution waiting for a timer at ``due``."""
    return execution(eid, suspension=Suspend("timer", TimerData(resume_at=due)))


def webhook(eid: str, expires: datetime | None) -> WorkflowExecution:
    """A suspended execution waiting for a webhook, expiring at ``expires`` (or never)."""
    return execution(eid, suspension=Suspend("webhook", WebhookData(expires_at=expires)))


def definition(version: int = 1, url: str = "https://example.test") -> Workflow:
    """A two-node workflow definition."""
    graph: dict[str, Any] = {
        "nodes": (
            Node(key="start", type="manual.trigger"),
            Node(key="a", type="http.request", params={"url": url}),
        ),
        "connections": (Connection(from_node="start", to_node="a"),),
    }
    return Workflow(
        id="wf", version=version, name="fetch", variables={"region": "eu", "limit": 3}, **graph
    )


def run_in_step(*jobs: Callable[[Callable[[], None]], object]) -> list[object]:
    """Run each job in its own thread; a job calls ``meet()`` to wait until all others do too."""
    barrier = threading.Barrier(len(jobs))
    results: list[object] = [None] * len(jobs)

    def meet() -> None:
        barrier.wait(timeout=10)

    def worker(i: int, job: Callable[[Callable[[], None]], object]) -> None:
        try:
            results[i] = job(meet)
        except Exception as exc:  # noqa: BLE001 - the check inspects what each thread got
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    return results


def run_together(*jobs: Callable[[], object]) -> list[object]:
    """Run each job in its own thread, released together by a barrier; return results or errors."""
    return run_in_step(*(lambda meet, job=job: (meet(), job())[1] for job in jobs))


class StoreConformance:
    """The ``ExecutionStore`` promises, as pytest tests over a ``store`` fixture you define.

    Subclass it as ``class TestMyStore(StoreConformance)`` and define ``store`` (a fresh,
    empty store; close it after the yield if it holds connections). Override
    ``corrupt(store, execution_id, text)`` to run the checks on unreadable records.
    """

    @pytest.fixture
    def store(self) -> ExecutionStore:
        """A fresh, empty store: define this fixture in your subclass."""
        pytest.fail("define a `store` fixture in your StoreConformance subclass")

    def corrupt(self, store: ExecutionStore, execution_id: str, text: str) -> None:
        """Write ``text`` over the stored record of ``execution_id``, behind the store's back.

        Not overridden, the checks that need it are skipped.
        """
        pytest.skip("override corrupt() to check how the store reads a corrupt record")

    # -- versions: the compare-and-set ----------------------------------------------------

    def test_create_then_load_round_trips(self, store: ExecutionStore) -> None:
        """A created execution loads back equal, at version 1."""
        record = retry("e1", at(30), state={"seen": [1, 2]})
        assert store.save(record, None) == 1
        loaded, version = store.load("e1")
        assert version == 1
        assert loaded == record
        assert loaded.due_at == at(30)

    def test_each_save_increments_the_version(self, store: ExecutionStore) -> None:
        """Every accepted save returns the next version, and load sees the latest record."""
        assert store.save(retry("e1", at(1)), None) == 1
        assert store.save(retry("e1", at(2)), 1) == 2
        final = execution("e1", updated=at(3))
        assert store.save(final, 2) == 3
        assert store.load("e1") == (final, 3)

    def test_stale_save_is_refused_and_changes_nothing(self, store: ExecutionStore) -> None:
        """A save naming an old version raises StaleVersionError and keeps the newer record."""
        store.save(retry("e1", at(1)), None)
        newer = retry("e1", at(5))
        store.save(newer, 1)
        with pytest.raises(StaleVersionError):
            store.save(execution("e1", updated=at(9)), 1)
        assert store.load("e1") == (newer, 2)
        assert list(store.find_due(at(5))) == [("e1", at(5))]

    def test_create_of_an_existing_id_is_refused(self, store: ExecutionStore) -> None:
        """Saving with expected_version=None over a stored id raises and keeps the original."""
        original = retry("e1", at(1))
        store.save(original, None)
        with pytest.raises(StaleVersionError):
            store.save(execution("e1"), None)
        assert store.load("e1") == (original, 1)

    def test_update_of_an_unknown_id_is_refused(self, store: ExecutionStore) -> None:
        """Saving with a version for an id that is not stored raises and creates nothing."""
        with pytest.raises(StaleVersionError):
            store.save(execution("ghost"), 1)
        with pytest.raises(ExecutionNotFound):
            store.load("ghost")

    def test_load_of_an_unknown_id_raises_not_found(self, store: ExecutionStore) -> None:
        """Loading an id that was never saved raises ExecutionNotFound, a LookupError."""
        with pytest.raises(LookupError) as info:
            store.load("nope")
        assert isinstance(info.value, ExecutionNotFound)

    # -- due times ------------------------------------------------------------------------

    def test_find_due_is_earliest_first_and_limited(self, store: ExecutionStore) -> None:
        """find_due returns executions with due_at <= now, earliest first, up to limit."""
        store.save(retry("late", at(30)), None)
        store.save(timer("first", at(10)), None)
        store.save(retry("tie-a", at(20)), None)
        store.save(retry("tie-b", at(20)), None)
        store.save(retry("future", at(31)), None)
        store.save(execution("done"), None)
        store.save(webhook("hook", None), None)
        due = list(store.find_due(at(30)))
        assert due == [("first", at(10)), ("tie-a", at(20)), ("tie-b", at(20)), ("late", at(30))]
        assert list(store.find_due(at(30), limit=2)) == [("first", at(10)), ("tie-a", at(20))]
        elsewhere = timezone(timedelta(hours=5, minutes=30))
        assert list(store.find_due(at(30).astimezone(elsewhere))) == due
        assert list(store.find_due(at(9))) == []
        assert all(due_at.tzinfo is not None for _, due_at in due)

    def test_find_due_follows_the_latest_save(self, store: ExecutionStore) -> None:
        """A due time moves with each save and goes once the execution is not suspended."""
        store.save(retry("e1", at(10)), None)
        store.save(retry("e1", at(50)), 1)
        assert list(store.find_due(at(40))) == []
        assert list(store.find_due(at(50))) == [("e1", at(50))]
        store.save(execution("e1", updated=at(50)), 2)
        assert list(store.find_due(at(100))) == []
        assert list(store.alarms()) == []

    def test_alarms_list_only_executions_with_a_due_time(self, store: ExecutionStore) -> None:
        """alarms() holds retries, timers and expiring webhooks, earliest first, only those."""
        store.save(webhook("hook", at(300)), None)
        store.save(retry("retry", at(100)), None)
        store.save(timer("timer", at(200)), None)
        store.save(webhook("forever", None), None)
        sub = SubWorkflowData(workflow_id="child", child_execution_id="c1")
        store.save(execution("parent", suspension=Suspend("sub_workflow", sub)), None)
        store.save(execution("done"), None)
        store.save(execution("failed", status=ExecutionStatus.FAILED), None)
        store.save(execution("cancelled", status=ExecutionStatus.CANCELLED), None)
        assert list(store.alarms()) == [
            ("retry", at(100)),
            ("timer", at(200)),
            ("hook", at(300)),
        ]

    # -- listing ----------------------------------------------------------------------------

    def test_list_is_newest_first_and_filters_by_status(self, store: ExecutionStore) -> None:
        """list() returns summaries, most recently created first, optionally of one status."""
        store.save(execution("old", updated=at(1)), None)
        store.save(retry("mid", at(60), updated=at(2)), None)
        store.save(execution("new", status=ExecutionStatus.FAILED, updated=at(3)), None)
        store.save(retry("mid", at(90), updated=at(4)), 1)
        assert [s.id for s in store.list()] == ["new", "mid", "old"]
        assert [s.id for s in store.list(limit=2)] == ["new", "mid"]
        (mid,) = store.list(ExecutionStatus.SUSPENDED)
        assert mid == attrs.evolve(
            mid,
            id="mid",
            workflow_id="wf",
            workflow_version=1,
            status=ExecutionStatus.SUSPENDED,
            version=2,
        )
        assert mid.due_at == at(90)
        assert mid.updated_at == at(4)
        assert [s.id for s in store.list(ExecutionStatus.COMPLETED)] == ["old"]
        assert [s.id for s in store.list(ExecutionStatus.FAILED)] == ["new"]
        assert list(store.list(ExecutionStatus.CANCELLED)) == []

    def test_list_filters_by_workflow_and_status_together(self, store: ExecutionStore) -> None:
        """``workflow_id`` keeps one workflow's executions; with ``status``, both must match."""
        store.save(execution("a1", workflow_id="a"), None)
        store.save(execution("b1", workflow_id="b"), None)
        store.save(retry("a2", at(60), workflow_id="a"), None)
        store.save(execution("a3", workflow_id="a", status=ExecutionStatus.FAILED), None)
        assert [s.id for s in store.list(workflow_id="a")] == ["a3", "a2", "a1"]
        assert [s.id for s in store.list(workflow_id="a", limit=2)] == ["a3", "a2"]
        assert [s.id for s in store.list(ExecutionStatus.COMPLETED, workflow_id="a")] == ["a1"]
        assert [s.id for s in store.list(workflow_id="b")] == ["b1"]
        assert list(store.list(workflow_id="nobody")) == []
        assert list(store.list(ExecutionStatus.FAILED, workflow_id="b")) == []

    def test_list_pages_with_a_keyset_cursor(self, store: ExecutionStore) -> None:
        """``after=<id>`` starts the page below that execution, newest first: a boundary stays
        put when newer executions arrive or the cursor's own status changes."""
        for n in range(5):
            store.save(execution(f"e{n}", workflow_id="even" if n % 2 == 0 else "odd"), None)
        first = store.list(limit=2)
        assert [s.id for s in first] == ["e4", "e3"]
        store.save(execution("e5"), None)
        store.save(retry("e3", at(60), workflow_id="odd"), 1)
        assert [s.id for s in store.list(limit=2, after=first[-1].id)] == ["e2", "e1"]
        assert [s.id for s in store.list(after="e1")] == ["e0"]
        assert list(store.list(after="e0")) == []
        assert [s.id for s in store.list(workflow_id="even", after="e4")] == ["e2", "e0"]
        assert [s.id for s in store.list(workflow_id="even", after="e3")] == ["e2", "e0"]
        completed = store.list(ExecutionStatus.COMPLETED, after="e5", limit=2)
        assert [s.id for s in completed] == ["e4", "e2"]
        with pytest.raises(ExecutionNotFound):
            store.list(after="gone")

    # -- definitions ------------------------------------------------------------------------

    def test_definitions_are_kept_by_id_and_version(self, store: ExecutionStore) -> None:
        """A saved definition loads back equal; saving the same one again is a no-op."""
        store.save_workflow(definition())
        store.save_workflow(definition())
        store.save_workflow(definition(version=2, url="https://other.test"))
        assert store.load_workflow("wf", 1) == definition()
        assert store.load_workflow("wf", 2) == definition(version=2, url="https://other.test")

    def test_latest_workflow_version_skips_gaps(self, store: ExecutionStore) -> None:
        """The latest version is the highest stored one, across gaps; None for an unknown id."""
        assert store.latest_workflow_version("wf") is None
        store.save_workflow(definition(version=3))
        store.save_workflow(definition())
        assert store.latest_workflow_version("wf") == 3
        assert store.latest_workflow_version("other") is None

    def test_the_store_matches_the_protocol(self, store: ExecutionStore) -> None:
        """The store is an ``ExecutionStore`` by the runtime-checkable protocol."""
        assert isinstance(store, ExecutionStore)

    def test_list_workflows_names_every_definition_sorted(self, store: ExecutionStore) -> None:
        """Every stored ``(id, version)``, by id in code point order, then version."""
        assert list(store.list_workflows()) == []
        store.save_workflow(definition(version=3))
        store.save_workflow(definition())
        for other in ("another", "Zed", "\u00e9t\u00e9"):
            store.save_workflow(attrs.evolve(definition(), id=other))
        store.save_workflow(definition())
        assert list(store.list_workflows()) == [
            ("Zed", 1),
            ("another", 1),
            ("wf", 1),
            ("wf", 3),
            ("\u00e9t\u00e9", 1),
        ]

    def test_a_conflicting_definition_is_refused(self, store: ExecutionStore) -> None:
        """A different definition under a stored id and version raises and keeps the stored one."""
        store.save_workflow(definition())
        with pytest.raises(WorkflowConflictError) as info:
            store.save_workflow(definition(url="https://changed.test"))
        assert isinstance(info.value, ValueError)
        assert store.load_workflow("wf", 1) == definition()

    def test_an_unknown_definition_raises_not_found(self, store: ExecutionStore) -> None:
        """Loading a definition that was never saved raises WorkflowNotFound."""
        store.save_workflow(definition())
        with pytest.raises(WorkflowNotFound):
            store.load_workflow("wf", 2)

    # -- corrupt records (needs ``corrupt``) ------------------------------------------------

    @pytest.mark.parametrize("garbage", ["{not json", "[1, 2, 3]", '{"id": "e1"}'])
    def test_a_corrupt_record_raises_record_error_naming_the_id(
        self, store: ExecutionStore, garbage: str
    ) -> None:
        """A stored record that cannot be read raises RecordError naming the execution."""
        store.save(retry("e1", at(1)), None)
        self.corrupt(store, "e1", garbage)
        with pytest.raises(RecordError, match="e1"):
            store.load("e1")
        assert [s.id for s in store.list()] == ["e1"]

    def test_a_bad_field_is_named_with_the_id(self, store: ExecutionStore) -> None:
        """A readable record with one bad field raises RecordError passing on its problems."""
        store.save(retry("e1", at(1)), None)
        document = orjson.loads(dumps(retry("e1", at(1))))
        document["execution"]["status"] = "zombie"
        self.corrupt(store, "e1", orjson.dumps(document).decode())
        with pytest.raises(RecordError, match="e1") as info:
            store.load("e1")
        assert any("zombie" in problem for problem in info.value.problems)

    # -- threads ----------------------------------------------------------------------------

    def test_two_threads_saving_the_same_version_one_wins(self, store: ExecutionStore) -> None:
        """Two load-then-save transitions racing on one version: exactly one is accepted."""
        store.save(retry("e1", at(1)), None)
        outcomes = [execution("e1", updated=at(2)), retry("e1", at(60), updated=at(2))]

        def transition(new: WorkflowExecution) -> Callable[[Callable[[], None]], object]:
            def job(meet: Callable[[], None]) -> object:
                _, version = store.load("e1")
                meet()  # both have loaded version 1 before either saves
                return store.save(new, version)

            return job

        results = run_in_step(*(transition(new) for new in outcomes))
        winners = [i for i, result in enumerate(results) if result == 2]
        assert len(winners) == 1
        assert sum(isinstance(r, StaleVersionError) for r in results) == 1
        assert store.load("e1") == (outcomes[winners[0]], 2)

    def test_many_threads_racing_leave_one_record(self, store: ExecutionStore) -> None:
        """Eight concurrent saves on version 1 of one record: one wins, seven are refused."""
        store.save(retry("e1", at(1)), None)
        racers = [retry("e1", at(10 + i)) for i in range(8)]
        results = run_together(*(lambda new=new: store.save(new, 1) for new in racers))
        assert results.count(2) == 1
        assert sum(isinstance(r, StaleVersionError) for r in results) == 7
        winner = racers[results.index(2)]
        assert store.load("e1") == (winner, 2)
        assert list(store.alarms()) == [("e1", winner.due_at)]

    # -- bad arguments: the three the docs name ---------------------------------------------

    @pytest.mark.parametrize(
        "call",
        [
            pytest.param(lambda s: s.find_due(at(0), limit=0), id="find_due-limit-0"),
            pytest.param(lambda s: s.list(limit=-1), id="list-limit--1"),
            pytest.param(
                lambda s: s.find_due(datetime(2030, 1, 1), 10),  # noqa: DTZ001 - the bad input
                id="find_due-naive-now",
            ),
            pytest.param(lambda s: s.save({"id": "e1"}, None), id="save-not-an-execution"),
        ],
    )
    def test_bad_arguments_raise_invalid_settings(
        self, store: ExecutionStore, call: Callable[[Any], object]
    ) -> None:
        """A limit below 1, a naive now, a non-execution: InvalidSettingsError (a ValueError),
        and nothing stored."""
        with pytest.raises(InvalidSettingsError) as info:
            call(store)
        assert isinstance(info.value, ValueError)
        assert list(store.list()) == []

    # -- an optional capability ---------------------------------------------------------------

    def test_count_tree_counts_a_root_and_the_ids_under_it(self, store: ExecutionStore) -> None:
        """``count_tree`` matches the id and ``id + ":"`` exactly: no wildcards, no case folding.

        Skipped for a store that is not a ``TreeCountingStore``.
        """
        if not isinstance(store, TreeCountingStore):
            pytest.skip("not a TreeCountingStore (optional)")
        ids = ["r_1", "r_1:a:0:1", "r_1:a:0:1:b:0:1", "r_1:c:0:1"]
        others = ["r_1x:a", "r%1:a", "rx1:a", "R_1:a", "r_1;a", "r_", "r_10", "r_1x"]
        for eid in ids + others:
            store.save(execution(eid), None)
        assert store.count_tree("r_1", 100) == 4
        assert store.count_tree("r_1", 3) == 3  # stops at ``most``
        assert store.count_tree("r_1:a:0:1", 100) == 2
        assert store.count_tree("r%1", 100) == 1
        assert store.count_tree("r_", 100) == 1
        assert store.count_tree("nobody", 100) == 0
        store.save(execution("lone:child"), None)  # a tree whose root is not stored
        assert store.count_tree("lone", 100) == 1


# -- schedulers ---------------------------------------------------------------------------


class FireRecorder:
    """A ``fire`` callback that records each call; ``then(execution_id)`` runs after it.

    ``listeners`` are called after each recorded call (an event loop's waiter, say).
    """

    def __init__(self, then: Callable[[str], object] | None = None) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.then = then
        self.listeners: list[Callable[[], None]] = []
        self._cond = threading.Condition()

    def __call__(self, *args: Any, **kwargs: Any) -> object:
        """Record one firing, wake the waiters, then run ``then``."""
        with self._cond:
            self.calls.append((args, kwargs))
            self._cond.notify_all()
        for listener in self.listeners:
            listener()
        return self.then(args[0]) if self.then is not None else None

    @property
    def ids(self) -> list[str]:
        """The execution ids fired, in order."""
        return [args[0] for args, _ in self.calls]

    def wait_threaded(self, count: int, timeout: float) -> bool:
        """Block until ``count`` calls were recorded; False after ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.calls) >= count, timeout=timeout)


class _FireFailedError(RuntimeError):
    """What the failing ``fire`` callback of the failing-alarm check raises."""


_Op = tuple[str, str, float]  # ("schedule", id, ms from now) or ("cancel", id, 0)

SCENARIOS: dict[str, tuple[list[_Op], list[str]]] = {
    "due order": (
        [("schedule", "x", 100), ("schedule", "y", 40), ("schedule", "z", 160)],
        ["y", "x", "z"],
    ),
    "replace with a later time": (
        [("schedule", "x", 20), ("schedule", "x", 140), ("schedule", "z", 80)],
        ["z", "x"],
    ),
    "replace with an earlier time": (
        [("schedule", "x", 150), ("schedule", "x", 20), ("schedule", "z", 190)],
        ["x", "z"],
    ),
    "cancel": (
        [("schedule", "x", 30), ("schedule", "y", 60), ("cancel", "x", 0), ("schedule", "z", 90)],
        ["y", "z"],
    ),
    "cancel unknown id": ([("cancel", "nobody", 0), ("schedule", "z", 30)], ["z"]),
    "already overdue": ([("schedule", "x", -10_000), ("schedule", "z", 60)], ["x", "z"]),
}
"""Each scenario's operations and the ids that must fire, in order."""


class SchedulerConformance:
    """The ``Scheduler`` promises, as pytest tests over a ``scheduler`` fixture you define.

    Subclass it as ``class TestMyScheduler(SchedulerConformance)`` and define ``scheduler``
    (a fresh one; shut it down after the ``yield``). Alarms are due at most a few hundred
    milliseconds ahead by the wall clock, and each check waits on an event, never sleeps.
    A scheduler that fires by another clock overrides ``now``, and one that needs driving
    (an event loop, a hand-moved clock) overrides ``start`` and ``wait_for``.
    """

    timeout: float = 5.0
    """Seconds to wait for an alarm that must fire; reached only on a failure."""

    lead_ms: float = 250
    """How far ahead of one reading of now a scenario's alarms begin, so that every call
    giving them is made before the first is due, however slowly a loaded machine runs."""

    @pytest.fixture
    def scheduler(self) -> Iterator[Scheduler]:
        """A fresh scheduler: define this fixture in your subclass."""
        pytest.fail("define a `scheduler` fixture in your SchedulerConformance subclass")

    def now(self, scheduler: Scheduler) -> datetime:
        """The scheduler's now: the wall clock, in UTC."""
        return datetime.now(timezone.utc)

    def start(self, scheduler: Scheduler, fire: FireRecorder) -> None:
        """Start the scheduler with ``fire``."""
        scheduler.start(fire)

    def wait_for(self, scheduler: Scheduler, fire: FireRecorder, count: int) -> None:
        """Let alarms fire until ``fire`` saw ``count`` calls; fail after ``timeout``."""
        fire.wait_threaded(count, self.timeout)
        assert len(fire.calls) >= count, f"only {fire.ids} fired, wanted {count}"

    def _play(self, scheduler: Scheduler, ops: list[_Op], lead_ms: float) -> None:
        base = self.now(scheduler) + timedelta(milliseconds=lead_ms)
        for op, execution_id, ms in ops:
            if op == "schedule":
                scheduler.schedule(execution_id, base + timedelta(milliseconds=ms))
            else:
                scheduler.cancel(execution_id)

    def test_the_scheduler_matches_the_protocol(self, scheduler: Scheduler) -> None:
        """The scheduler is a ``Scheduler`` by the runtime-checkable protocol."""
        assert isinstance(scheduler, Scheduler)

    @pytest.mark.parametrize("scenario", list(SCENARIOS))
    def test_alarms_fire_once_each_in_due_order(self, scheduler: Scheduler, scenario: str) -> None:
        """Due order; one alarm per id, a new time replacing the old; cancel (an unknown id
        ignored); an alarm already overdue still fires."""
        ops, expected = SCENARIOS[scenario]
        fire = FireRecorder()
        self.start(scheduler, fire)
        self._play(scheduler, ops, self.lead_ms)
        self.wait_for(scheduler, fire, len(expected))
        assert fire.ids == expected

    def test_fire_carries_only_the_execution_id(self, scheduler: Scheduler) -> None:
        """The fire callback gets exactly one positional argument: the execution id."""
        fire = FireRecorder()
        self.start(scheduler, fire)
        scheduler.schedule("exec-1", self.now(scheduler) + timedelta(milliseconds=20))
        self.wait_for(scheduler, fire, 1)
        assert fire.calls == [(("exec-1",), {})]

    def test_an_alarm_armed_before_start_fires_after_it(self, scheduler: Scheduler) -> None:
        """An alarm scheduled before ``start`` waits for it and then fires."""
        fire = FireRecorder()
        scheduler.schedule("early", self.now(scheduler) + timedelta(milliseconds=30))
        self.start(scheduler, fire)
        self.wait_for(scheduler, fire, 1)
        assert fire.ids == ["early"]

    def test_fire_may_rearm_its_own_execution_for_now(self, scheduler: Scheduler) -> None:
        """A callback that re-arms its own id for now (a 0 ms retry) is fired again."""

        def rearm_once(execution_id: str) -> None:
            if len(fire.calls) == 1:
                scheduler.schedule(execution_id, self.now(scheduler))

        fire = FireRecorder(then=rearm_once)
        self.start(scheduler, fire)
        scheduler.schedule("again", self.now(scheduler) + timedelta(milliseconds=20))
        self.wait_for(scheduler, fire, 2)
        assert fire.ids == ["again", "again"]

    def test_shutdown_drops_pending_alarms_and_start_works_again(
        self, scheduler: Scheduler
    ) -> None:
        """After ``shutdown`` a pending alarm never fires, and the scheduler starts again."""
        first = FireRecorder()
        self.start(scheduler, first)
        scheduler.schedule("dropped", self.now(scheduler) + timedelta(milliseconds=30))
        scheduler.shutdown()
        second = FireRecorder()
        self.start(scheduler, second)
        scheduler.schedule("sentinel", self.now(scheduler) + timedelta(milliseconds=80))
        self.wait_for(scheduler, second, 1)
        assert (first.ids, second.ids) == ([], ["sentinel"])

    def test_alarms_after_a_failing_one_still_fire(self, scheduler: Scheduler) -> None:
        """A fire callback that raises never stops the scheduler: alarms armed before and
        after the failure fire, also after a second failure."""

        def fail_bad(execution_id: str) -> None:
            if execution_id.startswith("bad"):
                raise _FireFailedError(f"boom {execution_id}")

        fire = FireRecorder(then=fail_bad)
        self.start(scheduler, fire)
        scheduler.schedule("bad-1", self.now(scheduler) + timedelta(milliseconds=10))
        scheduler.schedule("good-1", self.now(scheduler) + timedelta(milliseconds=60))
        self.wait_for(scheduler, fire, 2)
        scheduler.schedule("bad-2", self.now(scheduler) + timedelta(milliseconds=10))
        self.wait_for(scheduler, fire, 3)
        scheduler.schedule("good-2", self.now(scheduler) + timedelta(milliseconds=10))
        self.wait_for(scheduler, fire, 4)
        assert fire.ids == ["bad-1", "good-1", "bad-2", "good-2"]
