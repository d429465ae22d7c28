"""A record holding every kind of node run and attempt."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from prana import (
    Activation,
    AttemptOutcome,
    AttemptRecord,
    ErrorInfo,
    ExecutionStatus,
    NodeExecution,
    NodeStatus,
    RetryData,
    Suspend,
    WorkflowExecution,
)
from prana.shell import ParentRef

T0 = datetime(2030, 1, 1, 12, 0, 0, 250_000, tzinfo=timezone.utc)
PLUS2 = timezone(timedelta(hours=2))


def at(ms: int) -> datetime:
    """``T0`` plus ``ms`` milliseconds."""
    return T0 + timedelta(milliseconds=ms)


def rich_execution() -> WorkflowExecution:
    """Runs completed, failed, retried, redriven, looped, suspended; one non-UTC time."""
    boom = ErrorInfo(
        code="action_error",
        type="ConnectionError",
        module="builtins",
        message="down",
        details={"status": 503},
        node_key="flaky",
    )
    runs = {
        "start": (
            NodeExecution(
                node_key="start",
                status=NodeStatus.COMPLETED,
                execution_index=0,
                run_index=0,
                started_at=T0,
                completed_at=T0,
                params={},
                output={"in": [1, 2]},
                output_port="main",
                attempts=(
                    AttemptRecord(
                        number=1, started_at=T0, ended_at=T0, outcome=AttemptOutcome.COMPLETED
                    ),
                ),
            ),
        ),
        "flaky": (
            NodeExecution(
                node_key="flaky",
                status=NodeStatus.COMPLETED,
                execution_index=1,
                run_index=0,
                started_at=at(1),
                completed_at=at(2_513),
                params={"url": "https://example.com"},
                output="ok",
                output_port="main",
                attempts=(
                    AttemptRecord(
                        number=1,
                        started_at=at(1),
                        ended_at=at(13),
                        outcome=AttemptOutcome.FAILED,
                        error=boom,
                        retry_delay_ms=1_000,
                    ),
                    AttemptRecord(
                        number=2,
                        started_at=at(1_020),
                        ended_at=at(1_021),
                        outcome=AttemptOutcome.INTERRUPTED,
                        due_at=at(1_013),
                    ),
                    AttemptRecord(
                        number=1,
                        started_at=at(2_500),
                        ended_at=at(2_513),
                        outcome=AttemptOutcome.COMPLETED,
                        due_at=at(2_400),
                        redrive=True,
                    ),
                ),
            ),
        ),
        "loop": tuple(
            NodeExecution(
                node_key="loop",
                status=NodeStatus.FAILED if i == 1 else NodeStatus.COMPLETED,
                execution_index=2 + i,
                run_index=i,
                started_at=at(3_000 + i).astimezone(PLUS2) if i == 1 else at(3_000 + i),
                completed_at=at(3_000 + i) if i == 0 else at(3_000 + i).astimezone(PLUS2),
                params=None,
                output=None if i == 1 else [i],
                output_port=None if i == 1 else "true",
                error=boom if i == 1 else None,
                attempts=(
                    AttemptRecord(
                        number=1,
                        started_at=at(3_000 + i),
                        ended_at=at(3_000 + i),
                        outcome=AttemptOutcome.FAILED if i == 1 else AttemptOutcome.COMPLETED,
                        error=boom if i == 1 else None,
                    ),
                ),
            )
            for i in range(2)
        ),
        "wait": (
            NodeExecution(
                node_key="wait",
                status=NodeStatus.SUSPENDED,
                execution_index=4,
                run_index=0,
                started_at=at(4_000),
                params={"mode": "retry"},
                attempts=(
                    AttemptRecord(
                        number=1,
                        started_at=at(4_000),
                        ended_at=at(4_001),
                        outcome=AttemptOutcome.FAILED,
                        error=boom,
                        retry_delay_ms=500,
                    ),
                    AttemptRecord(number=2, started_at=at(4_600), due_at=at(4_501)),
                ),
            ),
        ),
    }
    return WorkflowExecution(
        id="rich",
        workflow_id="wf",
        workflow_version=3,
        status=ExecutionStatus.SUSPENDED,
        input={"x": 1},
        node_executions=runs,
        state={"seen": 2},
        pending=(Activation(node_key="after", seq=7, sources={"main": ("loop", "true", 3)}),),
        next_index=5,
        suspended_node="wait",
        suspension=Suspend(
            "retry",
            RetryData(
                retry_delay_ms=500,
                attempt_number=2,
                max_attempts=3,
                original_error=boom,
                resume_at=at(4_501),
            ),
        ),
        parent=ParentRef(execution_id="parent", node_key="call"),
        started_at=T0,
        updated_at=at(4_600),
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        kept_size=321,
    )
