"""The core's seam for the ``scheduling`` package: what a shell needs beyond ``prana``'s API.

For the ``scheduling`` package (and anyone writing a shell of their own around the pure
core): taking up a record whose process died, failing a webhook wait past its deadline,
checking a clock once, the hot-path status constants, what an action call runs inside
(``AROUND_CALL``: a tracer's attempt span), the webhook token check, the
sub-workflow limits' messages. Users of workflows need none of it, so it is not in
``prana.__all__``, and it is **not covered by the user API's stability promise**: names
here may change in any release, together with the ``scheduling`` package that uses them.
``scheduling`` imports the core only through ``prana`` and this module (a test checks).
"""

from __future__ import annotations

from prana._builtins import WAIT_UNITS
from prana._builtins import _wait_resume as wait_resume
from prana._checkpoint import CheckpointById
from prana._drivers import AROUND_CALL
from prana._durations import format_duration, is_aware, to_seconds
from prana._entry import _utcnow as utcnow
from prana._entry import check_clock
from prana._events import emit
from prana._executor import arecover_execution, expire_webhook, recover_execution
from prana._graph import closest_types, compile_workflow
from prana._hooks import delivered, parse_token, used_token
from prana._hooks import verify as verify_token
from prana._limits import sub_workflow_too_deep, sub_workflow_tree_too_big
from prana._model import MAX_WORKFLOW_VERSION, ParentRef, with_lease
from prana._policy import schedule_head
from prana._recovery import check_max_interruptions
from prana._resolve import resolve as resolve_policies
from prana._state import EXEC_RUNNING, EXEC_SUSPENDED, FINAL

__all__ = [
    "AROUND_CALL",
    "CheckpointById",
    "EXEC_RUNNING",
    "EXEC_SUSPENDED",
    "FINAL",
    "MAX_WORKFLOW_VERSION",
    "ParentRef",
    "WAIT_UNITS",
    "arecover_execution",
    "check_clock",
    "check_max_interruptions",
    "closest_types",
    "compile_workflow",
    "delivered",
    "emit",
    "expire_webhook",
    "format_duration",
    "is_aware",
    "parse_token",
    "recover_execution",
    "resolve_policies",
    "schedule_head",
    "sub_workflow_too_deep",
    "sub_workflow_tree_too_big",
    "to_seconds",
    "used_token",
    "utcnow",
    "verify_token",
    "wait_resume",
    "with_lease",
]
