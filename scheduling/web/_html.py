"""Server-rendered HTML for the view: the list of executions and one execution's timeline.

Plain HTML and CSS with a few lines of JavaScript, served as ``/assets/view.js`` (the
pages carry no inline script, so the Content-Security-Policy can forbid it): ``<time>``
elements are rewritten into the viewer's time zone, and the execution page listens to its
SSE stream and swaps in the server-rendered fragment when the execution changes. Every
value from a record is escaped.
"""

from __future__ import annotations

import json
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from prana import ErrorCode, ExecutionStatus
from prana.shell import format_duration
from scheduling.web._views import FINAL

__all__ = ["SCRIPT", "execution_fragment", "execution_page", "list_page", "login_page"]

STATUSES = tuple(s.value for s in ExecutionStatus)
"""Every execution status, in the enum's order: the list filter's choices."""
ERROR_CODES = tuple(c.value for c in ErrorCode)
"""Every error code, in the enum's order: the list's error filter's choices."""

_CSS = """
:root{--bg:#f7f7f9;--fg:#1d1f24;--muted:#6b7180;--line:#e2e4ea;--card:#fff;
--completed:#1f8f4e;--failed:#c53030;--suspended:#b7791f;--running:#2b6cb0;
--pending:#718096;--cancelled:#4a5568;--interrupted:#805ad5}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;
background:var(--bg);color:var(--fg)}
header{background:#1d1f24;color:#fff;padding:10px 24px;display:flex;gap:16px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}
main{max-width:1200px;margin:0 auto;padding:20px 24px}
h1{font-size:20px;margin:0 0 12px}h2{font-size:16px;margin:20px 0 8px}.card h2{margin-top:0}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line)}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase}
a{color:#2b6cb0}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;
font-weight:600}
.s-completed{background:var(--completed)}.s-failed{background:var(--failed)}
.s-suspended{background:var(--suspended)}.s-running{background:var(--running)}
.s-pending{background:var(--pending)}.s-cancelled{background:var(--cancelled)}
.s-interrupted{background:var(--interrupted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:12px 16px;
margin:12px 0}
.meta{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px}
.meta dt{color:var(--muted)}.meta dd{margin:0}
.muted{color:var(--muted)}.err{color:var(--failed)}
.retry{color:var(--suspended);font-weight:700}
.mark{font-size:11px;font-weight:600;padding:0 5px;border-radius:3px;border:1px solid}
.redrive{color:var(--running)}.recovered{color:var(--interrupted)}
.bar{position:relative;height:14px;background:#eef0f4;border-radius:3px;margin:6px 0 10px}
.bar span{position:absolute;top:0;height:14px;border-radius:3px;min-width:3px}
form.filters{display:flex;gap:8px;margin:0 0 12px;align-items:center}
input,select,button{font:inherit;padding:4px 8px}
.pager{display:flex;gap:12px;margin:10px 0}
details.value summary code{color:var(--muted)}
details.value pre{background:#f3f4f7;border:1px solid var(--line);padding:8px;overflow:auto;
max-height:400px;font-size:12px}
details.traceback pre{background:#f3f4f7;border:1px solid var(--line);padding:8px;
overflow-x:auto;font-size:12px;white-space:pre}
.live{font-size:12px;color:var(--muted)}
"""

