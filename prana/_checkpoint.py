"""A checkpoint the shell may take by the execution's id alone (a private seam).

The public ``checkpoint=`` callback receives a ``running`` snapshot before each action call
(``prana._engine``). Building it copies the run's records, state and frontier into a new
``WorkflowExecution``: about a sixth of resuming a due retry or timer. A shell that will not
read a given snapshot passes a ``CheckpointById`` instead: before each action call the engine
first offers ``take_by_id(execution_id)``, and builds the snapshot and calls the checkpoint
with it only when that returns ``False``. ``scheduling``'s light claim is the one user: the
first checkpoint of a step resuming a retry or a timer writes the row's columns by the id,
and the snapshot it stands for is rebuilt on demand by running the core again
(``scheduling._claims``).

Rule, the engine's side: a checkpoint taken by id changes nothing the run keeps, stores or
returns. Building the snapshot does two things to the run: it puts the node's ``running``
record in ``runs``, which settling the call replaces (``Run.record``: the settled record
takes the running one's place, or is added where there was none: the same tuples), and it
reads the clock for the snapshot's own ``updated_at`` (nothing the run keeps; only a test
clock that moves on each reading sees one reading fewer). Observers see no event of a
checkpoint either way. ``tests/test_properties.py`` holds both paths to equal outcomes and
events (a Hypothesis property over random workflows), ``tests/test_claims.py`` the Runner's.

Rule, the shell's side: return ``True`` only for a checkpoint whose effect does not depend
on the snapshot beyond the id (and having had that effect: the run goes on to the action
call as after a checkpoint, and an exception stops the run before it, as one from the
checkpoint does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prana._model import WorkflowExecution

__all__ = ["CheckpointById"]


class CheckpointById:
    """A ``checkpoint`` callback that may be taken by the execution's id, without a snapshot.

    Subclasses define ``__call__`` (the checkpoint with its snapshot, as any callback) and
    ``take_by_id``; the default takes none by id.
    """

    __slots__ = ()

    def __call__(self, execution: WorkflowExecution) -> object:
        """The checkpoint, given the ``running`` snapshot (when ``take_by_id`` declined)."""
        raise NotImplementedError

    def take_by_id(self, execution_id: str) -> bool:
        """Take this checkpoint by the id alone if it needs no more: ``True`` when taken."""
        del execution_id
        return False
