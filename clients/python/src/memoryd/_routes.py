"""Every route of memoryd's API, described once as a :class:`Call`: its
request, whether a retry is safe, and what the answer becomes. The clients
(:mod:`memoryd.client`) only send these."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel

from . import models as m
from ._transport import Call, new_idempotency_key, segment

SegmentBody = Mapping[str, Any] | m.Segment
BatchSegmentBody = Mapping[str, Any] | m.Segment
LayoutBody = Mapping[str, Any] | m.LayoutConfig
DateLike = datetime.date | str | None
DateTimeLike = datetime.datetime | str | None

M = TypeVar("M", bound=BaseModel)


def _date_range(from_date: DateLike, to_date: DateLike) -> dict[str, str | None]:
    """``from``/``to`` as the API takes them: UTC dates, ``YYYY-MM-DD``."""

    def text(d: DateLike) -> str | None:
        return d.isoformat() if isinstance(d, datetime.date) else d

    return {"from": text(from_date), "to": text(to_date)}


def as_model(cls: type[M]) -> Callable[[httpx.Response], M]:
    def parse(response: httpx.Response) -> M:
        return cls.model_validate(response.json())

    return parse


def _list(cls: type[M], key: str) -> Callable[[httpx.Response], list[M]]:
    """The items of the answer's list ``key``."""

    def parse(response: httpx.Response) -> list[M]:
        return [cls.model_validate(item) for item in response.json().get(key, [])]

    return parse


def _event_id(response: httpx.Response) -> str:
    return str(response.json()["event_id"])


def nothing(response: httpx.Response) -> None:
    return None


def _text(response: httpx.Response) -> str:
    return response.text


def _layout(response: httpx.Response) -> m.Layout:
    layout = m.Layout.model_validate(response.json())
    if layout.etag is None and response.headers.get("etag"):
        layout.etag = response.headers["etag"]
    return layout


def _instructions(response: httpx.Response) -> m.Instructions | None:
    if response.status_code == 204:
        return None
    return m.Instructions.model_validate(response.json())


