"""Claims and leases: the runner's side of the core's checkpoints.

Theory of operation. Before each action call the core hands the runner a ``running``
snapshot of the execution (``checkpoint=``). The runner saves it with a compare-and-set, its
``lease_expires_at`` (so its ``due_at``, the store's alarm time) set ``lease`` seconds ahead:

- the first save of a step is its *claim*: a runner that loses it (another one moved the
  execution on first) stops before the action runs, where it used to run the action and
  lose only the final save;
- a start is in the store before its first action runs (the claim creates it);
- a process that dies inside an action leaves a ``running`` record whose alarm is its
  lease expiry: whichever runner fires it after that takes it up (``recover_execution``).

A light claim (``light=True``, over a ``scheduling.abc.ClaimingStore``) is the same first
save without the snapshot: the store sets the row's status, lease and claim time and keeps
its record, the suspended execution the step resumes, and it is taken by the execution id
(``StepCheckpoint.take_by_id``), so the core builds no snapshot for it at all
(``prana._checkpoint``). The step asks for it only when that
record says everything the snapshot would (a retry or a timer: the resume data is ignored;
``scheduling._claims`` holds the rule and the reading back). Later checkpoints of the step
save their snapshots as before (the record has moved on from what the claim stands on).

While a step runs, a keeper thread renews every claim older than a third of the lease (a
save of the same snapshot with a later lease, or the light claim again with the same claim
time), so a long action is not taken for a dead one. A claim lost meanwhile (another runner
recovered it, or it was cancelled) makes the step's next save fail its compare-and-set, and
the step is dropped as any lost one is.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from prana.shell import CheckpointById, check_clock, with_lease
from scheduling._errors import StaleVersionError, StoreError
from scheduling.abc import ClaimingStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from prana import WorkflowExecution
    from scheduling._eventlog import HeldEvents
    from scheduling.abc import ExecutionStore

logger = logging.getLogger("scheduling._runner")

__all__ = ["Claim", "Leases", "StepCheckpoint"]


class Claim:
    """One step's hold on its execution: the version it last saved, under a lock.

    ``version`` is ``None`` until a start's first save creates the record. ``record`` is
    the snapshot last saved (``None`` before the first checkpoint), ``saved_at`` when.
    ``light``: the first checkpoint claims by the columns alone (``Leases``); once it did,
    ``claimed`` holds the execution id and the claim time its renewals repeat. ``held``:
    the step's events, released to the observers after each checkpoint is stored.
    """

    __slots__ = ("claimed", "held", "light", "lock", "record", "saved_at", "version")

    def __init__(self, version: int | None, *, light: bool = False) -> None:
        self.version = version
        self.light = light
        self.held: HeldEvents | None = None
        self.lock = threading.Lock()
        self.record: WorkflowExecution | None = None
        self.saved_at: datetime | None = None
        self.claimed: tuple[str, datetime] | None = None


class StepCheckpoint(CheckpointById):
    """One step's checkpoint callback (``Leases.checkpoint``).

    A light claim is taken by the execution id alone (``take_by_id``): the store writes the
    row's columns, and the core builds no snapshot for it (``prana._checkpoint``: the
    snapshot the claim stands for is rebuilt from the stored record when it is needed,
    ``scheduling._claims``). Every other checkpoint saves the snapshot it is handed.
    """

    __slots__ = ("claim", "commit", "leases")

    def __init__(self, leases: Leases, claim: Claim, commit: Callable[[], None] | None) -> None:
        self.leases = leases
        self.claim = claim
        self.commit = commit

    def take_by_id(self, execution_id: str) -> bool:
        """Claim lightly if this is the step's first checkpoint of a light claim."""
        claim, leases = self.claim, self.leases
        claiming = leases.claiming
        with claim.lock:
            if not claim.light or claiming is None or claim.version is None:
                return False
            claim.light = False  # only the first checkpoint: the record moves on after
            now = leases.clock()
            version = claiming.claim(execution_id, claim.version, now + leases.lease, now)
            claim.version, claim.claimed, claim.saved_at = version, (execution_id, now), now
        self._held()
        return True

    def __call__(self, execution: WorkflowExecution) -> None:
        """Save ``execution`` (a ``running`` snapshot) leased, unless it is taken by id."""
        if self.take_by_id(execution.id):
            return
        claim, leases = self.claim, self.leases
        now = leases.clock()
        with claim.lock:
            record = with_lease(execution, now + leases.lease)
            claim.version = leases.store.save(record, claim.version)
            claim.record, claim.claimed, claim.saved_at = record, None, now
        self._held()

    def _held(self) -> None:
        """After a save: commit the store's group, have the keeper renew the claim, and
        release the step's events (what they report is stored now)."""
        if self.commit is not None:
            self.commit()
        claim = self.claim
        self.leases.renewing(claim)
        if claim.held is not None:
            claim.held.release()


