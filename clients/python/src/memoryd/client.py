"""The memoryd clients: :class:`Memoryd` (sync) and :class:`AsyncMemoryd` (async).

Both have the same methods, one per route of memoryd's API; the async
client's return awaitables. Each method describes its call once (in
``_Routes``), and each client only sends it, retrying what is transient.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from typing import IO, Any, AsyncIterator, Iterator, Mapping, Optional, Sequence, Union

import httpx

from . import models as m
from ._transport import (
    Attempts,
    Call,
    RetryPolicy,
    Settings,
    connection_error,
    error_from_response,
    new_idempotency_key,
    segment,
)
from .webhooks import EventStreamParser

SegmentBody = Union[Mapping[str, Any], m.Segment]
LayoutBody = Union[Mapping[str, Any], m.LayoutConfig]
DateLike = Union[datetime.date, str, None]
Destination = Union[str, "os.PathLike[str]", IO[bytes]]
Source = Union[str, "os.PathLike[str]", IO[bytes]]


def _date_range(from_date: DateLike, to_date: DateLike) -> dict[str, Optional[str]]:
    """``from``/``to`` as the API takes them: UTC dates, ``YYYY-MM-DD``."""
    text = lambda d: d.isoformat() if isinstance(d, datetime.date) else d
    return {"from": text(from_date), "to": text(to_date)}


def _model(cls):
    def parse(response: httpx.Response):
        return cls.model_validate(response.json())

    return parse


def _field(cls, name: str):
    def parse(response: httpx.Response):
        return getattr(cls.model_validate(response.json()), name)

    return parse


def _export_call(workspace: str) -> Call:
    return Call("GET", f"/v1/workspaces/{segment(workspace)}/export", _nothing)


class _Sink:
    """Where an export's bytes go: a path (written anew by each attempt) or
    an open binary file (which an attempt, once it wrote, cannot take back)."""

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.file: Optional[IO[bytes]] = None
        self.written = 0

    def __enter__(self) -> "_Sink":
        if isinstance(self.destination, (str, os.PathLike)):
            self.file = open(self.destination, "wb")
        else:
            self.file = self.destination
        return self

    def write(self, chunk: bytes) -> None:
        assert self.file is not None
        self.file.write(chunk)
        self.written += len(chunk)

    def __exit__(self, *exc_info: Any) -> None:
        if self.file is not None and self.file is not self.destination:
            self.file.close()


def _import_call(workspace: str) -> Call:
    return Call(
        "POST",
        f"/v1/workspaces/{segment(workspace)}/import",
        _model(m.Job),
        headers={"content-type": "application/gzip"},
    )


class _Archive:
    """An import's body: a path (opened anew by each attempt) or an open binary
    file (rewound for a retry when it can be)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.start = None
        if not isinstance(source, (str, os.PathLike)) and source.seekable():
            self.start = source.tell()

    def open(self) -> IO[bytes]:
        if isinstance(self.source, (str, os.PathLike)):
            return open(self.source, "rb")
        if self.start is not None:
            self.source.seek(self.start)
        return self.source

    def retryable(self) -> bool:
        return isinstance(self.source, (str, os.PathLike)) or self.start is not None

    def done(self, opened: IO[bytes]) -> None:
        if opened is not self.source:
            opened.close()


def _chunks(file: IO[bytes], size: int = 1 << 16):
    while True:
        chunk = file.read(size)
        if not chunk:
            return
        yield chunk


async def _async_chunks(file: IO[bytes], size: int = 1 << 16):
    for chunk in _chunks(file, size):
        yield chunk


def _field_list(cls, name: str):
    def parse(response: httpx.Response):
        return [cls.model_validate(item) for item in response.json()[name]]

    return parse


def _json_field(name: str):
    def parse(response: httpx.Response):
        return response.json()[name]

    return parse