SCRIPT = """
function localTimes(root){
  for (const t of root.querySelectorAll('time[datetime]')) {
    const d = new Date(t.getAttribute('datetime'));
    if (!isNaN(d)) {
      t.textContent = d.toLocaleString(undefined, {year: 'numeric', month: '2-digit',
        day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit',
        fractionalSecondDigits: 3});
      t.title = t.getAttribute('datetime');
    }
  }
}
localTimes(document);
const live = document.querySelector('[data-events]');
if (live && window.EventSource) {
  const status = document.getElementById('live');
  const source = new EventSource(live.dataset.events);
  // Fragments are applied in version order, one fetch at a time: the answer to an older
  // change, arriving late, never overwrites a newer one (data-heard: the newest announced).
  let shown = Number(live.dataset.version);
  let heard = shown;
  let fetching = false;
  async function catchUp() {
    if (fetching) return;
    fetching = true;
    try {
      while (heard > shown) {
        const options = {credentials: 'same-origin', cache: 'no-store'};
        const res = await fetch(live.dataset.fragment, options);
        if (!res.ok) break;
        const box = document.createElement('template');
        box.innerHTML = await res.text();
        const meta = box.content.querySelector('[data-version]');
        const version = meta ? Number(meta.dataset.version) : NaN;
        if (!(version > shown)) break;
        live.replaceChildren(box.content);
        live.dataset.version = String(version);
        shown = version;
        localTimes(live);
      }
    } finally {
      fetching = false;
    }
  }
  source.addEventListener('execution', (ev) => {
    const version = Number(JSON.parse(ev.data).record_version);
    if (version > heard) {
      heard = version;
      live.dataset.heard = String(version);
    }
    catchUp();
  });
  source.addEventListener('end', () => { source.close(); status.textContent = 'final'; });
  source.onopen = () => { status.textContent = 'live'; };
  source.onerror = () => { status.textContent = 'reconnecting…'; };
}
"""


def _page(title: str, body: str, root: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)} · prana</title><style>{_CSS}</style></head><body>"
        f'<header><a href="{escape(root)}/executions">prana</a>'
        "<span class=muted>executions</span></header>"
        f'<main>{body}</main><script src="{escape(root)}/assets/view.js"></script></body></html>'
    )


def _time(value: str | None) -> str:
    if value is None:
        return '<span class="muted">-</span>'
    return f'<time datetime="{escape(value)}">{escape(value)}</time>'


def _badge(status: str) -> str:
    return f'<span class="badge s-{escape(status)}">{escape(status)}</span>'


def _duration(ms: int | None) -> str:
    """``ms`` as the console and the log write a duration (``format_duration``)."""
    return "-" if ms is None else format_duration(ms / 1000)


def _seconds(value: float) -> str:
    return _duration(round(value * 1000))


def _error_text(error: dict[str, Any] | None) -> str:
    if not error:
        return ""
    return f'<span class="err">{escape(error["type"])}: {escape(error["message"])}</span>'


MAX_SHOWN = 20_000
"""The most characters of one value (input, params, output) a page shows, pretty-printed."""


def _value(label: str, value: Any) -> str:
    """``value`` collapsed under ``label`` with its size, pretty-printed when opened; a large
    value is cut to ``MAX_SHOWN`` characters and says how much more there is."""
    compact = json.dumps(value, ensure_ascii=False, default=str)
    pretty = json.dumps(value, ensure_ascii=False, default=str, indent=2)
    if len(pretty) > MAX_SHOWN:
        pretty = f"{pretty[:MAX_SHOWN]}\n… ({len(pretty) - MAX_SHOWN:,} more characters not shown)"
    size = f"{len(compact):,} characters"
    preview = compact if len(compact) <= 80 else compact[:79] + "…"
    return (
        f"<details class=value><summary>{escape(label)} <code>{escape(preview)}</code> "
        f"<span class=muted>({size})</span></summary><pre>{escape(pretty)}</pre></details>"
    )


