"""The web view in a real browser: headless Chromium (Debian's) driven by Playwright.

The app serves a SQLite store on a loopback port; a flaky workflow's retries are driven
by a manual clock from the test, and the open execution page must show each retry land
over its SSE stream. Every wait is on a page condition with a bounded timeout.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from doubles import Flaky
from servers import serve
from test_web import approval

from prana import Registry
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore
from scheduling.web import create_app

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from playwright.sync_api import Browser, Page

CHROMIUM = os.environ.get("PRANA_TEST_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 15_000
"""The bound on every wait for a page condition."""
OPERATOR_TOKEN = "operator-token-for-the-browser-test"
LAUNCH_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, with a fresh profile; CI installs it, locally it may skip."""
    if not shutil.which(CHROMIUM):
        message = f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="prana-chromium-")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=LAUNCH_FLAGS,
        )
        try:
            yield context  # type: ignore[misc]
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def _advance(scheduler: ManualScheduler, seconds: float) -> None:
    """Fire what falls due, from a plain thread (Playwright's sync API runs a loop in this one)."""
    worker = threading.Thread(target=scheduler.advance, args=(seconds,))
    worker.start()
    worker.join(TIMEOUT_MS / 1000)
    assert not worker.is_alive()


def expect(locator: Any) -> Any:
    """Playwright's ``expect`` (imported late: the module is collected without Playwright)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def _attempts(page: Page) -> int:
    return page.locator("div.node[data-node=call] tr.attempt").count()


def test_list_and_live_execution_page(browser: Any, tmp_path: Path) -> None:
    """Sign in, find the execution in the list, watch two retries land live, then resume it."""
    clock = ManualClock()
    scheduler = ManualScheduler(clock=clock)
    registry = Registry()
    registry.register("test.flaky", Flaky(fails=2))
    store = SQLiteStore(tmp_path / "web.sqlite3")
    runner = Runner(registry=registry, store=store, scheduler=scheduler)
    with runner:
        execution_id = runner.start(approval(), {"order": 1})
        app = create_app(runner, token=OPERATOR_TOKEN, poll_seconds=0.05)
        with serve(app) as url:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{url}/executions")
            page.wait_for_url("**/login**")
            page.fill("input[name=token]", OPERATOR_TOKEN)
            page.click("button[type=submit]")
            row = page.locator("#executions tbody tr", has_text=execution_id)
            row.wait_for()
            assert "suspended" in row.inner_text()

            row.locator("a").click()
            page.wait_for_url(f"**/executions/{execution_id}")
            page.wait_for_selector("#live:text('live')")
            assert _attempts(page) == 1
            first = page.locator("div.node[data-node=call] tr.attempt").nth(0)
            assert first.get_attribute("data-outcome") == "failed"
            assert "ConnectionError" in first.inner_text()
            # the failed attempt's traceback, collapsed until asked for
            traceback = page.locator("div.node[data-node=call] details.traceback")
            assert traceback.get_attribute("open") is None
            traceback.locator("summary").click()
            assert "ConnectionError: down" in traceback.locator("pre").inner_text()
            # times to the millisecond in the viewer's zone, the exact ISO time on hover
            started = first.locator("time").first
            assert re.search(r"\d\d[.,]\d{3}", started.inner_text()), started.inner_text()
            assert (started.get_attribute("title") or "").startswith("2")

            _advance(scheduler, 5)  # the first retry falls due and fails again
            expect(page.locator("div.node[data-node=call] tr.attempt")).to_have_count(
                2, timeout=TIMEOUT_MS
            )
            second = page.locator("div.node[data-node=call] tr.attempt").nth(1)
            assert "↻" in second.inner_text()

            _advance(scheduler, 5)  # the second retry succeeds; the workflow waits for approval
            page.wait_for_selector("dl.meta[data-status=suspended] >> text=webhook")
            assert _attempts(page) == 3
            outcomes = [
                a.get_attribute("data-outcome")
                for a in page.locator("div.node[data-node=call] tr.attempt").all()
            ]
            assert outcomes == ["failed", "failed", "completed"]

            path = runner.hook_path(execution_id)
            assert path is not None
            response = httpx.post(url + path, json={"approved": True})
            assert response.status_code == 200
            page.wait_for_selector("dl.meta[data-status=completed]")
            page.wait_for_selector("#live:text('final')")
            again = httpx.post(url + path, json={"approved": True})  # a retry: the same body
            assert (again.status_code, again.json()["already_delivered"]) == (200, True)
            other = httpx.post(url + path, json={"approved": False})  # the token is used
            assert other.status_code == 404
            page.close()
    store.close()


def test_a_late_answer_for_an_older_change_never_overwrites_a_newer_one(
    browser: Any, tmp_path: Path
) -> None:
    """The likely cause of this file's old flakiness: each SSE event fetched the fragment at
    once and whichever answer came last was shown, so a slow answer for the checkpoint saved
    before an attempt could replace the page showing the attempt's end. Here the first
    fragment request is held, and answered with the fragment as it was after the first
    retry only once the page has heard of the last change: the page must still end there."""
    clock = ManualClock()
    scheduler = ManualScheduler(clock=clock)
    registry = Registry()
    registry.register("test.flaky", Flaky(fails=2))
    store = SQLiteStore(tmp_path / "web.sqlite3")
    runner = Runner(registry=registry, store=store, scheduler=scheduler)
    held: list[Any] = []

    def hold_the_first(route: Any) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    with runner:
        execution_id = runner.start(approval(), {"order": 1})
        app = create_app(runner, token=OPERATOR_TOKEN, poll_seconds=0.05)
        auth = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        with serve(app) as url:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.set_extra_http_headers(auth)
            page.goto(f"{url}/executions/{execution_id}")
            page.wait_for_selector("#live:text('live')")
            page.route("**/executions/*?fragment=1", hold_the_first)
            with page.expect_request("**/executions/*?fragment=1"):
                _advance(scheduler, 5)  # the first retry fails; the page asks (held)
            fragment = f"{url}/executions/{execution_id}?fragment=1"
            stale = httpx.get(fragment, headers=auth).text  # as it is after the first retry
            _advance(scheduler, 5)  # the second succeeds; the workflow waits for approval
            final = str(store.load(execution_id)[1])
            page.wait_for_selector(f"#execution[data-heard='{final}']")
            assert f'data-version="{final}"' not in stale
            held[0].fulfill(status=200, content_type="text/html", body=stale)
            page.wait_for_selector(f"dl.meta[data-version='{final}']")  # the content's own
            page.wait_for_selector("dl.meta[data-status=suspended] >> text=webhook")
            outcomes = [
                a.get_attribute("data-outcome")
                for a in page.locator("div.node[data-node=call] tr.attempt").all()
            ]
            assert outcomes == ["failed", "failed", "completed"]
            page.close()
    store.close()
