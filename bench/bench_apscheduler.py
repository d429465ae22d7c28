"""How late do alarms fire with 1,000 pending? Lateness per adapter, median and p99.

Lateness is the wall time an alarm's callback ran minus its due time. Each run first arms
1,000 alarms an hour ahead and cancels them (to warm up and to time arming), then arms
1,000 alarms so that each is at least ``lead`` (50 ms) ahead when armed and all are
pending before the first falls due:

- staggered (the targets apply here): alarm ``i`` due ``i * spread`` after the first;
- burst: all alarms due at one instant; its p99 is mostly the time to drain 1,000 jobs
  at once, shown for information.

Targets (staggered p99): APScheduler <= 5 ms with AsyncIOScheduler, <= 25 ms with
BackgroundScheduler. Run: ``.venv/bin/python bench/bench_apscheduler.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from scheduling.adapters.apscheduler import APSchedulerAdapter
from scheduling.adapters.asyncio import AsyncioScheduler

if TYPE_CHECKING:
    from collections.abc import Callable

    from scheduling.abc import Scheduler

UTC = timezone.utc
TIMEOUT = 60.0


class Collector:
    """A fire callback recording when each id fired; calls ``on_done`` at the last one."""

    def __init__(self, count: int, on_done: Callable[[], None]) -> None:
        self.fired: dict[str, float] = {}
        self.count = count
        self.on_done = on_done

    def __call__(self, execution_id: str) -> None:
        self.fired[execution_id] = time.time()
        if len(self.fired) == self.count:
            self.on_done()


def arm(scheduler: Scheduler, args: argparse.Namespace, burst: bool) -> tuple[list[float], float]:
    """Arm the alarms; return their due timestamps and the seconds one arming pass took."""
    ids = [f"e{i}" for i in range(args.alarms)]
    started = time.perf_counter()
    far = datetime.now(UTC) + timedelta(hours=1)
    for execution_id in ids:
        scheduler.schedule(execution_id, far)
    arm_seconds = time.perf_counter() - started
    for execution_id in ids:
        scheduler.cancel(execution_id)

    # Leave room to arm them all (twice the measured time) plus the lead before the first.
    first = datetime.now(UTC) + timedelta(seconds=2 * arm_seconds, milliseconds=args.lead_ms)
    offsets = [0.0 if burst else i * args.spread_ms for i in range(args.alarms)]
    dues = [first + timedelta(milliseconds=offset) for offset in offsets]
    for execution_id, due in zip(ids, dues, strict=True):
        scheduler.schedule(execution_id, due)
    return [due.timestamp() for due in dues], arm_seconds


def lateness_ms(collector: Collector, dues: list[float]) -> list[float]:
    return [(collector.fired[f"e{i}"] - due) * 1000 for i, due in enumerate(dues)]


def run_threaded(
    make: Callable[[], Scheduler], args: argparse.Namespace, burst: bool
) -> tuple[list[float], float]:
    done = threading.Event()
    collector = Collector(args.alarms, done.set)
    scheduler = make()
    scheduler.start(collector)
    dues, arm_seconds = arm(scheduler, args, burst)
    if not done.wait(TIMEOUT):
        raise SystemExit(f"only {len(collector.fired)} of {args.alarms} alarms fired")
    scheduler.shutdown()
    return lateness_ms(collector, dues), arm_seconds


def run_in_loop(
    make: Callable[[], Scheduler], args: argparse.Namespace, burst: bool
) -> tuple[list[float], float]:
    async def main() -> tuple[list[float], float]:
        done = asyncio.Event()
        collector = Collector(args.alarms, done.set)
        scheduler = make()
        scheduler.start(collector)
        dues, arm_seconds = arm(scheduler, args, burst)
        await asyncio.wait_for(done.wait(), TIMEOUT)
        scheduler.shutdown()
        await asyncio.sleep(0)
        return lateness_ms(collector, dues), arm_seconds

    return asyncio.run(main())


def row(name: str, shape: str, late: list[float], arm_seconds: float) -> str:
    p99 = statistics.quantiles(late, n=100)[98]
    arm_us = arm_seconds / len(late) * 1e6
    return (
        f"| {name:<32} | {shape:<9} | {arm_us:7.1f} | {min(late):7.2f} "
        f"| {statistics.median(late):7.2f} | {p99:7.2f} | {max(late):7.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alarms", type=int, default=1000)
    parser.add_argument("--lead-ms", type=float, default=50.0)
    parser.add_argument("--spread-ms", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    adapters: list[tuple[str, Callable[[], Scheduler], bool]] = [
        ("APScheduler BackgroundScheduler", APSchedulerAdapter, False),
        ("APScheduler AsyncIOScheduler", lambda: APSchedulerAdapter(mode="asyncio"), True),
        ("AsyncioScheduler (call_at)", AsyncioScheduler, True),
    ]
    print(
        f"{args.alarms} pending alarms, each >= {args.lead_ms:g} ms ahead when armed, staggered "
        f"every {args.spread_ms:g} ms; lateness (fired wall time - due) in ms"
    )
    print(
        f"| {'adapter':<32} | {'shape':<9} | {'arm µs':>7} | {'min':>7} | {'median':>7} "
        f"| {'p99':>7} | {'max':>7} |"
    )
    print("|" + "|".join("-" * width for width in (34, 11, 9, 9, 9, 9, 9)) + "|")
    for burst in (False, True):
        for name, make, in_loop in adapters:
            for _ in range(args.repeat):
                run = run_in_loop if in_loop else run_threaded
                late, arm_seconds = run(make, args, burst)
                print(row(name, "burst" if burst else "staggered", late, arm_seconds), flush=True)


if __name__ == "__main__":
    main()