def list_page(
    rows: list[dict[str, Any]],
    *,
    root: str,
    status: str | None,
    workflow: str | None,
    limit: int,
    after: str | None,
    next_after: str | None,
    code: str | None = None,
) -> str:
    """The executions list: filters, a table newest first (what failed, what waits), and
    links to the first and next page."""
    options = ['<option value="">any status</option>'] + [
        f'<option value="{s}"{" selected" if s == status else ""}>{s}</option>' for s in STATUSES
    ]
    codes = ['<option value="">any error</option>'] + [
        f'<option value="{c}"{" selected" if c == code else ""}>{c}</option>' for c in ERROR_CODES
    ]
    filters = (
        '<form class="filters" method="get">'
        f'<select name="status">{"".join(options)}</select>'
        f'<input name="workflow" placeholder="workflow id" value="{escape(workflow or "")}">'
        f'<select name="code" title="failed with this error code">{"".join(codes)}</select>'
        '<button type="submit">Filter</button></form>'
    )
    body_rows = []
    for row in rows:
        link = f"{root}/executions/{_in_path(row['id'])}"
        workflow_cell = (
            f"<td class=muted>{escape(row['problem'])}</td>"
            if row["problem"] is not None  # a row the store could not read
            else f"<td>{escape(row['workflow_id'])} "
            f"<span class=muted>v{row['workflow_version']}</span></td>"
        )
        body_rows.append(
            "<tr>"
            f'<td><a class="mono" href="{link}">{escape(row["id"])}</a></td>'
            f"{workflow_cell}"
            f"<td>{_badge(row['status'])}</td>"
            f"<td>{_failure_cell(row.get('failure'))}{_waiting_cell(row.get('waiting'))}</td>"
            f"<td>{_time(row['updated_at'])}</td>"
            "</tr>"
        )
    if not body_rows:
        body_rows.append('<tr><td colspan=5 class="muted">No executions.</td></tr>')
    table = (
        "<table id=executions><thead><tr><th>execution</th><th>workflow</th><th>status</th>"
        "<th>failed at / waits on</th><th>updated</th></tr></thead>"
        f"<tbody>{''.join(body_rows)}</tbody></table>"
    )
    base = {k: v for k, v in (("status", status), ("workflow", workflow), ("code", code)) if v}
    pager = []
    if after is not None:
        query = urlencode({**base, "limit": limit})
        pager.append(f'<a href="?{escape(query)}">← newest</a>')
    if next_after is not None:
        query = urlencode({**base, "limit": limit, "after": next_after})
        pager.append(f'<a href="?{escape(query)}">older →</a>')
    body = f"<h1>Executions</h1>{filters}{table}<div class=pager>{''.join(pager)}</div>"
    return _page("Executions", body, root)


def _failure_cell(failure: dict[str, Any] | None) -> str:
    """``node · code · N attempts``, the error on hover."""
    if not failure:
        return ""
    attempts = failure["attempts"]
    text = (
        f"{failure['node_key'] or '-'} · {failure['code'] or '-'} · "
        f"{attempts} attempt{'' if attempts == 1 else 's'}"
    )
    error = f"{failure['type']}: {failure['message']}" if failure["type"] else ""
    return f'<span class="err" title="{escape(error)}">{escape(text)}</span>'


_UNTIL = {"webhook": "until a delivery", "sub_workflow": "until its sub-workflow ends"}


def _waiting_cell(waiting: dict[str, Any] | None) -> str:
    """``retry at <node>, due <time>``, or ``webhook at <node>, until a delivery, expires
    <time>``."""
    if not waiting:
        return ""
    where = f" at <code>{escape(waiting['node_key'])}</code>" if waiting["node_key"] else ""
    until = _UNTIL.get(waiting["kind"])
    due = waiting["due_at"]
    if until is None:
        when = f"due {_time(due)}" if due else "until resumed"
    else:  # a webhook's due time is when it expires
        when = f"{until}, expires {_time(due)}" if due else until
    return f"{escape(waiting['kind'])}{where}, {when}"


def _timeline_bar(node: dict[str, Any], origin: datetime, span_s: float) -> str:
    """A bar with one segment per attempt, placed by its start and end on the run's span."""
    parts = []
    for attempt in node["attempts"]:
        start = datetime.fromisoformat(attempt["started_at"])
        end_text = attempt["ended_at"]
        end = datetime.fromisoformat(end_text) if end_text else start
        left = max(0.0, (start - origin).total_seconds() / span_s * 100)
        width = max(0.3, (end - start).total_seconds() / span_s * 100)
        outcome = attempt["outcome"]
        colour = {
            "completed": "completed",
            "failed": "failed",
            "suspended": "suspended",
            "cancelled": "cancelled",
            "interrupted": "interrupted",
        }.get(outcome, "running")
        parts.append(
            f'<span class="s-{colour}" style="left:{min(left, 99.5):.2f}%;'
            f'width:{min(width, 100 - min(left, 99.5)):.2f}%" '
            f'title="attempt {attempt["number"]}: {escape(outcome)}"></span>'
        )
    return f'<div class="bar">{"".join(parts)}</div>'


