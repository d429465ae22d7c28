"""Execution ids with URL syntax in them (``?``, ``#``, ``%``) link to their own pages."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import quote, unquote

import httpx
import pytest
from doubles import T0, webhook_node, workflow
from servers import serve

from prana import Registry
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.web import create_app

OPERATOR = "an-operator-token-long-enough"


@pytest.mark.parametrize("suffix", ["#42", "?42", "%2342", " 42"])
def test_the_view_links_and_streams_an_id_with_url_syntax_to_its_own_page(suffix: str) -> None:
    """Was: the list linked ``order#42`` to ``/executions/order#42``, i.e. to execution
    ``order``, and its page fetched and streamed ``order``'s timeline in its place."""
    clock = ManualClock(T0)
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    wf = workflow(webhook_node())
    with runner, serve(create_app(runner, token=OPERATOR)) as url:
        other = runner.start(wf, execution_id="order")
        eid = runner.start(wf, execution_id=f"order{suffix}")
        runner.cancel(other)  # a page showing it in the other's place would say cancelled
        auth = {"authorization": f"Bearer {OPERATOR}"}
        listing = httpx.get(f"{url}/executions", headers=auth).text
        hrefs = re.findall(r'class="mono" href="([^"]*)"', listing)
        assert len(hrefs) == 2
        for href in hrefs:
            assert "#" not in href
            assert "?" not in href
        page_url = next(href for href in hrefs if href != "/executions/order")
        assert unquote(page_url.removeprefix("/executions/")) == eid
        page = httpx.get(f"{url}{page_url}", headers=auth)
        assert page.status_code == 200
        events = re.search(r'data-events="([^"]*)"', page.text)
        fragment = re.search(r'data-fragment="([^"]*)"', page.text)
        assert events is not None
        assert fragment is not None
        assert events.group(1) == f"{page_url}/events"
        assert fragment.group(1) == f"{page_url}?fragment=1"
        part = httpx.get(f"{url}{fragment.group(1)}", headers=auth).text
        assert 'data-status="suspended"' in part


@pytest.mark.parametrize("eid", ["a/b", "order/42/events", "/lead", "trail/", "x%2Fy/z"])
def test_an_id_with_a_slash_has_its_page_json_and_stream(eid: str) -> None:
    """Was: a ``/`` in an id (quoted ``%2F`` in every link) split the path, so the routes
    answered 404 (or, for an id ending in ``/events``, the stream of another id)."""
    from starlette.testclient import TestClient

    clock = ManualClock(T0)
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    wf = workflow(webhook_node())
    with runner, TestClient(create_app(runner, token=OPERATOR)) as client:
        runner.start(wf, execution_id=eid)
        decoy = eid.rsplit("/", 1)[0] or "decoy"
        if decoy != eid:
            runner.start(wf, execution_id=decoy)
            runner.cancel(decoy)  # shown in eid's place, a page would say cancelled
        client.headers["authorization"] = f"Bearer {OPERATOR}"
        listing = client.get("/executions").text
        hrefs = re.findall(r'class="mono" href="([^"]*)"', listing)
        page_url = next(h for h in hrefs if unquote(h.removeprefix("/executions/")) == eid)
        page = client.get(page_url)
        assert page.status_code == 200, page.text
        assert 'data-status="suspended"' in client.get(f"{page_url}?fragment=1").text
        api = client.get(f"/api/executions/{quote(eid, safe='')}")
        assert api.status_code == 200, api.text
        assert api.json()["id"] == eid
        assert api.json()["status"] == "suspended"
        runner.cancel(eid)  # the stream ends once the execution has
        with client.stream("GET", f"{page_url}/events") as stream:
            assert stream.status_code == 200
            body = "".join(stream.iter_text())
        assert '"cancelled"' in body
        assert eid in body


@pytest.mark.parametrize("eid", ["order/42/events", "x%2Fy"])
def test_signing_in_from_an_id_with_a_slash_returns_to_its_page(eid: str) -> None:
    """Was: the sign-in redirect kept the decoded path as ``next``, so after signing in the
    browser went to ``/executions/order/42/events``, the stream of ``order/42``, or to
    ``/executions/x%2Fy``, the page of ``x/y``: another execution's, not this one's."""
    from starlette.testclient import TestClient

    clock = ManualClock(T0)
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    wf = workflow(webhook_node())
    app = create_app(runner, token=OPERATOR)
    with runner, TestClient(app, follow_redirects=False) as client:
        runner.start(wf, execution_id=eid)
        for other in ("order/42", "x/y", "a"):
            runner.start(wf, execution_id=other)
            runner.cancel(other)  # shown in eid's place, a page would say cancelled
        page_url = f"/executions/{quote(eid, safe='')}"
        bounced = client.get(page_url)
        assert bounced.status_code == 303
        form = client.get(bounced.headers["location"]).text
        next_path = re.search(r'name="next" value="([^"]*)"', form)
        assert next_path is not None
        signed_in = client.post(
            "/login",
            content=f"token={OPERATOR}&next={quote(unescape(next_path.group(1)), safe='')}",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == page_url
        page = client.get(signed_in.headers["location"])
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert 'data-status="suspended"' in client.get(f"{page_url}?fragment=1").text
