"""``prana list`` and ``prana show``: read executions from the store, as text or JSON."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from prana import ExecutionStatus
from scheduling._cli._common import EXIT_OK, CLIError, open_store, resolve_id
from scheduling._cli._json import LIST_FORMAT, execution_json, summary_json, unreadable_json
from scheduling._console import printable
from scheduling._listing import Failure, read_page
from scheduling.abc import UnreadableRow
from scheduling.stores._sql import MAX_LIMIT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scheduling._cli._common import AddCommand
    from scheduling.abc import ExecutionSummary


def register(add: AddCommand) -> None:
    """Add ``list`` and ``show`` to the parser."""
    listing = add("list", "list executions, newest first")
    listing.add_argument(
        "--status",
        help=f"only executions with this status: {', '.join(s.value for s in ExecutionStatus)}",
    )
    listing.add_argument("--workflow", help="only executions of this workflow id")
    listing.add_argument(
        "--code",
        metavar="ERROR_CODE",
        help="only failed executions whose error has this code (action_error, timeout, ...)",
    )
    listing.add_argument(
        "--after",
        metavar="ID",
        help="the next page: executions created before this one (the last id of the previous "
        "page, or a unique prefix as printed)",
    )
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.add_argument(
        "--json", action="store_true", help="print JSON (stable field names, see the docs)"
    )
    listing.set_defaults(handler=_cmd_list)

    show = add("show", "show an execution's timeline: nodes, attempts, errors, delays, lateness")
    show.add_argument("id", help="the execution id, or a unique prefix as the console prints it")
    show.add_argument(
        "--json", action="store_true", help="print JSON (stable field names, see the docs)"
    )
    show.set_defaults(handler=_cmd_show)


def _cmd_list(args: argparse.Namespace) -> int:
    store = open_store(args, must_exist=True)
    try:
        status = None
        if args.status is not None:
            try:
                status = ExecutionStatus(args.status)
            except ValueError:
                choices = ", ".join(s.value for s in ExecutionStatus)
                raise CLIError(f"--status {args.status}: use one of {choices}") from None
        after = resolve_id(store, args.after) if args.after is not None else None
        # One row past the page says whether another page follows (a limit out of range
        # is asked for as given, so the store refuses it with its own message).
        limit: int = args.limit
        if args.code is not None and status not in (None, ExecutionStatus.FAILED):
            raise CLIError(f"--code {args.code}: only failed executions have an error code")
        page = read_page(
            store,
            status,
            limit=limit,
            workflow=args.workflow,
            after=after,
            code=args.code,
            probe=1 <= limit < MAX_LIMIT,
            waits=False,
        )
        for problem in page.problems:
            print(f"prana: warning: {printable(problem)}; listed as unreadable", file=sys.stderr)
        rows, failures, next_after = page.rows, page.failures, page.next_after
        if args.code is not None:
            status = ExecutionStatus.FAILED
    finally:
        store.close()
    if args.json:
        executions = [
            unreadable_json(row)
            if isinstance(row, UnreadableRow)
            else summary_json(row, failures.get(row.id))
            for row in rows
        ]
        listed = {"format": LIST_FORMAT, "executions": executions, "next_after": next_after}
        print(json.dumps(listed, indent=2))
        return EXIT_OK
    if not rows:
        print("no executions")
        return EXIT_OK
    if status is ExecutionStatus.FAILED:
        _print_dead_letters(rows, failures)
    else:
        _print_table(rows)
    if next_after is not None:
        print(f"more: the next page is --after {printable(shlex.quote(next_after))}")
    return EXIT_OK


def _print_dead_letters(
    rows: Sequence[ExecutionSummary | UnreadableRow], failures: dict[str, Failure]
) -> None:
    """The dead-letter view: where each failed execution failed, why, and after how many tries."""
    from scheduling._console import printable, short_id

    header = ("id", "workflow", "node", "error", "attempts", "failed at (UTC)")
    cells = []
    for row in rows:
        if isinstance(row, UnreadableRow):  # its status is unreadable, so rarely "failed"
            cells.append(_unreadable_cells(row, len(header)))
            continue
        failure = failures.get(row.id)
        cells.append(
            (
                printable(short_id(row.id)),
                printable(f"{row.workflow_id} v{row.workflow_version}"),
                printable(failure.node or "-") if failure else "-",
                printable(failure.code or "-") if failure else "-",
                str(failure.attempts) if failure else "-",
                _when(failure.failed_at) if failure else "-",
            )
        )
    _table(header, cells, flexible=(1, 2), times=(5,))


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _print_table(rows: Sequence[ExecutionSummary | UnreadableRow]) -> None:
    """A table that fits the terminal: short ids (any unique prefix works), compact times."""
    from scheduling._console import printable, short_id

    header = ("id", "workflow", "status", "due (UTC)", "updated (UTC)")
    cells = [
        _unreadable_cells(row, len(header))
        if isinstance(row, UnreadableRow)
        else (
            printable(short_id(row.id)),
            printable(f"{row.workflow_id} v{row.workflow_version}"),
            row.status.value,
            _when(row.due_at),
            _when(row.updated_at),
        )
        for row in rows
    ]
    _table(header, cells, flexible=(1,), times=(3, 4))


def _unreadable_cells(row: UnreadableRow, width: int) -> tuple[str, ...]:
    """A row the store could not read: its id, ``?`` for the workflow, ``unreadable``."""
    from scheduling._console import printable, short_id

    return (printable(short_id(row.id)), "?", "unreadable", *("-",) * (width - 3))


GAP = 2
"""Spaces between two columns of a table."""
MIN_FLEXIBLE = 6
"""The narrowest a name column is cut to (5 characters and an ellipsis)."""


def _table(
    header: tuple[str, ...],
    cells: Sequence[tuple[str, ...]],
    *,
    flexible: tuple[int, ...] = (),
    times: tuple[int, ...] = (),
) -> None:
    """Print ``cells`` under ``header``, one line per row (no markup read from the data).

    On a terminal (or with ``COLUMNS`` set) the table fits its width: when it would not,
    ``times`` columns drop their seconds, then the ``flexible`` columns (names) share what
    is left, each cut with an ellipsis; ids, codes and numbers are never cut. Piped without
    ``COLUMNS``, nothing is cut.
    """
    width = _terminal_width()
    rows = [header, *cells]
    if width is not None:
        rows = _fit(rows, width, flexible, times)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:  # pragma: no cover - rich ships with the cli extra
        for line in rows:
            print((" " * GAP).join(t.ljust(w) for t, w in zip(line, widths, strict=True)).rstrip())
        return
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, GAP // 2))
    for name, column_width in zip(rows[0], widths, strict=True):
        table.add_column(name, no_wrap=True, min_width=column_width)
    for line in rows[1:]:
        table.add_row(*(Text(cell) for cell in line))  # Text: no markup read from the data
    total = sum(widths) + GAP * (len(widths) - 1)
    Console(soft_wrap=False, highlight=False, width=max(total, width or 0)).print(table)


def _terminal_width() -> int | None:
    """The terminal's columns (``COLUMNS`` first), or ``None`` when piped without it."""
    import os
    import shutil

    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty():
        return max(shutil.get_terminal_size().columns, 20)
    return None


