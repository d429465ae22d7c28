"""``prana schedule add|list|show|pause|resume|delete|trigger``: start workflows on a calendar.

The schedules live in the store; a worker (``prana worker``) fires their slots, catching up
what it missed when it starts and picking up schedules added here at each re-arm round.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from scheduling._cli._common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    CLIError,
    load_actions,
    make_runner,
    open_store,
    parse_json,
)

if TYPE_CHECKING:
    import argparse

    from scheduling._cli._common import AddCommand
    from scheduling._schedule_runs import StoredSchedule


class NoSuchScheduleError(CLIError, LookupError):
    """No stored schedule has the id given; exit code 4."""

    exit_code = EXIT_NOT_FOUND


ACTIONS = ("add", "list", "show", "pause", "resume", "delete", "trigger")


def register(add: AddCommand) -> None:
    """Add ``schedule`` to the parser."""
    cmd = add("schedule", "start a workflow on a calendar: add, list, show, pause, resume, ...")
    cmd.add_argument("action", choices=ACTIONS, help="what to do")
    cmd.add_argument("id", nargs="?", help="the schedule id (all but list)")
    cmd.add_argument("--workflow", help="add: the workflow id to start")
    cmd.add_argument("--version", default="latest", help="add: its version (default latest)")
    when = cmd.add_mutually_exclusive_group()
    when.add_argument("--cron", help="add: a cron expression, e.g. '0 * * * *'")
    when.add_argument("--every", help="add: a fixed interval, e.g. 1h or 900")
    when.add_argument("--at", action="append", help="add: a one-off ISO instant (repeatable)")
    cmd.add_argument("--timezone", default="UTC", help="add: the cron's IANA time zone")
    cmd.add_argument("--input", default="null", help="add: the workflow input, as JSON")
    cmd.add_argument("--jitter", default="0", help="add: delay each slot by up to this")
    cmd.add_argument("--catch-up", default="last", choices=("skip", "last", "all"))
    cmd.add_argument("--catch-up-limit", type=int, default=10)
    cmd.add_argument(
        "--overlap", default="skip", choices=("skip", "buffer_one", "allow_all", "cancel_older")
    )
    cmd.add_argument("--replace", action="store_true", help="add: change a stored schedule")
    cmd.add_argument("--actions", help="trigger: module (or .py file) registering your actions")
    cmd.add_argument("--json", action="store_true", help="print JSON")
    cmd.set_defaults(handler=_cmd_schedule)


def _schedule_from(args: argparse.Namespace) -> Any:
    from datetime import datetime

    from prana import InvalidSettingsError
    from scheduling._schedules import At, Cron, Every, Schedule

    if not args.workflow:
        raise CLIError("schedule add: give --workflow ID")
    version: Any = args.version
    if version != "latest":
        if not version.isdigit():
            raise CLIError(f"--version {version!r}: use a whole number >= 1, or latest")
        version = int(version)
    try:
        if args.cron:
            calendar: Any = Cron(args.cron, args.timezone)
        elif args.every:
            calendar = Every(args.every)
        elif args.at:
            calendar = At([datetime.fromisoformat(t) for t in args.at])
        else:
            raise CLIError("schedule add: give --cron, --every or --at")
        return Schedule(
            args.id,
            args.workflow,
            calendar,
            version=version,
            input=parse_json(args.input, "--input"),
            jitter=args.jitter,
            catch_up=args.catch_up,
            catch_up_limit=args.catch_up_limit,
            overlap=args.overlap,
        )
    except (InvalidSettingsError, ValueError) as error:
        if isinstance(error, CLIError):
            raise
        raise CLIError(f"schedule add: {error}") from None


def _doc(stored: StoredSchedule) -> dict[str, Any]:
    from scheduling._schedules import schedule_to_dict

    return {
        **schedule_to_dict(stored.schedule),
        "next": [t.isoformat() for t in stored.next],
        "recent": list(stored.state.recent),
        "buffered": None if stored.state.buffered is None else stored.state.buffered.isoformat(),
    }


def _line(stored: StoredSchedule) -> str:
    from scheduling._schedules import calendar_to_dict

    s = stored.schedule
    calendar = " ".join(f"{k}={v}" for k, v in calendar_to_dict(s.calendar).items() if v)
    state = (
        "paused" if s.paused else (f"next {stored.next[0].isoformat()}" if stored.next else "ended")
    )
    return f"{s.id}  {s.workflow_id}@{s.version}  {calendar}  {state}"


def _cmd_schedule(args: argparse.Namespace) -> int:
    from prana import Registry
    from scheduling._errors import StaleVersionError
    from scheduling._schedule_runs import ScheduleNotFound

    if args.action != "list" and not args.id:
        raise CLIError(f"schedule {args.action}: give the schedule id")
    registry = load_actions(args.actions) if args.action == "trigger" else Registry()
    store = open_store(args, must_exist=args.action != "add")
    try:
        runner = make_runner(registry, store, None)
        try:
            if args.action == "trigger":
                with runner:  # the first step runs here, as `prana run` runs it
                    return _act(args, runner.schedules)
            return _act(args, runner.schedules)
        except ScheduleNotFound as error:
            raise NoSuchScheduleError(str(error)) from None
        except StaleVersionError as error:
            raise CLIError(f"schedule {args.action}: {error}") from None
    finally:
        store.close()


def _act(args: argparse.Namespace, schedules: Any) -> int:
    action = args.action
    if action == "add":
        schedule = _schedule_from(args)
        schedules.add(schedule, replace=args.replace)
        stored = schedules.get(schedule.id)
        print(json.dumps(_doc(stored), indent=2) if args.json else f"added {_line(stored)}")
    elif action == "list":
        rows = schedules.list()
        if args.json:
            print(json.dumps({"schedules": [_doc(r) for r in rows]}, indent=2))
        else:
            print("\n".join(_line(r) for r in rows) if rows else "no schedules")
    elif action == "show":
        stored = schedules.get(args.id, count=5)
        if args.json:
            print(json.dumps(_doc(stored), indent=2))
        else:
            print(_line(stored))
            for t in stored.next:
                print(f"  next {t.isoformat()}")
            for execution_id in stored.state.recent[-5:]:
                print(f"  ran  {execution_id}")
    elif action in ("pause", "resume"):
        getattr(schedules, action)(args.id)
        stored = schedules.get(args.id)
        print(json.dumps(_doc(stored), indent=2) if args.json else f"{action}d {_line(stored)}")
    elif action == "delete":
        schedules.delete(args.id)
        print(json.dumps({"deleted": args.id}) if args.json else f"deleted {args.id}")
    else:
        execution_id = schedules.trigger(args.id)
        print(json.dumps({"execution_id": execution_id}) if args.json else execution_id)
    return EXIT_OK
