"""The workflow definitions a runner has stored or loaded, by id and version.

A definition never changes for a given id and version, so once read it is kept for the
life of the runner: a busy runner reads each definition from its store once.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from prana import InvalidSettingsError, Workflow
from prana.shell import MAX_WORKFLOW_VERSION
from scheduling._errors import WorkflowConflictError, WorkflowNotFound

if TYPE_CHECKING:
    from scheduling.abc import ExecutionStore

__all__ = ["Definitions"]


class Definitions:
    """The definitions cache of one runner, in front of its store.

    ``cached`` maps (id, version) to the definition: a hot path may read it directly (a
    dict lookup, no lock) and call ``get`` on a miss. Writes take a lock, so the highest
    version known per id stays consistent.
    """

    __slots__ = ("_latest", "_lock", "_store", "cached")

    def __init__(self, store: ExecutionStore) -> None:
        self._store = store
        self.cached: dict[tuple[str, int], Workflow] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()

    def register(self, workflow: Workflow) -> None:
        """Store ``workflow``; a different definition under a known id and version is refused.

        Raises ``WorkflowConflictError`` for the conflict (here, or from the store).
        """
        if not isinstance(workflow, Workflow):
            raise InvalidSettingsError(f"register_workflow({workflow!r}): pass a prana.Workflow")
        key = (workflow.id, workflow.version)
        cached = self.cached.get(key)
        if cached is not None:
            if cached is workflow or cached == workflow:
                return
            raise WorkflowConflictError(
                f"workflow {workflow.id!r} version {workflow.version} is already stored with a "
                "different definition; a definition never changes for a given id and version: "
                "bump Workflow.version"
            )
        self._store.save_workflow(workflow)
        self._keep(key, workflow)

    def get(self, workflow_id: str, version: int) -> Workflow:
        """The definition of ``workflow_id`` at ``version``, from here or from the store."""
        key = (workflow_id, version)
        cached = self.cached.get(key)
        if cached is not None:
            return cached
        if version > MAX_WORKFLOW_VERSION:  # none is stored; a store's column cannot hold it
            raise WorkflowNotFound(
                f"no workflow {workflow_id!r} version {version} is stored: versions run from "
                f"1 to {MAX_WORKFLOW_VERSION}"
            )
        workflow = self._store.load_workflow(workflow_id, version)
        self._keep(key, workflow)
        return workflow

    def latest(self, workflow_id: str) -> Workflow:
        """The highest version of ``workflow_id`` known here or stored.

        Raises ``WorkflowNotFound`` when no version is stored.
        """
        known = self._latest.get(workflow_id, 0)
        stored = self._store.latest_workflow_version(workflow_id) or 0
        version = max(known, stored)
        if not version:
            raise WorkflowNotFound(
                f"no definition of workflow {workflow_id!r} is stored; register it with "
                "runner.register_workflow(workflow) (or Runner(workflows=[...])) first"
            )
        return self.get(workflow_id, version)

    def _keep(self, key: tuple[str, int], workflow: Workflow) -> None:
        workflow_id, version = key
        with self._lock:
            self.cached[key] = workflow
            if version > self._latest.get(workflow_id, 0):
                self._latest[workflow_id] = version