def _fit(
    rows: list[tuple[str, ...]], width: int, flexible: tuple[int, ...], times: tuple[int, ...]
) -> list[tuple[str, ...]]:
    """``rows`` (the header first) cut to ``width`` columns as ``_table`` says."""

    def needed(table: list[tuple[str, ...]]) -> int:
        count = len(table[0])
        return sum(max(len(r[i]) for r in table) for i in range(count)) + GAP * (count - 1)

    if needed(rows) <= width:
        return rows
    rows = [rows[0], *(_minutes(row, times) for row in rows[1:])]
    fixed = sum(
        max(len(r[i]) for r in rows) for i in range(len(rows[0])) if i not in flexible
    ) + GAP * (len(rows[0]) - 1)
    natural = {i: max(len(r[i]) for r in rows) for i in flexible}
    share = _water_fill(natural, max(width - fixed, 0))
    return [
        tuple(_cut(cell, share[i]) if i in share else cell for i, cell in enumerate(row))
        for row in rows
    ]


def _minutes(row: tuple[str, ...], times: tuple[int, ...]) -> tuple[str, ...]:
    """``row`` with the ``YYYY-MM-DD HH:MM:SS`` cells of ``times`` cut to the minute."""
    return tuple(
        cell[:16] if i in times and len(cell) == 19 else cell for i, cell in enumerate(row)
    )


def _water_fill(natural: dict[int, int], room: int) -> dict[int, int]:
    """Widths for the columns ``natural`` within ``room``: a column narrower than an equal
    share keeps its width and leaves the rest to the others; none below ``MIN_FLEXIBLE``."""
    share: dict[int, int] = {}
    left = dict(natural)
    while left:
        each = room // len(left)
        small = {i: w for i, w in left.items() if w <= each}
        if not small:
            for n, i in enumerate(sorted(left)):
                share[i] = max(each + (1 if n < room - each * len(left) else 0), MIN_FLEXIBLE)
            break
        for i, w in small.items():
            share[i] = w
            room -= w
            del left[i]
    return share


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its end replaced by ``…`` when cut; a
    workflow's `` vN`` stays when there is room for a name before it (v1 and v2 differ)."""
    if len(text) <= width:
        return text
    name, space, version = text.rpartition(" v")
    kept = f"{space}{version}"
    if name and version.isdigit() and width - len(kept) >= MIN_FLEXIBLE:
        return name[: width - len(kept) - 1] + "…" + kept
    return text[: width - 1] + "…"


def _cmd_show(args: argparse.Namespace) -> int:
    from scheduling._console import format_timeline

    store = open_store(args, must_exist=True)
    try:
        execution, version = store.load(resolve_id(store, args.id))
    finally:
        store.close()
    if args.json:
        print(json.dumps(execution_json(execution, version), indent=2))
        return EXIT_OK
    print(format_timeline(execution, datetime.now(timezone.utc)))
    print(f"  (record version {version})")
    return EXIT_OK
