"""The plumbing every store shares: workflow definitions, saved once and parsed once.

Like APScheduler 4's ``datastores/base.py``: the rules live here, a store only moves rows.
A definition never changes for a given id and version, so what was saved or parsed is
kept for the life of the store: saving the same definition again costs no round trip,
and each stored one is parsed once.
"""

from __future__ import annotations

from typing import Any

import orjson

from prana import InvalidSettingsError, Workflow, dumps_workflow, loads_workflow
from scheduling._errors import WorkflowConflictError, WorkflowNotFound
from scheduling.stores._sql import read_record

__all__ = ["BaseStore"]


class BaseStore:
    """``save_workflow`` and ``load_workflow`` with their caches, over two row operations.

    A store subclasses it, calls ``super().__init__()``, and writes
    ``_insert_workflow(key, text)`` (store the text unless the key is taken, atomically;
    return ``None`` if it stored it, else the text already stored) and
    ``_select_workflow(key)`` (the stored text, or ``None``). ``key`` is
    ``(workflow_id, version)``.
    """

    def __init__(self) -> None:
        self._workflow_cache: dict[tuple[str, int], Workflow] = {}
        self._workflows_saved: dict[tuple[str, int], str] = {}

    def save_workflow(self, workflow: Workflow) -> None:
        """Keep a definition; the same one again is a no-op, a different one is refused."""
        text = dump_workflow(workflow)
        key = (workflow.id, workflow.version)
        if self._workflows_saved.get(key) == text:
            return
        stored = self._insert_workflow(key, text)
        if stored is not None and not same_definition(stored, text):
            raise WorkflowConflictError(conflict_message(*key))
        self._workflows_saved[key] = text

    def load_workflow(self, workflow_id: str, version: int) -> Workflow:
        """The stored definition; ``WorkflowNotFound`` if there is none.

        Definitions never change for an id and version, so each is parsed once and cached.
        """
        key = (workflow_id, version)
        cached = self._workflow_cache.get(key)
        if cached is not None:
            return cached
        text = self._select_workflow(key)
        if text is None:
            raise WorkflowNotFound(not_found_message(workflow_id, version))
        workflow = read_workflow(workflow_id, version, text)
        self._workflow_cache[key] = workflow
        return workflow

    def list_workflows(self) -> list[tuple[str, int]]:
        """Every stored definition's ``(workflow_id, version)``, sorted."""
        raise NotImplementedError

    def _forget_workflows(self) -> None:
        """Drop both caches (the stored definitions were dropped)."""
        self._workflow_cache.clear()
        self._workflows_saved.clear()

    def _insert_workflow(self, key: tuple[str, int], text: str) -> str | bytes | None:
        raise NotImplementedError

    def _select_workflow(self, key: tuple[str, int]) -> str | bytes | None:
        raise NotImplementedError


def read_workflow(workflow_id: str, version: int, text: Any) -> Workflow:
    """Parse a stored definition; an unreadable one raises ``RecordError`` naming id and version."""
    return read_record(f"stored workflow {workflow_id!r} version {version}", loads_workflow, text)


def same_definition(stored_text: str | bytes, new_text: str) -> bool:
    """Whether two serialized definitions hold the same data (key order does not matter)."""
    if stored_text == new_text:
        return True
    try:
        return bool(orjson.loads(stored_text) == orjson.loads(new_text))
    except orjson.JSONDecodeError:
        return False


def dump_workflow(workflow: Any) -> str:
    """Serialize a definition, refusing anything that is not a ``prana.Workflow``."""
    if not isinstance(workflow, Workflow):
        raise InvalidSettingsError(
            f"save_workflow(workflow={type(workflow).__name__}): pass a prana.Workflow"
        )
    return dumps_workflow(workflow)


def conflict_message(workflow_id: str, version: int) -> str:
    """The message of ``WorkflowConflictError``."""
    return (
        f"workflow {workflow_id!r} version {version} is already stored with a different "
        "definition; a definition never changes for a given id and version: bump "
        "Workflow.version"
    )


def not_found_message(workflow_id: str, version: int) -> str:
    """The message of ``WorkflowNotFound``."""
    return (
        f"no workflow {workflow_id!r} version {version} is stored; save it with "
        "save_workflow() (Runner.start does) before resuming its executions"
    )


LOADED_RECORD_BYTES = 64 * 1024
"""A record this small is loaded to check a resume token, not read from its tail
(``webhook_wait``): a forged token costs at most a parse of this much, and a repeated
delivery of a used token is told from another (``Runner.deliver_hook``)."""
WAIT_TAIL_BYTES = 16 * 1024
"""How much of a stored record's end ``webhook_wait_in_tail`` reads."""
_TAIL_KEYS = (
    "suspended_node",
    "suspension",
    "output",
    "error",
    "parent",
    "started_at",
    "updated_at",
    "completed_at",
    "trace_context",
    "lease_expires_at",
    "kept_size",
)
"""The fields a record's text (``prana.dumps``) ends with, in the order it writes them."""


def webhook_wait_in_tail(tail: bytes) -> tuple[str, str | None] | None:
    """``(suspended node, token digest)`` of the record whose text ends with ``tail``, the
    digest ``None`` when it waits for no webhook; ``None`` when the tail does not tell
    (then load the record). Read without decoding the record: a forged resume token is
    refused without the cost of parsing the largest record the limits allow.

    The last ``,"suspended_node":`` is the record's own (a string's quotes are escaped; a
    key in a later field would not leave exactly ``_TAIL_KEYS`` up to the text's end).
    """
    text = tail.decode("utf-8", "replace")
    at = text.rfind(',"suspended_node":')
    if at < 0 or not text.endswith("}}"):
        return None
    try:
        fields = orjson.loads("{" + text[at + 1 : -1])
    except orjson.JSONDecodeError:
        return None
    if type(fields) is not dict or tuple(fields) != _TAIL_KEYS:
        return None
    node, suspension = fields["suspended_node"], fields["suspension"]
    if type(node) is not str or type(suspension) is not dict:
        return ("", None) if suspension is None else None
    data = suspension.get("data")
    digest = data.get("token_digest") if type(data) is dict else None
    if suspension.get("kind") != "webhook" or type(digest) is not str:
        return node, None
    return node, digest