def _events_request(
    settings: Settings, types: Optional[Sequence[str]], last_event_id: Optional[str]
) -> tuple[str, dict[str, Any]]:
    """The URL and request options of one connection of an event stream."""
    headers = {"accept": "text/event-stream"}
    if last_event_id:
        headers["last-event-id"] = last_event_id
    params = {"types": ",".join(types) if types else None}
    attempts = Attempts(Call("GET", "/v1/events", _nothing, params=params, headers=headers), settings)
    options = attempts.options()
    options.pop("json", None)
    # Longer than the 15 s between keep-alive comments.
    options["timeout"] = httpx.Timeout(settings.timeout, read=60.0)
    return attempts.url(), options


def _nothing(response: httpx.Response) -> None:
    return None


def _text(response: httpx.Response) -> str:
    return response.text


def _layout(response: httpx.Response) -> m.Layout:
    layout = m.Layout.model_validate(response.json())
    if layout.etag is None and response.headers.get("etag"):
        layout.etag = response.headers["etag"]
    return layout


def _instructions(response: httpx.Response) -> Optional[m.Instructions]:
    if response.status_code == 204:
        return None
    return m.Instructions.model_validate(response.json())


def _dump(body: Any) -> Any:
    if isinstance(body, m.LayoutConfig):
        return body.model_dump(mode="json", exclude_unset=True)
    if isinstance(body, m.Segment):
        return body.model_dump(mode="json", exclude_unset=True)
    return dict(body)