class Leases:
    """Saves checkpoints as leased claims, and renews the claims of steps still running."""

    def __init__(
        self,
        store: ExecutionStore,
        clock: Callable[[], datetime],
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.claiming: ClaimingStore | None = store if isinstance(store, ClaimingStore) else None
        """The store's light claims (``ClaimingStore``), if it offers them."""
        # A clock returning datetime subclasses (pendulum's) is read as plain datetimes, as
        # the core reads it (``check_clock``): the leases and claim times go in records.
        self.clock = check_clock(clock)
        self.lease = timedelta(seconds=lease_seconds)
        self.renew_every = lease_seconds / 3
        self._held: dict[int, Claim] = {}
        self._cond = threading.Condition()
        self._keeper: threading.Thread | None = None

    def checkpoint(self, claim: Claim, commit: Callable[[], None] | None = None) -> StepCheckpoint:
        """The core's ``checkpoint`` callback for one step: save each snapshot on ``claim``.

        ``commit`` is the step's store group's (``scheduling.abc.GroupingStore``): called
        after each save, so the claim is durable before the action it guards runs.
        """
        return StepCheckpoint(self, claim, commit)

    def save(self, claim: Claim, execution: WorkflowExecution) -> int:
        """The step's final save (compare-and-set on the claim's version); ends the claim."""
        try:
            with claim.lock:
                version = self.store.save(execution, claim.version)
                claim.version = version
                claim.record = claim.claimed = None
            return version
        finally:
            self.release(claim)

    # ``_held`` is written without the condition's lock (a dict's item set and pop are
    # atomic): a claim is held and released once per step. The rule that keeps every held
    # claim renewed: ``_hold`` puts the claim in ``_held`` *before* it reads ``_keeper``,
    # and a keeper that finds ``_held`` empty publishes ``_keeper = None`` *before* it looks
    # at ``_held`` again (under the lock, where ``_hold`` starts a keeper): so a claim held
    # meanwhile is either seen by that second look (the keeper goes on) or finds
    # ``_keeper`` None and starts one (``tests/test_shell_fast_paths.py``).
    def release(self, claim: Claim) -> None:
        """Stop renewing ``claim`` (its step ended, saved or not)."""
        self._held.pop(id(claim), None)

    def renewing(self, claim: Claim) -> None:
        """Have the keeper renew ``claim`` from now on (after a checkpoint saved it)."""
        self._hold(claim)

    def _hold(self, claim: Claim) -> None:
        self._held[id(claim)] = claim
        if self._keeper is None:
            with self._cond:
                if self._keeper is None:
                    self._keeper = threading.Thread(
                        target=self._keep, name="prana-leases", daemon=True
                    )
                    self._keeper.start()

    def _keep(self) -> None:
        """Renew the claims held for a third of the lease or more, until none is held."""
        while True:
            with self._cond:
                self._cond.wait(self.renew_every)
                if not self._held:
                    keeper, self._keeper = self._keeper, None
                    if not self._held:  # looked at again once published: see the rule
                        return
                    self._keeper = keeper
                held = list(self._held.values())
            for claim in held:
                self._renew(claim)

    def _renew(self, claim: Claim) -> None:
        now = self.clock()
        with claim.lock:
            record, claimed, saved_at = claim.record, claim.claimed, claim.saved_at
            if saved_at is None or now - saved_at < self.lease / 3 or claim.version is None:
                return
            renewed = None
            try:
                if record is not None:
                    renewed = with_lease(record, now + self.lease)
                    execution_id = record.id
                    claim.version = self.store.save(renewed, claim.version)
                elif claimed is not None and self.claiming is not None:
                    execution_id, claimed_at = claimed
                    claim.version = self.claiming.claim(
                        execution_id, claim.version, now + self.lease, claimed_at
                    )
                else:
                    return
            except StaleVersionError:
                claim.record = claim.claimed = None  # taken over or cancelled: the step's
                logger.warning(  # next save says so
                    "execution %r was taken over while its step still ran (its lease "
                    "ended, or it was cancelled); the step's outcome will be dropped",
                    execution_id,
                )
                return
            except StoreError as error:
                logger.warning("renewing the lease of %r failed: %s", execution_id, error)
                return
            claim.record, claim.saved_at = renewed, now
