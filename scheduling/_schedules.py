"""Schedules: start a workflow on a calendar, at most once per slot, as pure data and math.

A ``Schedule`` names a workflow, its input and a calendar (``Cron``, ``Every`` or ``At``).
A *slot* is one instant the calendar names (UTC); the execution a slot starts has the id
``slot_execution_id(schedule, slot)``, so however many runners tick the schedule, the
store refuses every start of a slot but the first. Everything here is pure: the instants
come from the caller's clock, which makes DST, downtime and overlap testable by hand.

Cron expressions are read by APScheduler 3's ``CronTrigger`` (already a dependency), never
by a parser of ours; DST is handled as it handles it: a wall time skipped by spring-forward
fires an hour later (``30 2 * * *`` fires at 03:30 that day), a wall time repeated by
fall-back fires twice (once in each offset).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from prana import InvalidSettingsError
from prana.shell import is_aware, to_seconds

__all__ = [
    "At",
    "CatchUp",
    "Cron",
    "Every",
    "Overlap",
    "Schedule",
    "ScheduleState",
    "next_slots",
    "plan_slots",
    "slot_execution_id",
    "slots_between",
]

CatchUp = Literal["skip", "last", "all"]
Overlap = Literal["skip", "buffer_one", "allow_all", "cancel_older"]
CATCH_UPS: tuple[str, ...] = ("skip", "last", "all")
OVERLAPS: tuple[str, ...] = ("skip", "buffer_one", "allow_all", "cancel_older")
MAX_SLOTS = 10_000
"""The most slots one call computes: a stored calendar cannot make a tick allocate unbounded."""
ID_PREFIX = "sched:"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_TICK = timedelta(microseconds=1)


def _settings_error(field: str, value: object, fix: str) -> InvalidSettingsError:
    return InvalidSettingsError(f"{field}={value!r}: {fix}")


def _utc(value: object, field: str) -> datetime:
    if not is_aware(value):
        raise _settings_error(field, value, "use a timezone-aware datetime (e.g. tzinfo=UTC)")
    return value.astimezone(timezone.utc)


def _optional_utc(value: object, field: str) -> datetime | None:
    return None if value is None else _utc(value, field)


def _anchor(value: object) -> datetime | None:
    return _optional_utc(value, "Every(anchor)")


def _start(value: object) -> datetime | None:
    return _optional_utc(value, "Schedule(start)")


def _end(value: object) -> datetime | None:
    return _optional_utc(value, "Schedule(end)")


def _interval(value: object) -> timedelta:
    seconds = to_seconds(value, field="Every(interval)")
    if seconds < 1:
        raise _settings_error("Every(interval)", value, "use at least one second")
    return timedelta(seconds=seconds)


def _times(value: object) -> tuple[datetime, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _settings_error("At(times)", value, "use a list of timezone-aware datetimes")
    if len(value) > MAX_SLOTS:
        raise _settings_error("At(times)", f"<{len(value)} times>", f"use at most {MAX_SLOTS}")
    return tuple(sorted({_utc(t, "At(times)") for t in value}))


@attrs.frozen
class Cron:
    """A cron expression (five fields, as crontab) read in ``timezone`` (an IANA name)."""

    expression: str
    timezone: str = "UTC"
    _trigger: Any = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        from apscheduler.triggers.cron import CronTrigger

        if not isinstance(self.timezone, str):
            raise _settings_error("Cron(timezone)", self.timezone, "use an IANA name like 'UTC'")
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise _settings_error(
                "Cron(timezone)", self.timezone, "use an IANA name like 'Europe/Berlin' or 'UTC'"
            ) from None
        if not isinstance(self.expression, str) or len(self.expression) > 200:
            raise _settings_error("Cron(expression)", self.expression, "use text like '0 * * * *'")
        try:
            trigger = CronTrigger.from_crontab(self.expression, timezone=zone)
        except ValueError as error:
            raise _settings_error(
                "Cron(expression)",
                self.expression,
                f"use five fields 'minute hour day month weekday' like '0 * * * *' ({error})",
            ) from None
        object.__setattr__(self, "_trigger", trigger)

    def first_after(self, after: datetime) -> datetime | None:
        """The first slot strictly after ``after`` (UTC), or ``None`` if there is none."""
        # Stepping in UTC: stepping in local time repeats a slot on fall-back in APScheduler 3.
        found = self._trigger.get_next_fire_time(None, after + _TICK)
        return None if found is None else found.astimezone(timezone.utc)


@attrs.frozen
class Every:
    """A fixed interval from ``anchor`` (default: the Unix epoch), in seconds or ``"1h"``."""

    interval: timedelta = attrs.field(converter=_interval)
    anchor: datetime | None = attrs.field(default=None, converter=_anchor)

    def first_after(self, after: datetime) -> datetime | None:
        anchor = self.anchor or _EPOCH
        if after < anchor:
            return anchor
        steps = (after - anchor) // self.interval + 1
        return anchor + steps * self.interval


@attrs.frozen
class At:
    """One-off instants: each is one slot."""

    times: tuple[datetime, ...] = attrs.field(converter=_times)

    def first_after(self, after: datetime) -> datetime | None:
        return next((t for t in self.times if t > after), None)


Calendar = Cron | Every | At


def _check_id(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable():
        raise _settings_error(
            f"Schedule({attribute.name})", value, "use non-empty printable text, at most 200 chars"
        )


def _check_version(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value == "latest":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _settings_error("Schedule(version)", value, "use a whole number >= 1 or 'latest'")


def _check_calendar(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, (Cron, Every, At)):
        raise _settings_error(
            "Schedule(calendar)", value, "use Cron('0 * * * *'), Every('1h') or At([...])"
        )


def _one_of(choices: tuple[str, ...]) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in choices:
            raise _settings_error(
                f"Schedule({attribute.name})", value, f"use one of {', '.join(choices)}"
            )

    return check


def _jitter(value: object) -> timedelta:
    seconds = to_seconds(value, field="Schedule(jitter)")
    if seconds < 0:
        raise _settings_error("Schedule(jitter)", value, "use zero or more seconds")
    return timedelta(seconds=seconds)


def _limit(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise _settings_error("Schedule(catch_up_limit)", value, "use a whole number 1..1000")


@attrs.frozen
class Schedule:
    """Start ``workflow_id`` with ``input`` at each slot of ``calendar``.

    Defaults, and why: ``version="latest"`` (a schedule follows deployed fixes);
    ``catch_up="last"`` (after downtime one run for the newest missed slot: a report wants
    fresh data, not a burst of stale copies; ``"all"`` runs up to ``catch_up_limit`` of the
    newest missed slots, oldest first; ``"skip"`` runs none); ``overlap="skip"`` (Temporal's
    default: a slot due while the previous run still runs is skipped, never piled up);
    ``grace=60s`` (a slot fired within this of its time is on time, not caught up).
    ``jitter`` delays each slot by a fixed, per-slot amount in ``[0, jitter)`` derived from
    the schedule id and the slot, so every worker computes the same instant.
    """

    id: str = attrs.field(validator=_check_id)
    workflow_id: str = attrs.field(validator=_check_id)
    calendar: Calendar = attrs.field(validator=_check_calendar)
    version: int | Literal["latest"] = attrs.field(default="latest", validator=_check_version)
    input: Any = None
    jitter: timedelta = attrs.field(default=timedelta(0), converter=_jitter)
    start: datetime | None = attrs.field(default=None, converter=_start)
    end: datetime | None = attrs.field(default=None, converter=_end)
    paused: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    catch_up: CatchUp = attrs.field(default="last", validator=_one_of(CATCH_UPS))
    catch_up_limit: int = attrs.field(default=10, validator=_limit)
    overlap: Overlap = attrs.field(default="skip", validator=_one_of(OVERLAPS))
    grace: timedelta = attrs.field(default=timedelta(seconds=60), converter=_jitter)

    def __attrs_post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise _settings_error("Schedule(end)", self.end, "use an instant after start")
        try:
            json.dumps(self.input)
        except (TypeError, ValueError):
            raise _settings_error("Schedule(input)", self.input, "use JSON data") from None


@attrs.frozen
class ScheduleState:
    """What a schedule has done: the newest slot handled, a buffered slot, its recent runs."""

    cursor: datetime | None = None
    buffered: datetime | None = None
    recent: tuple[str, ...] = ()


RECENT = 20
"""How many of a schedule's newest execution ids its state keeps (for overlap and display)."""