class _Routes:
    """Every route of memoryd's API, as a :class:`Call` handed to ``_send``."""

    def _send(self, call: Call) -> Any:  # pragma: no cover - both clients define it
        raise NotImplementedError

    # -- service -----------------------------------------------------------
    def health(self):
        """``GET /healthz``: memoryd's process answers."""
        return self._send(Call("GET", "/healthz", _nothing))

    def ready(self):
        """``GET /readyz``: the database answers and the data volume has room (raises otherwise)."""
        return self._send(Call("GET", "/readyz", _nothing))

    def openapi(self):
        """``GET /openapi.yaml``: the API description this memoryd serves."""
        return self._send(Call("GET", "/openapi.yaml", _text))

    def metrics(self):
        """``GET /metrics``: Prometheus text."""
        return self._send(Call("GET", "/metrics", _text))

    # -- admin (needs the admin token) -------------------------------------
    def create_tenant(self, name: str):
        """``POST /v1/admin/tenants``: a tenant and its first API key (shown once). Not retried."""
        body = m.NewTenant(name=name).model_dump()
        return self._send(Call("POST", "/v1/admin/tenants", _model(m.IssuedKey), json=body, idempotent=False, admin=True))

    def issue_key(self, tenant_id: str):
        """``POST /v1/admin/tenants/{tenant_id}/keys``: another API key. Not retried."""
        path = f"/v1/admin/tenants/{segment(tenant_id)}/keys"
        return self._send(Call("POST", path, _model(m.IssuedKey), idempotent=False, admin=True))

    def list_tenants(self, *, limit: Optional[int] = None, cursor: Optional[str] = None):
        """``GET /v1/admin/tenants``: one page of tenants, oldest first, with their
        live keys and sessions counted; pass the page's ``next_cursor`` as
        ``cursor`` for the next."""
        params = {"limit": limit, "cursor": cursor}
        return self._send(Call("GET", "/v1/admin/tenants", _model(m.TenantList), params=params, admin=True))

    def revoke_key(self, key_id: str):
        """``DELETE /v1/admin/keys/{key_id}``."""
        return self._send(Call("DELETE", f"/v1/admin/keys/{segment(key_id)}", _nothing, admin=True))

    def tenant_limits(self, tenant_id: str):
        """``GET /v1/admin/tenants/{tenant_id}/limits``: the tenant's limits in force."""
        return self._send(Call("GET", f"/v1/admin/tenants/{segment(tenant_id)}/limits", _model(m.Limits), admin=True))

    def set_limits(self, tenant_id: str, **limits: Any):
        """``PUT /v1/admin/tenants/{tenant_id}/limits``: ``requests_per_second=``, ``burst=``,
        ``storage_bytes=``, ``model_tokens_per_day=``, ``open_sessions=`` (left out: the
        server's default; 0: unlimited)."""
        body = m.LimitsBody(**limits).model_dump(exclude_none=True)
        path = f"/v1/admin/tenants/{segment(tenant_id)}/limits"
        return self._send(Call("PUT", path, _model(m.Limits), json=body, admin=True))

    def limits(self):
        """``GET /v1/limits``: this tenant's limits in force (``None``: unlimited)."""
        return self._send(Call("GET", "/v1/limits", _model(m.Limits)))

    def tenant_usage(self, tenant_id: str, from_date: DateLike = None, to_date: DateLike = None):
        """``GET /v1/admin/tenants/{tenant_id}/usage``: a tenant's usage, as :meth:`usage`."""
        path = f"/v1/admin/tenants/{segment(tenant_id)}/usage"
        return self._send(Call("GET", path, _model(m.Usage), params=_date_range(from_date, to_date), admin=True))

    def usage(self, from_date: DateLike = None, to_date: DateLike = None):
        """``GET /v1/usage``: what this tenant used per UTC day from ``from_date`` to
        ``to_date`` (inclusive; default the last 30 days), oldest first, and the bytes
        it keeps now."""
        return self._send(Call("GET", "/v1/usage", _model(m.Usage), params=_date_range(from_date, to_date)))

    def delete_tenant(self, tenant_id: str):
        """``DELETE /v1/admin/tenants/{tenant_id}``: forget a tenant. Its keys stop
        working at once; returns the ``forget`` job that removes its data."""
        return self._send(Call("DELETE", f"/v1/admin/tenants/{segment(tenant_id)}", _model(m.Job), admin=True))

    # -- layouts -------------------------------------------------------------
    def list_layouts(self):
        """``GET /v1/layouts``: every layout, the implicit ``default`` included."""
        return self._send(Call("GET", "/v1/layouts", _field(m.LayoutList, "layouts")))

    def get_layout(self, layout: str = "default"):
        """``GET /v1/layouts/{layout}``: the layout with its etag."""
        return self._send(Call("GET", f"/v1/layouts/{segment(layout)}", _layout))

    def put_layout(self, layout: str, config: LayoutBody, *, if_match: Optional[str] = None):
        """``PUT /v1/layouts/{layout}``: create it, or replace it given its current etag."""
        headers = {"if-match": if_match} if if_match else {}
        return self._send(Call("PUT", f"/v1/layouts/{segment(layout)}", _layout, json=_dump(config), headers=headers))

    # -- sessions --------------------------------------------------------------
    def open_session(
        self,
        session_id: Optional[str] = None,
        *,
        workspace: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ):
        """``POST /v1/sessions``: open a session (idempotent when ``session_id`` is given)."""
        body = {k: v for k, v in (("session_id", session_id), ("workspace", workspace), ("metadata", metadata)) if v is not None}
        return self._send(
            Call("POST", "/v1/sessions", _model(m.Session), json=body, idempotent=session_id is not None)
        )

    def list_sessions(
        self,
        *,
        state: Optional[str] = None,
        workspace: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ):
        """``GET /v1/sessions``: one page of sessions, newest first; pass the
        page's ``next_cursor`` as ``cursor`` for the next."""
        params = {"state": state, "workspace": workspace, "limit": limit, "cursor": cursor}
        return self._send(Call("GET", "/v1/sessions", _model(m.SessionPage), params=params))

    def list_workspaces(self):
        """``GET /v1/workspaces``: the tenant's workspaces and their layouts with data."""
        return self._send(Call("GET", "/v1/workspaces", _field(m.WorkspaceList, "workspaces")))

    def get_session(self, session_id: str):
        """``GET /v1/sessions/{session_id}``: state, rollouts and jobs."""
        return self._send(Call("GET", f"/v1/sessions/{segment(session_id)}", _model(m.Session)))

    def append_segment(
        self,
        session_id: str,
        segment_body: SegmentBody,
        *,
        layout: str = "default",
        workspace: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ):
        """``POST /v1/sessions/{session_id}/layouts/{layout}/segments``: append one run.

        Always sends an ``Idempotency-Key`` (``idempotency_key``, or one made
        for this call), the same on every retry, so a retry never appends the
        line twice. The session is created in ``workspace`` if it is new.
        """
        path = f"/v1/sessions/{segment(session_id)}/layouts/{segment(layout)}/segments"
        key = idempotency_key or new_idempotency_key()
        return self._send(
            Call(
                "POST",
                path,
                _model(m.AppendedSegment),
                params={"workspace": workspace},
                json=_dump(segment_body),
                headers={"idempotency-key": key},
            )
        )

    def close_session(self, session_id: str, *, wait: Optional[int] = None):
        """``POST /v1/sessions/{session_id}/close``: queue its memory jobs; with
        ``wait`` (0-300 s) hold until it is closed or the time passes."""
        return self._send(
            Call(
                "POST",
                f"/v1/sessions/{segment(session_id)}/close",
                _model(m.CloseResult),
                params={"wait": wait},
                extra_time=float(wait or 0),
            )
        )

    # -- jobs ------------------------------------------------------------------
    def list_jobs(
        self,
        *,
        state: Optional[str] = None,
        kind: Optional[str] = None,
        session_id: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ):
        """``GET /v1/jobs``: one page of the tenant's jobs, newest first."""
        params = {"state": state, "kind": kind, "session_id": session_id, "limit": limit, "cursor": cursor}
        return self._send(Call("GET", "/v1/jobs", _model(m.JobList), params=params))

    def get_job(self, job_id: str):
        """``GET /v1/jobs/{job_id}``."""
        return self._send(Call("GET", f"/v1/jobs/{segment(job_id)}", _model(m.Job)))

    def retry_job(self, job_id: str):
        """``POST /v1/jobs/{job_id}/retry``: queue a failed job again."""
        return self._send(Call("POST", f"/v1/jobs/{segment(job_id)}/retry", _model(m.Job)))

    # -- memory ----------------------------------------------------------------
    def _memory_path(self, workspace: str, layout: str, rest: str) -> str:
        return f"/v1/workspaces/{segment(workspace)}/layouts/{segment(layout)}/{rest}"

    def get_selection(self, workspace: str = "default", layout: str = "default"):
        """``GET …/phase_two_selection``: the last successful consolidation's selection."""
        path = self._memory_path(workspace, layout, "phase_two_selection")
        return self._send(Call("GET", path, _model(m.PhaseTwoSelection)))

    def list_runs(
        self,
        workspace: str = "default",
        layout: str = "default",
        *,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ):
        """``GET …/runs``: one page of consolidation runs, newest first."""
        path = self._memory_path(workspace, layout, "runs")
        return self._send(Call("GET", path, _model(m.RunList), params={"limit": limit, "cursor": cursor}))

    def get_run(self, run_id: str, *, workspace: str = "default", layout: str = "default"):
        """``GET …/runs/{run_id}``: one run and the diff of every file it changed."""
        path = self._memory_path(workspace, layout, f"runs/{segment(run_id)}")
        return self._send(Call("GET", path, _model(m.RunDetail)))

    def restore_run(self, run_id: str, *, workspace: str = "default", layout: str = "default"):
        """``POST …/runs/{run_id}/restore``: queue a restore of the memory to what
        the run left; returns the ``restore`` job."""
        path = self._memory_path(workspace, layout, f"runs/{segment(run_id)}/restore")
        return self._send(Call("POST", path, _model(m.Job)))

    def forget_rollout(
        self, rollout_id: str, *, workspace: str = "default", layout: str = "default", mode: Optional[str] = None
    ):
        """``DELETE …/rollouts/{rollout_id}``: forget one conversation (``mode``
        ``scrub``, the default, or ``rebuild``); returns the ``forget`` job."""
        path = self._memory_path(workspace, layout, f"rollouts/{segment(rollout_id)}")
        return self._send(Call("DELETE", path, _model(m.Job), params={"mode": mode}))

    def forget_workspace(self, workspace: str):
        """``DELETE /v1/workspaces/{workspace}``: forget a workspace; returns the ``forget`` job."""
        return self._send(Call("DELETE", f"/v1/workspaces/{segment(workspace)}", _model(m.Job)))

    def list_files(self, workspace: str = "default", layout: str = "default"):
        """``GET …/files``: every file of the layout's memory folder."""
        return self._send(Call("GET", self._memory_path(workspace, layout, "files"), _field(m.FileList, "files")))

    def get_file(
        self, path: str, *, workspace: str = "default", layout: str = "default", run_id: Optional[str] = None
    ):
        """``GET …/files/{path}``: a file of the layout's memory folder, as text;
        with ``run_id``, as it was right after that run."""
        encoded = "/".join(segment(part) for part in path.split("/"))
        call = Call("GET", self._memory_path(workspace, layout, f"files/{encoded}"), _text, params={"run_id": run_id})
        return self._send(call)

    def get_instructions(
        self,
        workspace: str = "default",
        layout: str = "default",
        *,
        live_update: Optional[bool] = None,
        timeout: Optional[float] = None,
    ):
        """``GET …/instructions``: the memory instructions for the next run, or
        ``None`` when there are none yet (204). ``timeout``: seconds for the
        whole call, its retries included."""
        path = self._memory_path(workspace, layout, "instructions")
        return self._send(Call("GET", path, _instructions, params={"live_update": live_update}, budget=timeout))


    # -- webhooks and events ---------------------------------------------------
    def create_webhook(
        self, url: str, *, events: Optional[Sequence[str]] = None, description: Optional[str] = None
    ):
        """``POST /v1/webhooks``: an endpoint for ``events`` (default all); the
        answer's ``secret`` is shown this once. Not retried."""
        body = m.WebhookBody(url=url, events=list(events) if events is not None else None, description=description)
        return self._send(
            Call("POST", "/v1/webhooks", _model(m.WebhookWithSecret), json=body.model_dump(exclude_none=True), idempotent=False)
        )

    def list_webhooks(self):
        """``GET /v1/webhooks``: this tenant's endpoints (never their secrets)."""
        return self._send(Call("GET", "/v1/webhooks", _field_list(m.Webhook, "webhooks")))

    def get_webhook(self, webhook_id: str):
        """``GET /v1/webhooks/{webhook_id}``."""
        return self._send(Call("GET", f"/v1/webhooks/{segment(webhook_id)}", _model(m.Webhook)))

    def delete_webhook(self, webhook_id: str):
        """``DELETE /v1/webhooks/{webhook_id}``: the endpoint; its pending deliveries are dropped."""
        return self._send(Call("DELETE", f"/v1/webhooks/{segment(webhook_id)}", _nothing))

    def rotate_webhook(self, webhook_id: str):
        """``POST /v1/webhooks/{webhook_id}/rotate``: a new secret (shown this
        once); the old one keeps signing for 24 hours. Not retried."""
        path = f"/v1/webhooks/{segment(webhook_id)}/rotate"
        return self._send(Call("POST", path, _model(m.WebhookWithSecret), idempotent=False))

    def test_webhook(self, webhook_id: str):
        """``POST /v1/webhooks/{webhook_id}/test``: a ``webhook.test`` event to this
        endpoint alone; returns the event's id. Not retried."""
        path = f"/v1/webhooks/{segment(webhook_id)}/test"
        return self._send(Call("POST", path, _json_field("event_id"), idempotent=False))

    def webhook_deliveries(self, webhook_id: str, *, limit: Optional[int] = None):
        """``GET /v1/webhooks/{webhook_id}/deliveries``: newest first."""
        path = f"/v1/webhooks/{segment(webhook_id)}/deliveries"
        return self._send(Call("GET", path, _field_list(m.Delivery, "deliveries"), params={"limit": limit}))