_REDRIVE_MARK = (
    '<span class="mark redrive" title="an operator redrove the failed execution">redrive</span> '
)
_RECOVERED_MARK = (
    '<span class="mark recovered" title="run again: the process running this attempt '
    'stopped">re-run</span> '
)


def _node_card(node: dict[str, Any], origin: datetime | None, span_s: float) -> str:
    port = f" → <code>{escape(node['output_port'])}</code>" if node["output_port"] else ""
    head = (
        f'<div class="card node" data-node="{escape(node["node_key"])}">'
        f"<h2>{escape(node['node_key'])} <span class=muted>run {node['run_index']}</span> "
        f"{_badge(node['status'])}{port}</h2>"
        f"<div class=muted>{_time(node['started_at'])} → {_time(node['completed_at'])}</div>"
    )
    bar = _timeline_bar(node, origin, span_s) if origin is not None and node["attempts"] else ""
    rows = []
    for attempt in node["attempts"]:
        mark = '<span class="retry" title="retry">↻</span> ' if attempt["retry"] else ""
        if attempt.get("redrive"):
            mark += _REDRIVE_MARK
        if attempt.get("recovered"):
            mark += _RECOVERED_MARK
        due = _time(attempt["due_at"]) if attempt["due_at"] else "-"
        if attempt.get("redriven_at"):  # not scheduled: when the operator redrove it
            due = f"redriven {_time(attempt['redriven_at'])}"
        rows.append(
            f'<tr class="attempt" data-outcome="{escape(attempt["outcome"])}">'
            f"<td>{mark}{attempt['number']}</td>"
            f"<td>{_badge(attempt['outcome'])}</td>"
            f"<td>{_time(attempt['started_at'])}</td>"
            f"<td>{_time(attempt['ended_at'])}</td>"
            f"<td>{_duration(attempt['duration_ms'])}</td>"
            f"<td>{_duration(attempt['retry_delay_ms'])}</td>"
            f"<td>{due}</td>"
            f"<td>{_duration(attempt['lateness_ms'])}</td>"
            f"<td>{_error_text(attempt['error'])}</td>"
            "</tr>"
        )
    attempts = (
        "<table class=attempts><thead><tr><th>#</th><th>outcome</th><th>start</th><th>end</th>"
        "<th>took</th><th>delay</th><th>due</th><th>late</th><th>error</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else ""
    )
    previews = []
    for policy in node["retry_policies"]:
        cells = "".join(
            f"<tr><td>{r['retry']}</td><td>{_seconds(r['min_delay_s'])}</td>"
            f"<td>{_seconds(r['typical_delay_s'])}</td><td>{_seconds(r['max_delay_s'])}</td>"
            f"<td>{_seconds(r['cumulative_typical_s'])}</td></tr>"
            for r in policy["rows"]
        )
        table = (
            "<table class=schedule><thead><tr><th>retry</th><th>min</th><th>typical</th>"
            f"<th>max</th><th>total</th></tr></thead><tbody>{cells}</tbody></table>"
            if cells
            else ""
        )
        previews.append(
            f"<details><summary class=muted>policy: {escape(policy['policy'])}</summary>"
            f"{table}</details>"
        )
    extra = ""
    if node["error"] and not node["attempts"]:
        extra += f"<p>{_error_text(node['error'])}</p>"
    failed = [a for a in node["attempts"] if a["error"] and a["error"].get("traceback")]
    error, what = (
        (failed[-1]["error"], f" of attempt {failed[-1]['number']}")
        if failed
        else (node["error"], "")
    )
    if error and error.get("traceback"):
        extra += (
            f"<details class=traceback><summary>traceback{what}</summary>"
            f"<pre>{escape(error['traceback'])}</pre></details>"
        )
    if node.get("params") is not None:
        extra += _value("params", node["params"])
    if node["output"] is not None:
        extra += _value("output", node["output"])
    return head + bar + attempts + "".join(previews) + extra + "</div>"