def slot_execution_id(schedule_id: str, slot: datetime) -> str:
    """The id of the execution a slot starts: the same on every worker, so starts dedupe."""
    return f"{ID_PREFIX}{schedule_id}:{slot.astimezone(timezone.utc).isoformat()}"


def fire_time(schedule: Schedule, slot: datetime) -> datetime:
    """When ``slot`` fires: the slot plus its fixed jitter."""
    if not schedule.jitter:
        return slot
    digest = hashlib.sha256(slot_execution_id(schedule.id, slot).encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return slot + timedelta(seconds=schedule.jitter.total_seconds() * fraction)


def _first_after(schedule: Schedule, after: datetime) -> datetime | None:
    if schedule.start is not None and after < schedule.start:
        after = schedule.start - _TICK
    slot = schedule.calendar.first_after(after)
    if slot is None or (schedule.end is not None and slot > schedule.end):
        return None
    return slot


def slots_between(
    schedule: Schedule, after: datetime, until: datetime, limit: int = MAX_SLOTS
) -> list[datetime]:
    """The newest ``limit`` (at most ``MAX_SLOTS``) slots in ``(after, until]``, oldest first.

    Within the schedule's start and end. A long backlog is never walked whole: windows
    ending at ``until`` widen fourfold until they hold ``limit`` slots or reach ``after``.
    """
    after, until = _utc(after, "after"), _utc(until, "until")
    limit = max(1, min(limit, MAX_SLOTS))
    width = timedelta(minutes=1)
    while True:
        low = after if until - after <= width else until - width
        found: list[datetime] = []
        slot = _first_after(schedule, low)
        while slot is not None and slot <= until:
            found.append(slot)
            if len(found) > limit:
                del found[0]
            slot = _first_after(schedule, slot)
        if len(found) >= limit or low == after:
            return found
        width *= 4


def next_slots(schedule: Schedule, after: datetime, count: int = 5) -> list[datetime]:
    """The next ``count`` slots strictly after ``after`` (fewer if the calendar ends)."""
    after = _utc(after, "after")
    found: list[datetime] = []
    slot = _first_after(schedule, after)
    while slot is not None and len(found) < min(count, MAX_SLOTS):
        found.append(slot)
        slot = _first_after(schedule, slot)
    return found


@attrs.frozen
class Plan:
    """What one tick does: slots to start (with their kind), slots skipped, the new cursor."""

    start: tuple[tuple[datetime, str], ...]
    skipped: tuple[datetime, ...]
    cursor: datetime | None


def plan_slots(
    schedule: Schedule, state: ScheduleState, now: datetime, *, first_seen: datetime
) -> Plan:
    """Which due slots to start at ``now`` per the catch-up policy (overlap is the runner's).

    Slots since ``state.cursor`` (or since ``first_seen``, when the schedule was stored, for
    a schedule never ticked) whose fire time has come. The newest is ``"on_time"`` when it
    fires within ``grace`` of now; the others were missed and follow ``catch_up``.
    """
    now = _utc(now, "now")
    since = state.cursor if state.cursor is not None else first_seen - _TICK
    due = [
        s
        for s in slots_between(schedule, since, now, limit=max(schedule.catch_up_limit, 1) + 1)
        if fire_time(schedule, s) <= now
    ]
    # Slots before the bounded window were dropped by slots_between: they count as skipped
    # only through the cursor moving past them (we never enumerate an unbounded backlog).
    if not due:
        return Plan((), (), state.cursor)
    cursor = due[-1]
    on_time = now - fire_time(schedule, due[-1]) <= schedule.grace
    missed = due[:-1] if on_time else due
    picked: list[tuple[datetime, str]] = []
    if schedule.catch_up == "last" and missed and not on_time:
        picked.append((missed[-1], "caught_up"))
        missed = missed[:-1]
    elif schedule.catch_up == "all":
        keep = missed[-schedule.catch_up_limit :]
        picked.extend((s, "caught_up") for s in keep)
        missed = missed[: len(missed) - len(keep)]
    if on_time:
        picked.append((due[-1], "on_time"))
    return Plan(tuple(picked), tuple(missed), cursor)


# -- JSON form, for the stores and the CLI (stored text is untrusted: re-validated) -------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _from_iso(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _settings_error(field, value, "use an ISO 8601 instant with an offset")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _settings_error(field, value, "use an ISO 8601 instant with an offset") from None
    return _utc(parsed, field)


def calendar_to_dict(calendar: Calendar) -> dict[str, Any]:
    if isinstance(calendar, Cron):
        return {"cron": calendar.expression, "timezone": calendar.timezone}
    if isinstance(calendar, Every):
        return {"every": calendar.interval.total_seconds(), "anchor": _iso(calendar.anchor)}
    return {"at": [t.isoformat() for t in calendar.times]}


def calendar_from_dict(data: Mapping[str, Any]) -> Calendar:
    if "cron" in data:
        return Cron(data["cron"], data.get("timezone", "UTC"))
    if "every" in data:
        return Every(data["every"], _from_iso(data.get("anchor"), "Every(anchor)"))
    if "at" in data:
        times = data["at"]
        if not isinstance(times, list):
            raise _settings_error("At(times)", times, "use a list of ISO 8601 instants")
        return At([_from_iso(t, "At(times)") for t in times])
    raise _settings_error("calendar", dict(data), "use one of cron, every or at")


def schedule_to_dict(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.id,
        "workflow_id": schedule.workflow_id,
        "version": schedule.version,
        "calendar": calendar_to_dict(schedule.calendar),
        "input": schedule.input,
        "jitter": schedule.jitter.total_seconds(),
        "start": _iso(schedule.start),
        "end": _iso(schedule.end),
        "paused": schedule.paused,
        "catch_up": schedule.catch_up,
        "catch_up_limit": schedule.catch_up_limit,
        "overlap": schedule.overlap,
        "grace": schedule.grace.total_seconds(),
    }


def schedule_from_dict(data: Any) -> Schedule:
    """A schedule from its JSON form; ``InvalidSettingsError`` naming the bad field."""
    if not isinstance(data, Mapping):
        raise _settings_error("schedule", data, "use a JSON object")
    calendar = data.get("calendar")
    if not isinstance(calendar, Mapping):
        raise _settings_error("calendar", calendar, "use an object with cron, every or at")
    return Schedule(
        id=data.get("id"),  # type: ignore[arg-type]
        workflow_id=data.get("workflow_id"),  # type: ignore[arg-type]
        calendar=calendar_from_dict(calendar),
        version=data.get("version", "latest"),
        input=data.get("input"),
        jitter=data.get("jitter", 0),
        start=_from_iso(data.get("start"), "Schedule(start)"),
        end=_from_iso(data.get("end"), "Schedule(end)"),
        paused=data.get("paused", False),
        catch_up=data.get("catch_up", "last"),
        catch_up_limit=data.get("catch_up_limit", 10),
        overlap=data.get("overlap", "skip"),
        grace=data.get("grace", 60),
    )


def dump_schedule(schedule: Schedule) -> str:
    return json.dumps(schedule_to_dict(schedule), sort_keys=True)


def load_schedule(text: str | bytes) -> Schedule:
    try:
        data = json.loads(text)
    except ValueError:
        raise _settings_error("schedule", "<unreadable>", "store valid JSON") from None
    return schedule_from_dict(data)


def dump_state(state: ScheduleState) -> str:
    return json.dumps(
        {"cursor": _iso(state.cursor), "buffered": _iso(state.buffered), "recent": state.recent}
    )


def load_state(text: str | bytes) -> ScheduleState:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise _settings_error("schedule state", "<unreadable>", "store valid JSON")
    recent = data.get("recent", [])
    if not isinstance(recent, list) or not all(isinstance(r, str) for r in recent):
        raise _settings_error("schedule state recent", recent, "use a list of execution ids")
    return ScheduleState(
        cursor=_from_iso(data.get("cursor"), "cursor"),
        buffered=_from_iso(data.get("buffered"), "buffered"),
        recent=tuple(recent[-RECENT:]),
    )
