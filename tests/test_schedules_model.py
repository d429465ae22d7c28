"""Schedules as pure data: calendars through DST, catch-up plans, validation."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from prana import InvalidSettingsError
from scheduling._schedules import (
    At,
    Cron,
    Every,
    Plan,
    Schedule,
    ScheduleState,
    dump_schedule,
    fire_time,
    load_schedule,
    next_slots,
    plan_slots,
    slot_execution_id,
    slots_between,
)

UTC = timezone.utc


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


def hours(slots: list[datetime]) -> list[str]:
    return [s.strftime("%m-%d %H:%MZ") for s in slots]


def test_berlin_hourly_spring_forward_has_no_slot_in_the_missing_hour() -> None:
    sched = Schedule("s", "wf", Cron("30 * * * *", "Europe/Berlin"))
    # 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z)
    assert hours(slots_between(sched, utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 3, 0))) == [
        "03-28 23:30Z",
        "03-29 00:30Z",
        "03-29 01:30Z",
        "03-29 02:30Z",
    ]


def test_berlin_hourly_fall_back_fires_the_repeated_hour_twice() -> None:
    sched = Schedule("s", "wf", Cron("30 * * * *", "Europe/Berlin"))
    # 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z): 02:30 local happens twice
    slots = slots_between(sched, utc(2026, 10, 24, 23, 0), utc(2026, 10, 25, 3, 0))
    assert hours(slots) == ["10-24 23:30Z", "10-25 00:30Z", "10-25 01:30Z", "10-25 02:30Z"]
    local = [s.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M%z") for s in slots]
    assert local == ["01:30+0200", "02:30+0200", "02:30+0100", "03:30+0100"]


def test_new_york_daily_in_the_skipped_hour_fires_an_hour_later() -> None:
    sched = Schedule("s", "wf", Cron("30 2 * * *", "America/New_York"))
    slots = next_slots(sched, utc(2026, 3, 7, 12), 3)
    # 03-07 02:30 EST = 07:30Z; 03-08 02:30 does not exist: fires 07:30Z (03:30 EDT)
    assert hours(slots) == ["03-08 07:30Z", "03-09 06:30Z", "03-10 06:30Z"]


def test_new_york_daily_in_the_repeated_hour_fires_in_each_offset() -> None:
    sched = Schedule("s", "wf", Cron("30 1 * * *", "America/New_York"))
    slots = next_slots(sched, utc(2026, 10, 31, 12), 3)
    assert hours(slots) == ["11-01 05:30Z", "11-01 06:30Z", "11-02 06:30Z"]


def test_every_and_at_calendars_respect_start_and_end() -> None:
    sched = Schedule("s", "wf", Every("15m"), start=utc(2026, 1, 1, 10, 5), end=utc(2026, 1, 1, 11))
    assert hours(next_slots(sched, utc(2026, 1, 1), 10)) == [
        "01-01 10:15Z",
        "01-01 10:30Z",
        "01-01 10:45Z",
        "01-01 11:00Z",
    ]
    once = Schedule("o", "wf", At([utc(2026, 5, 1, 9), utc(2026, 4, 1, 9)]))
    assert hours(next_slots(once, utc(2026, 1, 1), 5)) == ["04-01 09:00Z", "05-01 09:00Z"]
    assert next_slots(once, utc(2026, 6, 1), 5) == []


def test_slot_execution_id_is_the_same_instant_whatever_the_offset() -> None:
    berlin = datetime(2026, 1, 1, 11, tzinfo=ZoneInfo("Europe/Berlin"))
    assert slot_execution_id("r", berlin) == slot_execution_id("r", utc(2026, 1, 1, 10))
    assert slot_execution_id("r", berlin) == "sched:r:2026-01-01T10:00:00+00:00"


def test_jitter_is_fixed_per_slot_and_within_bounds() -> None:
    sched = Schedule("s", "wf", Every("1h"), jitter="10m")
    times = [fire_time(sched, utc(2026, 1, 1, h)) - utc(2026, 1, 1, h) for h in range(24)]
    assert all(timedelta(0) <= t < timedelta(minutes=10) for t in times)
    assert len(set(times)) > 1
    assert times == [fire_time(sched, utc(2026, 1, 1, h)) - utc(2026, 1, 1, h) for h in range(24)]


def plan(catch_up: str, now: datetime, cursor: datetime | None = None, limit: int = 10) -> Plan:
    sched = Schedule("s", "wf", Every("1h"), catch_up=catch_up, catch_up_limit=limit)  # type: ignore[arg-type]
    return plan_slots(sched, ScheduleState(cursor=cursor), now, first_seen=utc(2026, 1, 1))


def test_on_time_tick_starts_the_one_slot() -> None:
    for policy in ("skip", "last", "all"):
        p = plan(policy, utc(2026, 1, 1, 5, 0, 30), cursor=utc(2026, 1, 1, 4))
        assert [(hours([s])[0], kind) for s, kind in p.start] == [("01-01 05:00Z", "on_time")]
        assert p.cursor == utc(2026, 1, 1, 5)


def test_downtime_catch_up_policies() -> None:
    now, cursor = utc(2026, 1, 1, 5, 30), utc(2026, 1, 1, 1)  # down from 01:00 to 05:30
    skip = plan("skip", now, cursor)
    assert skip.start == ()
    assert hours(list(skip.skipped)) == [
        "01-01 02:00Z",
        "01-01 03:00Z",
        "01-01 04:00Z",
        "01-01 05:00Z",
    ]
    last = plan("last", now, cursor)
    assert [(s, k) for s, k in last.start] == [(utc(2026, 1, 1, 5), "caught_up")]
    assert len(last.skipped) == 3
    every = plan("all", now, cursor, limit=3)
    assert [s for s, _ in every.start] == [utc(2026, 1, 1, h) for h in (3, 4, 5)]
    assert every.skipped == (utc(2026, 1, 1, 2),)
    assert skip.cursor == last.cursor == every.cursor == utc(2026, 1, 1, 5)


def test_nothing_due_keeps_the_cursor() -> None:
    p = plan("all", utc(2026, 1, 1, 4, 59), cursor=utc(2026, 1, 1, 4))
    assert p.start == ()
    assert p.skipped == ()
    assert p.cursor == utc(2026, 1, 1, 4)


def test_a_long_backlog_is_bounded() -> None:
    sched = Schedule("s", "wf", Every("1s"), catch_up="all", catch_up_limit=5)
    p = plan_slots(
        sched, ScheduleState(cursor=utc(2000, 1, 1)), utc(2026, 1, 1), first_seen=utc(2000, 1, 1)
    )
    assert [k for _, k in p.start] == ["caught_up"] * 5 + ["on_time"]
    assert p.cursor == utc(2026, 1, 1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"calendar": Every("1h"), "version": 0}, "version"),
        ({"calendar": Every("1h"), "catch_up": "some"}, "catch_up"),
        ({"calendar": Every("1h"), "overlap": "queue"}, "overlap"),
        ({"calendar": Every("1h"), "input": object()}, "input"),
        ({"calendar": "hourly"}, "calendar"),
        ({"calendar": Every("1h"), "start": datetime(2026, 1, 1)}, "start"),  # noqa: DTZ001
    ],
)
def test_bad_fields_are_named(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidSettingsError, match=field):
        Schedule("s", "wf", **kwargs)  # type: ignore[arg-type]


def test_bad_calendars_are_named() -> None:
    with pytest.raises(InvalidSettingsError, match="expression"):
        Cron("61 * * * *")
    with pytest.raises(InvalidSettingsError, match="timezone"):
        Cron("0 * * * *", "Mars/Olympus")
    with pytest.raises(InvalidSettingsError, match="interval"):
        Every(0)


def test_json_round_trip() -> None:
    for calendar in (
        Cron("0 9 * * 1-5", "Europe/Berlin"),
        Every("90m", utc(2026, 1, 1)),
        At([utc(2026, 2, 2)]),
    ):
        sched = Schedule("s", "wf", calendar, version=3, input={"a": 1}, jitter=5, paused=True)
        assert load_schedule(dump_schedule(sched)) == sched
    with pytest.raises(InvalidSettingsError, match="catch_up"):
        load_schedule('{"id": "s", "workflow_id": "w", "calendar": {"every": 60}, "catch_up": 1}')