def execution_fragment(view: dict[str, Any]) -> str:
    """The live part of the execution page: header facts and every node run's timeline."""
    waiting = view["waiting"]
    facts = [
        ("status", _badge(view["status"])),
        ("workflow", f"{escape(view['workflow_id'])} v{view['workflow_version']}"),
        ("started", _time(view["started_at"])),
        ("updated", _time(view["updated_at"])),
        ("ended", _time(view["completed_at"])),
    ]
    if waiting is not None:
        due = f", due {_time(waiting['due_at'])}" if waiting["due_at"] else ""
        where = f"<code>{escape(waiting['node_key'] or '')}</code>"
        facts.append(("waiting", f"{escape(waiting['kind'])} at {where}{due}"))
    resuming = view.get("resuming")
    if resuming is not None:
        attempt = f" (attempt {resuming['attempt']})" if resuming["attempt"] else ""
        where = f"<code>{escape(resuming['node_key'])}</code>"
        claimed = _time(resuming["claimed_at"])
        text = f"{escape(resuming['kind'])} at {where}{attempt}, claimed {claimed}"
        facts.append(("resuming", f"{text}; the attempt is recorded when it ends"))
    if view.get("lease_expires_at"):
        facts.append(("lease", f"until {_time(view['lease_expires_at'])}"))
    if view.get("redrives"):
        facts.append(("redriven", f"{view['redrives']} time(s) by an operator"))
    if view.get("interruptions"):
        facts.append(
            ("interrupted", f"{view['interruptions']} attempt(s) whose process stopped; run again")
        )
    if view["error"]:
        facts.append(("error", _error_text(view["error"])))
    if view["status"] == "failed":
        command = f"prana redrive {view['id']}"
        hint = (
            f"once the cause is fixed: <code>{escape(command)}</code> "
            "<span class=muted>(add <code>--node KEY</code> to start from an earlier node, "
            "<code>--reset-attempts</code> to give it its retries again)</span>"
        )
        facts.append(("redrive", hint))
    if view.get("input") is not None:
        facts.append(("input", _value("input", view["input"])))
    if view["output"] is not None:
        facts.append(("output", _value("output", view["output"])))
    meta = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    origin = datetime.fromisoformat(view["started_at"]) if view["started_at"] else None
    span_s = 1.0
    if origin is not None:
        ends = [
            datetime.fromisoformat(a["ended_at"] or a["started_at"])
            for n in view["nodes"]
            for a in n["attempts"]
        ]
        if ends:
            span_s = max(1e-3, (max(ends) - origin).total_seconds())
    cards = "".join(_node_card(node, origin, span_s) for node in view["nodes"])
    return (
        f'<dl class="meta card" data-status="{escape(view["status"])}" '
        f'data-version="{view["record_version"]}">{meta}</dl>{cards}'
    )


def _in_path(execution_id: str) -> str:
    """An execution id as one segment of a URL path in an attribute: percent-encoded, so an
    id holding ``#``, ``?`` or ``%`` links to its own page, not to another execution's."""
    return escape(quote(execution_id, safe=""), quote=True)


def execution_page(view: dict[str, Any], *, root: str) -> str:
    """One execution: its fragment, kept live over ``/executions/{id}/events``."""
    base = f"{root}/executions/{_in_path(view['id'])}"
    final = view["status"] in FINAL
    body = (
        f"<h1>Execution <code>{escape(view['id'])}</code> "
        f"<span id=live class=live>{'final' if final else 'connecting…'}</span></h1>"
        f'<div id=execution data-version="{view["record_version"]}"'
        f"{'' if final else f' data-events={chr(34)}{base}/events{chr(34)}'}"
        f' data-fragment="{base}?fragment=1">{execution_fragment(view)}</div>'
    )
    return _page(f"Execution {view['id']}", body, root)


def login_page(*, root: str, next_path: str, failed: bool) -> str:
    """The operator token form; the token is kept in an HttpOnly cookie as an HMAC of it."""
    note = '<p class="err">That token is not valid.</p>' if failed else ""
    body = (
        "<h1>Operator token</h1>"
        "<p class=muted>The view and the API need the operator token "
        "(<code>PRANA_WEB_TOKEN</code>).</p>"
        f'{note}<form method="post" action="{escape(root)}/login" class="filters">'
        f'<input type="hidden" name="next" value="{escape(next_path)}">'
        '<input type="password" name="token" placeholder="token" autofocus>'
        '<button type="submit">Sign in</button></form>'
    )
    return _page("Sign in", body, root)