class _Client(_Routes):
    """What both clients hold: their settings and their HTTP client."""

    def __init__(
        self,
        base_url: Optional[str],
        api_key: Optional[str],
        admin_token: Optional[str],
        retry: Optional[RetryPolicy],
        max_retries: Optional[int],
        timeout: float,
        http_client: Any,
        make_http: Any,
    ) -> None:
        self._settings = Settings.resolve(base_url, api_key, admin_token, retry, max_retries, timeout)
        self._owns_http = http_client is None
        self._http = http_client or make_http(timeout=timeout)

    @property
    def base_url(self) -> str:
        return self._settings.base_url


class Memoryd(_Client):
    """The synchronous client.

    ``base_url`` and ``api_key`` default to ``MEMORYD_URL`` and
    ``MEMORYD_API_KEY``; ``admin_token`` (``MEMORYD_ADMIN_TOKEN``) is needed
    only for the admin routes. Transient failures are retried per ``retry``
    (or ``max_retries`` with the default backoff).
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        admin_token: Optional[str] = None,
        retry: Optional[RetryPolicy] = None,
        max_retries: Optional[int] = None,
        timeout: float = 30.0,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        super().__init__(base_url, api_key, admin_token, retry, max_retries, timeout, http_client, httpx.Client)

    def _send(self, call: Call) -> Any:
        attempts = Attempts(call, self._settings)
        while True:
            try:
                answer: Any = self._http.request(call.method, attempts.url(), **attempts.options())
            except httpx.TransportError as exc:
                answer = exc
            outcome = attempts.judge(answer)
            if outcome.error is None:
                return outcome.value
            if outcome.wait is None:
                raise outcome.error
            time.sleep(outcome.wait)

    def export_workspace(self, workspace: str, destination: Destination) -> int:
        """``GET /v1/workspaces/{workspace}/export``: the workspace as a gzip tar,
        streamed to ``destination`` (a path, or a binary file open for writing)
        without holding it in memory. Returns the bytes written. A failure before
        the archive starts is retried like any call; one after its first byte is
        raised (a path is then left incomplete)."""
        call = _export_call(workspace)
        attempts = Attempts(call, self._settings)
        while True:
            with _Sink(destination) as sink:
                try:
                    with self._http.stream(call.method, attempts.url(), **attempts.options()) as response:
                        if response.status_code < 400:
                            for chunk in response.iter_bytes():
                                sink.write(chunk)
                            return sink.written
                        response.read()
                        answer: Any = response
                except httpx.TransportError as exc:
                    if sink.written:
                        raise connection_error(exc) from exc
                    answer = exc
            outcome = attempts.judge(answer)
            if outcome.wait is None:
                raise outcome.error or RuntimeError("an export attempt ended without an answer")
            time.sleep(outcome.wait)

    def import_workspace(self, workspace: str, source: Source):
        """``POST /v1/workspaces/{workspace}/import``: a gzip tar (an export, or a
        workspace the SDK wrote) from ``source`` (a path, or a binary file open for
        reading), streamed, into an empty workspace. Returns the ``import`` job."""
        call = _import_call(workspace)
        archive = _Archive(source)
        attempts = Attempts(call, self._settings)
        while True:
            body = archive.open()
            try:
                options = attempts.options()
                options.pop("json", None)
                answer: Any = self._http.request(call.method, attempts.url(), content=_chunks(body), **options)
            except httpx.TransportError as exc:
                answer = exc
            finally:
                archive.done(body)
            outcome = attempts.judge(answer)
            if outcome.error is None:
                return outcome.value
            if outcome.wait is None or not archive.retryable():
                raise outcome.error
            time.sleep(outcome.wait)

    def events(
        self,
        types: Optional[Sequence[str]] = None,
        *,
        last_event_id: Optional[str] = None,
        reconnect: bool = True,
    ) -> Iterator[m.StreamedEvent]:
        """``GET /v1/events``: this tenant's events as they happen (``types``:
        only those). A broken connection is made again after the last event
        seen (``Last-Event-ID``), so none is missed while the outbox keeps them;
        ``reconnect=False`` raises instead. Stop by breaking out of the loop."""
        last = last_event_id
        while True:
            url, options = _events_request(self._settings, types, last)
            try:
                with self._http.stream("GET", url, **options) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise error_from_response(response)
                    parser = EventStreamParser()
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            last = event.id
                            yield event
            except httpx.TransportError as exc:
                if not reconnect:
                    raise connection_error(exc) from exc
            if not reconnect:
                return
            time.sleep(1.0)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> "Memoryd":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncMemoryd(_Client):
    """The asynchronous client: the methods of :class:`Memoryd`, awaitable."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        admin_token: Optional[str] = None,
        retry: Optional[RetryPolicy] = None,
        max_retries: Optional[int] = None,
        timeout: float = 30.0,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        super().__init__(base_url, api_key, admin_token, retry, max_retries, timeout, http_client, httpx.AsyncClient)

    async def _send(self, call: Call) -> Any:
        attempts = Attempts(call, self._settings)
        while True:
            try:
                answer: Any = await self._http.request(call.method, attempts.url(), **attempts.options())
            except httpx.TransportError as exc:
                answer = exc
            outcome = attempts.judge(answer)
            if outcome.error is None:
                return outcome.value
            if outcome.wait is None:
                raise outcome.error
            await asyncio.sleep(outcome.wait)

    async def export_workspace(self, workspace: str, destination: Destination) -> int:
        """As :meth:`Memoryd.export_workspace`, awaitable; the file is written as chunks arrive."""
        call = _export_call(workspace)
        attempts = Attempts(call, self._settings)
        while True:
            with _Sink(destination) as sink:
                try:
                    async with self._http.stream(call.method, attempts.url(), **attempts.options()) as response:
                        if response.status_code < 400:
                            async for chunk in response.aiter_bytes():
                                sink.write(chunk)
                            return sink.written
                        await response.aread()
                        answer: Any = response
                except httpx.TransportError as exc:
                    if sink.written:
                        raise connection_error(exc) from exc
                    answer = exc
            outcome = attempts.judge(answer)
            if outcome.wait is None:
                raise outcome.error or RuntimeError("an export attempt ended without an answer")
            await asyncio.sleep(outcome.wait)

    async def import_workspace(self, workspace: str, source: Source):
        """As :meth:`Memoryd.import_workspace`, awaitable."""
        call = _import_call(workspace)
        archive = _Archive(source)
        attempts = Attempts(call, self._settings)
        while True:
            body = archive.open()
            try:
                options = attempts.options()
                options.pop("json", None)
                answer: Any = await self._http.request(
                    call.method, attempts.url(), content=_async_chunks(body), **options
                )
            except httpx.TransportError as exc:
                answer = exc
            finally:
                archive.done(body)
            outcome = attempts.judge(answer)
            if outcome.error is None:
                return outcome.value
            if outcome.wait is None or not archive.retryable():
                raise outcome.error
            await asyncio.sleep(outcome.wait)

    async def events(
        self,
        types: Optional[Sequence[str]] = None,
        *,
        last_event_id: Optional[str] = None,
        reconnect: bool = True,
    ) -> AsyncIterator[m.StreamedEvent]:
        """As :meth:`Memoryd.events`, an async iterator."""
        last = last_event_id
        while True:
            url, options = _events_request(self._settings, types, last)
            try:
                async with self._http.stream("GET", url, **options) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_from_response(response)
                    parser = EventStreamParser()
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            last = event.id
                            yield event
            except httpx.TransportError as exc:
                if not reconnect:
                    raise connection_error(exc) from exc
            if not reconnect:
                return
            await asyncio.sleep(1.0)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncMemoryd":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