def _dump(body: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    if isinstance(body, BaseModel):
        return body.model_dump(mode="json", exclude_unset=True)
    return dict(body)


# -- service -----------------------------------------------------------
def _document(response: httpx.Response) -> dict[str, Any]:
    document: dict[str, Any] = response.json()
    return document


def health() -> Call[dict[str, Any]]:
    """``GET /healthz``: memoryd's process answers, ``{"status": "ok"}``."""
    return Call("GET", "/healthz", _document)


def ready() -> Call[dict[str, Any]]:
    """``GET /readyz``: ``{"status": "ready"}`` when the database answers and the data volume
    has room; raises ``UnavailableError`` saying which is not, otherwise."""
    return Call("GET", "/readyz", _document)


def openapi() -> Call[str]:
    """``GET /openapi.yaml``: the API description this memoryd serves."""
    return Call("GET", "/openapi.yaml", _text)


def metrics() -> Call[str]:
    """``GET /metrics``: Prometheus text."""
    return Call("GET", "/metrics", _text)


# -- admin (needs the admin token) -------------------------------------
def create_tenant(name: str) -> Call[m.NewTenantKey]:
    """``POST /v1/admin/tenants``: a tenant and its first API key (shown once). Not retried."""
    body = m.NewTenant(name=name).model_dump()
    return Call("POST", "/v1/admin/tenants", as_model(m.NewTenantKey), json=body, idempotent=False, admin=True)


def _key_body(
    name: str | None, workspaces: m.KeyWorkspaces | None, permissions: Sequence[str] | None, expires_at: DateTimeLike
) -> dict[str, Any]:
    """The fields given, as the key routes take them."""
    when = expires_at.isoformat() if isinstance(expires_at, datetime.datetime) else expires_at
    fields = {"name": name, "workspaces": workspaces, "permissions": permissions, "expires_at": when}
    return {k: (list(v) if k == "permissions" and v is not None else v) for k, v in fields.items() if v is not None}


def issue_key(
    tenant_id: str,
    *,
    name: str | None = None,
    workspaces: m.KeyWorkspaces | None = None,
    permissions: Sequence[m.Permission] | None = None,
    expires_at: DateTimeLike = None,
) -> Call[m.IssuedKey]:
    """``POST /v1/admin/tenants/{tenant_id}/keys``: another API key (shown once); every
    workspace and permission unless ``workspaces``/``permissions`` narrow it. Not retried."""
    path = f"/v1/admin/tenants/{segment(tenant_id)}/keys"
    body = _key_body(name, workspaces, permissions, expires_at)
    return Call("POST", path, as_model(m.IssuedKey), json=body, idempotent=False, admin=True)


def tenant_keys(tenant_id: str, *, limit: int | None = None, cursor: str | None = None) -> Call[m.KeyList]:
    """``GET /v1/admin/tenants/{tenant_id}/keys``: one page of the tenant's live
    keys and their scopes, newest first; pass ``next_cursor`` as ``cursor`` for the next."""
    params = {"limit": limit, "cursor": cursor}
    return Call("GET", f"/v1/admin/tenants/{segment(tenant_id)}/keys", as_model(m.KeyList), params=params, admin=True)


def list_tenants(*, limit: int | None = None, cursor: str | None = None) -> Call[m.TenantList]:
    """``GET /v1/admin/tenants``: one page of tenants, oldest first, with their
    live keys and sessions counted; pass the page's ``next_cursor`` as
    ``cursor`` for the next."""
    params = {"limit": limit, "cursor": cursor}
    return Call("GET", "/v1/admin/tenants", as_model(m.TenantList), params=params, admin=True)


def revoke_key(key_id: str) -> Call[None]:
    """``DELETE /v1/admin/keys/{key_id}``."""
    return Call("DELETE", f"/v1/admin/keys/{segment(key_id)}", nothing, admin=True)


# -- keys (a tenant's own, with ``manage``) --------------------------------
def create_key(
    workspaces: m.KeyWorkspaces,
    permissions: Sequence[m.Permission],
    *,
    name: str | None = None,
    expires_at: DateTimeLike = None,
) -> Call[m.IssuedKey]:
    """``POST /v1/keys``: a key reaching ``workspaces`` (``"*"`` or names) with
    ``permissions``, within what this client's key holds (else ``ForbiddenError``);
    its secret is shown once. Not retried."""
    body = _key_body(name, workspaces, permissions, expires_at)
    return Call("POST", "/v1/keys", as_model(m.IssuedKey), json=body, idempotent=False)


def list_keys(*, limit: int | None = None, cursor: str | None = None) -> Call[m.KeyList]:
    """``GET /v1/keys``: one page of the live keys this client's key could have
    made, newest first; pass the page's ``next_cursor`` as ``cursor`` for the next."""
    params = {"limit": limit, "cursor": cursor}
    return Call("GET", "/v1/keys", as_model(m.KeyList), params=params)


def delete_key(key_id: str) -> Call[None]:
    """``DELETE /v1/keys/{key_id}``: revokes a key this client's key could have made;
    refused on every replica within a second."""
    return Call("DELETE", f"/v1/keys/{segment(key_id)}", nothing)


def tenant_limits(tenant_id: str) -> Call[m.Limits]:
    """``GET /v1/admin/tenants/{tenant_id}/limits``: the tenant's limits in force."""
    return Call("GET", f"/v1/admin/tenants/{segment(tenant_id)}/limits", as_model(m.Limits), admin=True)


def set_limits(tenant_id: str, **limits: Any) -> Call[m.Limits]:
    """``PUT /v1/admin/tenants/{tenant_id}/limits``: ``requests_per_second=``, ``burst=``,
    ``storage_bytes=``, ``model_tokens_per_day=``, ``open_sessions=`` (left out: the
    server's default; 0: unlimited)."""
    body = m.LimitsBody(**limits).model_dump(exclude_none=True)
    path = f"/v1/admin/tenants/{segment(tenant_id)}/limits"
    return Call("PUT", path, as_model(m.Limits), json=body, admin=True)


def limits() -> Call[m.Limits]:
    """``GET /v1/limits``: this tenant's limits in force (``None``: unlimited)."""
    return Call("GET", "/v1/limits", as_model(m.Limits))


def tenant_usage(tenant_id: str, from_date: DateLike = None, to_date: DateLike = None) -> Call[m.Usage]:
    """``GET /v1/admin/tenants/{tenant_id}/usage``: a tenant's usage, as :meth:`usage`."""
    path = f"/v1/admin/tenants/{segment(tenant_id)}/usage"
    return Call("GET", path, as_model(m.Usage), params=_date_range(from_date, to_date), admin=True)


def usage(from_date: DateLike = None, to_date: DateLike = None) -> Call[m.Usage]:
    """``GET /v1/usage``: what this tenant used per UTC day from ``from_date`` to
    ``to_date`` (inclusive; default the last 30 days), oldest first, and the bytes
    it keeps now."""
    return Call("GET", "/v1/usage", as_model(m.Usage), params=_date_range(from_date, to_date))


def delete_tenant(tenant_id: str) -> Call[m.Job]:
    """``DELETE /v1/admin/tenants/{tenant_id}``: forget a tenant. Its keys stop
    working at once; returns the ``forget`` job that removes its data."""
    return Call("DELETE", f"/v1/admin/tenants/{segment(tenant_id)}", as_model(m.Job), admin=True)


# -- layouts -------------------------------------------------------------
def list_layouts() -> Call[list[m.Layout]]:
    """``GET /v1/layouts``: every layout, the implicit ``default`` included."""
    return Call("GET", "/v1/layouts", _list(m.Layout, "layouts"))


def get_layout(layout: str = "default") -> Call[m.Layout]:
    """``GET /v1/layouts/{layout}``: the layout with its etag."""
    return Call("GET", f"/v1/layouts/{segment(layout)}", _layout)


def put_layout(layout: str, config: LayoutBody, *, if_match: str | None = None) -> Call[m.Layout]:
    """``PUT /v1/layouts/{layout}``: create it, or replace it given its current etag. A
    ``Layout`` just read can be changed and written back: its ``name`` and ``etag`` are
    not sent as config, and its etag is the ``If-Match`` unless one is given."""
    body = {k: v for k, v in _dump(config).items() if k not in ("name", "etag")}
    if if_match is None and isinstance(config, m.Layout):
        if_match = config.etag
    headers = {"if-match": if_match} if if_match else {}
    return Call("PUT", f"/v1/layouts/{segment(layout)}", _layout, json=body, headers=headers)


# -- sessions --------------------------------------------------------------
def open_session(
    session_id: str | None = None,
    *,
    workspace: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Call[m.Session]:
    """``POST /v1/sessions``: open a session (idempotent when ``session_id`` is given)."""
    body = {
        k: v for k, v in (("session_id", session_id), ("workspace", workspace), ("metadata", metadata)) if v is not None
    }
    return Call("POST", "/v1/sessions", as_model(m.Session), json=body, idempotent=session_id is not None)


def list_sessions(
    *,
    state: m.SessionState | None = None,
    workspace: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[m.SessionPage]:
    """``GET /v1/sessions``: one page of sessions, newest first; pass the
    page's ``next_cursor`` as ``cursor`` for the next."""
    params = {"state": state, "workspace": workspace, "limit": limit, "cursor": cursor}
    return Call("GET", "/v1/sessions", as_model(m.SessionPage), params=params)


def list_workspaces() -> Call[list[m.WorkspaceSummary]]:
    """``GET /v1/workspaces``: the tenant's workspaces and their layouts with data."""
    return Call("GET", "/v1/workspaces", _list(m.WorkspaceSummary, "workspaces"))


def get_session(session_id: str) -> Call[m.Session]:
    """``GET /v1/sessions/{session_id}``: state, rollouts and jobs."""
    return Call("GET", f"/v1/sessions/{segment(session_id)}", as_model(m.Session))


def append_segment(
    session_id: str,
    segment_body: SegmentBody,
    *,
    layout: str = "default",
    workspace: str | None = None,
    idempotency_key: str | None = None,
) -> Call[m.AppendedSegment]:
    """``POST /v1/sessions/{session_id}/layouts/{layout}/segments``: append one run.

    Always sends an ``Idempotency-Key`` (``idempotency_key``, or one made
    for this call), the same on every retry, so a retry never appends the
    line twice. The session is created in ``workspace`` if it is new.
    """
    path = f"/v1/sessions/{segment(session_id)}/layouts/{segment(layout)}/segments"
    key = idempotency_key or new_idempotency_key()
    return Call(
        "POST",
        path,
        as_model(m.AppendedSegment),
        params={"workspace": workspace},
        json=_dump(segment_body),
        headers={"idempotency-key": key},
    )


def append_segments(
    session_id: str,
    segments: Sequence[BatchSegmentBody],
    *,
    layout: str = "default",
    workspace: str | None = None,
    idempotency_key: str | None = None,
) -> Call[m.AppendedBatch]:
    """``POST /v1/sessions/{session_id}/segments:batch``: append many runs in
    order, all of them or none.

    A segment goes to its own ``"layout"`` (a :class:`~memoryd.models.BatchSegment`
    or a mapping with that key), else to ``layout``. One ``Idempotency-Key``
    covers the whole batch, the same on every retry. A batch refused for one
    of its segments raises with that segment's place in ``error.index``.
    """
    bodies = []
    for body in segments:
        dumped = _dump(body)
        dumped.setdefault("layout", layout)
        bodies.append(dumped)
    key = idempotency_key or new_idempotency_key()
    return Call(
        "POST",
        f"/v1/sessions/{segment(session_id)}/segments:batch",
        as_model(m.AppendedBatch),
        params={"workspace": workspace},
        json={"segments": bodies},
        headers={"idempotency-key": key},
    )


def close_session(session_id: str, *, wait: int | None = None) -> Call[m.CloseResult]:
    """``POST /v1/sessions/{session_id}/close``: queue its memory jobs; with
    ``wait`` (0-300 s) hold until it is closed or the time passes."""
    return Call(
        "POST",
        f"/v1/sessions/{segment(session_id)}/close",
        as_model(m.CloseResult),
        params={"wait": wait},
        extra_time=float(wait or 0),
    )


# -- jobs ------------------------------------------------------------------
def list_jobs(
    *,
    state: m.JobState | None = None,
    kind: m.JobKind | None = None,
    session_id: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[m.JobList]:
    """``GET /v1/jobs``: one page of the tenant's jobs, newest first."""
    params = {"state": state, "kind": kind, "session_id": session_id, "limit": limit, "cursor": cursor}
    return Call("GET", "/v1/jobs", as_model(m.JobList), params=params)


def get_job(job_id: str) -> Call[m.Job]:
    """``GET /v1/jobs/{job_id}``."""
    return Call("GET", f"/v1/jobs/{segment(job_id)}", as_model(m.Job))


def retry_job(job_id: str) -> Call[m.Job]:
    """``POST /v1/jobs/{job_id}/retry``: queue a failed job again. Not retried after a
    broken connection: the first may have queued it (a second answers 409)."""
    return Call("POST", f"/v1/jobs/{segment(job_id)}/retry", as_model(m.Job), idempotent=False)


# -- memory ----------------------------------------------------------------
def _memory_path(workspace: str, layout: str, rest: str) -> str:
    return f"/v1/workspaces/{segment(workspace)}/layouts/{segment(layout)}/{rest}"


def get_selection(workspace: str = "default", layout: str = "default") -> Call[m.PhaseTwoSelection]:
    """``GET …/phase_two_selection``: the last successful consolidation's selection."""
    path = _memory_path(workspace, layout, "phase_two_selection")
    return Call("GET", path, as_model(m.PhaseTwoSelection))


def list_runs(
    workspace: str = "default",
    layout: str = "default",
    *,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[m.RunList]:
    """``GET …/runs``: one page of consolidation runs, newest first."""
    path = _memory_path(workspace, layout, "runs")
    return Call("GET", path, as_model(m.RunList), params={"limit": limit, "cursor": cursor})


def get_run(run_id: str, *, workspace: str = "default", layout: str = "default") -> Call[m.RunDetail]:
    """``GET …/runs/{run_id}``: one run and the diff of every file it changed."""
    path = _memory_path(workspace, layout, f"runs/{segment(run_id)}")
    return Call("GET", path, as_model(m.RunDetail))


def restore_run(run_id: str, *, workspace: str = "default", layout: str = "default") -> Call[m.Job]:
    """``POST …/runs/{run_id}/restore``: queue a restore of the memory to what
    the run left; returns the ``restore`` job. Not retried after a broken
    connection: a second would queue a second restore."""
    path = _memory_path(workspace, layout, f"runs/{segment(run_id)}/restore")
    return Call("POST", path, as_model(m.Job), idempotent=False)


def forget_rollout(
    rollout_id: str, *, workspace: str = "default", layout: str = "default", mode: str | None = None
) -> Call[m.Job]:
    """``DELETE …/rollouts/{rollout_id}``: forget one conversation (``mode``
    ``scrub``, the default, or ``rebuild``); returns the ``forget`` job."""
    path = _memory_path(workspace, layout, f"rollouts/{segment(rollout_id)}")
    return Call("DELETE", path, as_model(m.Job), params={"mode": mode})


def forget_workspace(workspace: str) -> Call[m.Job]:
    """``DELETE /v1/workspaces/{workspace}``: forget a workspace; returns the ``forget`` job."""
    return Call("DELETE", f"/v1/workspaces/{segment(workspace)}", as_model(m.Job))


def list_files(workspace: str = "default", layout: str = "default") -> Call[list[m.MemoryFile]]:
    """``GET …/files``: every file of the layout's memory folder."""
    return Call("GET", _memory_path(workspace, layout, "files"), _list(m.MemoryFile, "files"))


def get_file(path: str, *, workspace: str = "default", layout: str = "default", run_id: str | None = None) -> Call[str]:
    """``GET …/files/{path}``: a file of the layout's memory folder, as text;
    with ``run_id``, as it was right after that run."""
    encoded = "/".join(segment(part) for part in path.split("/"))
    call = Call("GET", _memory_path(workspace, layout, f"files/{encoded}"), _text, params={"run_id": run_id})
    return call


def get_instructions(
    workspace: str = "default",
    layout: str = "default",
    *,
    live_update: bool | None = None,
    timeout: float | None = None,
) -> Call[m.Instructions | None]:
    """``GET …/instructions``: the memory instructions for the next run, or
    ``None`` when there are none yet (204). ``timeout``: seconds for the
    whole call, its retries included."""
    path = _memory_path(workspace, layout, "instructions")
    return Call("GET", path, _instructions, params={"live_update": live_update}, budget=timeout)


# -- the running agent's memory -------------------------------
def list_memory(
    path: str | None = None, *, workspace: str = "default", layout: str = "default", cursor: str | None = None
) -> Call[m.MemoryListing]:
    """``GET …/memory/list``: the files and folders under ``path`` (default: the
    whole memory folder), sorted, at most 2,000 a page."""
    params = {"path": path, "cursor": cursor}
    return Call("GET", _memory_path(workspace, layout, "memory/list"), as_model(m.MemoryListing), params=params)


def read_memory(
    path: str,
    *,
    workspace: str = "default",
    layout: str = "default",
    offset: int | None = None,
    limit: int | None = None,
    session_id: str | None = None,
) -> Call[m.MemoryRead]:
    """``GET …/memory/read``: lines of a memory file from ``offset`` (1-based), at
    most ``limit`` and 80,000 bytes; with ``session_id`` a read of a rollout
    summary or raw memory counts as a use of it."""
    params = {"path": path, "offset": offset, "limit": limit, "session_id": session_id}
    return Call("GET", _memory_path(workspace, layout, "memory/read"), as_model(m.MemoryRead), params=params)


def search_memory(
    query: str,
    *,
    workspace: str = "default",
    layout: str = "default",
    path: str | None = None,
    regex: bool | None = None,
    case_sensitive: bool | None = None,
    context: int | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    mode: Literal["substring", "regex", "ranked", "semantic", "hybrid"] | None = None,
) -> Call[m.MemorySearch | m.MemoryPassages]:
    """``GET …/memory/search``: matching lines, MEMORY.md first; with ``mode``
    ``ranked`` (words), ``semantic`` (embeddings) or ``hybrid`` (both), the
    passages that answer the query best, best first."""
    params = {
        "query": query,
        "mode": mode,
        "path": path,
        "regex": regex,
        "case_sensitive": case_sensitive,
        "context": context,
        "limit": limit,
        "cursor": cursor,
    }
    return Call("GET", _memory_path(workspace, layout, "memory/search"), _search_answer, params=params)


def _search_answer(response: httpx.Response) -> m.MemorySearch | m.MemoryPassages:
    """Lines, or passages when the answer names the mode that ranked them."""
    body = response.json()
    if "mode" in body:
        return m.MemoryPassages.model_validate(body)
    return m.MemorySearch.model_validate(body)


def _published_or_job(response: httpx.Response) -> m.PublishedEdit | m.Job:
    if response.status_code == 202:
        return m.Job.model_validate(response.json())
    return m.PublishedEdit.model_validate(response.json())


def edit_memory(
    *,
    patch: str | None = None,
    operations: Sequence[Mapping[str, Any] | m.MemoryCommand] | None = None,
    expect: Mapping[str, str | None] | None = None,
    session_id: str | None = None,
    rollout_id: str | None = None,
    reason: str | None = None,
    workspace: str = "default",
    layout: str = "default",
    wait: int | None = None,
) -> Call[m.PublishedEdit | m.Job]:
    """``POST …/memory/edits``: a V4A ``patch`` or memory-tool ``operations``,
    all or none; the published edit, or its job when it did not publish within
    ``wait`` seconds (default 10). Not retried: an edit applied twice is two edits."""
    body: dict[str, Any] = {}
    if patch is not None:
        body["patch"] = patch
    if operations is not None:
        body["operations"] = [_dump(op) for op in operations]
    for name, value in (("expect", expect), ("session_id", session_id), ("rollout_id", rollout_id), ("reason", reason)):
        if value is not None:
            body[name] = dict(value) if isinstance(value, Mapping) else value
    path = _memory_path(workspace, layout, "memory/edits")
    return Call(
        "POST",
        path,
        _published_or_job,
        params={"wait": wait},
        json=body,
        idempotent=False,
        extra_time=float(wait if wait is not None else 10),
    )


# -- webhooks and events ---------------------------------------------------
def create_webhook(
    url: str, *, events: Sequence[str] | None = None, description: str | None = None
) -> Call[m.WebhookWithSecret]:
    """``POST /v1/webhooks``: an endpoint for ``events`` (default all); the
    answer's ``secret`` is shown this once. Not retried."""
    body = m.WebhookBody(url=url, events=list(events) if events is not None else None, description=description)
    return Call(
        "POST", "/v1/webhooks", as_model(m.WebhookWithSecret), json=body.model_dump(exclude_none=True), idempotent=False
    )


def list_webhooks() -> Call[list[m.Webhook]]:
    """``GET /v1/webhooks``: this tenant's endpoints (never their secrets)."""
    return Call("GET", "/v1/webhooks", _list(m.Webhook, "webhooks"))


def get_webhook(webhook_id: str) -> Call[m.Webhook]:
    """``GET /v1/webhooks/{webhook_id}``."""
    return Call("GET", f"/v1/webhooks/{segment(webhook_id)}", as_model(m.Webhook))


def delete_webhook(webhook_id: str) -> Call[None]:
    """``DELETE /v1/webhooks/{webhook_id}``: the endpoint; its pending deliveries are dropped."""
    return Call("DELETE", f"/v1/webhooks/{segment(webhook_id)}", nothing)


class _Unset:
    """A field left as it is (``None`` clears a description)."""


UNSET = _Unset()


def update_webhook(
    webhook_id: str,
    *,
    url: str | None = None,
    events: Sequence[str] | None = None,
    description: str | None | _Unset = UNSET,
    state: Literal["enabled", "disabled"] | None = None,
) -> Call[m.Webhook]:
    """``PATCH /v1/webhooks/{webhook_id}``: a new url, event types or
    description (``None`` clears it), or ``state="enabled"`` to turn a disabled
    endpoint on again (``"disabled"`` turns it off); its secret stays."""
    body: dict[str, Any] = {}
    if url is not None:
        body["url"] = url
    if events is not None:
        body["events"] = list(events)
    if not isinstance(description, _Unset):
        body["description"] = description
    if state is not None:
        body["state"] = state
    return Call("PATCH", f"/v1/webhooks/{segment(webhook_id)}", as_model(m.Webhook), json=body)


def rotate_webhook(webhook_id: str) -> Call[m.WebhookWithSecret]:
    """``POST /v1/webhooks/{webhook_id}/rotate``: a new secret (shown this
    once); the old one keeps signing for 24 hours. Not retried."""
    path = f"/v1/webhooks/{segment(webhook_id)}/rotate"
    return Call("POST", path, as_model(m.WebhookWithSecret), idempotent=False)


def test_webhook(webhook_id: str) -> Call[str]:
    """``POST /v1/webhooks/{webhook_id}/test``: a ``webhook.test`` event to this
    endpoint alone; returns the event's id. Not retried."""
    path = f"/v1/webhooks/{segment(webhook_id)}/test"
    return Call("POST", path, _event_id, idempotent=False)


def webhook_deliveries(webhook_id: str, *, limit: int | None = None) -> Call[list[m.Delivery]]:
    """``GET /v1/webhooks/{webhook_id}/deliveries``: newest first."""
    path = f"/v1/webhooks/{segment(webhook_id)}/deliveries"
    return Call("GET", path, _list(m.Delivery, "deliveries"), params={"limit": limit})
