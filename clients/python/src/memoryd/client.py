"""The memoryd clients: :class:`Memoryd` (sync) and :class:`AsyncMemoryd` (async).

Both have the same methods, one per route of memoryd's API, typed with the
:mod:`memoryd.models`; the async client's are coroutine functions. Each route
is described once (:mod:`memoryd._routes`) and each client only sends it,
retrying what is transient.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import (
    IO,
    Any,
    Generic,
    ParamSpec,
    TypeVar,
    overload,
)

import httpx
from typing_extensions import Self

from . import _routes as routes
from . import models as m
from ._transport import (
    RETRYABLE_STATUSES,
    Answered,
    Attempts,
    Call,
    RawResponse,
    RetryPolicy,
    Settings,
    connection_error,
    error_from_response,
    raw,
    segment,
)
from .errors import MemorydError
from .webhooks import EventStreamParser

Destination = str | os.PathLike[str] | IO[bytes]
Source = str | os.PathLike[str] | IO[bytes]

P = ParamSpec("P")
T = TypeVar("T")


class _Route(Generic[P, T]):
    """A route as a method of both clients: on :class:`Memoryd` it sends the
    call and returns its value; on :class:`AsyncMemoryd` it is a coroutine
    function (``async def``) of the same parameters."""

    def __init__(self, describe: Callable[P, Call[T]]) -> None:
        self.describe = describe
        self.__doc__ = describe.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> _Route[P, T]: ...

    @overload
    def __get__(self, client: Memoryd, owner: type) -> Callable[P, T]: ...

    @overload
    def __get__(self, client: AsyncMemoryd, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...

    @overload
    def __get__(self, client: _RawMemoryd, owner: type) -> Callable[P, RawResponse[T]]: ...

    @overload
    def __get__(self, client: _RawAsyncMemoryd, owner: type) -> Callable[P, Coroutine[Any, Any, RawResponse[T]]]: ...

    def __get__(self, client: _Client | _RawMemoryd | _RawAsyncMemoryd | None, owner: type) -> Any:
        if client is None:
            return self
        describe = self.describe
        if isinstance(client, _RawMemoryd | _RawAsyncMemoryd):
            return client.sender(describe)
        if isinstance(client, AsyncMemoryd):
            async_client = client

            @functools.wraps(describe)
            async def send_async(*args: P.args, **kwargs: P.kwargs) -> T:
                return await async_client._send(describe(*args, **kwargs))

            return send_async
        assert isinstance(client, Memoryd)
        sync_client = client

        @functools.wraps(describe)
        def send(*args: P.args, **kwargs: P.kwargs) -> T:
            return sync_client._send(describe(*args, **kwargs))

        return send


def _export_call(workspace: str) -> Call[None]:
    return Call("GET", f"/v1/workspaces/{segment(workspace)}/export", routes.nothing)


PageT = TypeVar("PageT", m.SessionPage, m.JobList, m.RunList, m.TenantList)
RowT = TypeVar("RowT")


def _reconnect_wait(policy: RetryPolicy, attempt: int, failure: MemorydError | None) -> float:
    """How long an event stream waits before connecting again: the retry policy's
    backoff (never shorter than a ``Retry-After``), raising ``failure`` when it has no
    attempt left. A stream the server ended (a restart) connects again soon."""
    if failure is None:
        return policy.delay(0, None) or 0.0
    wait = policy.delay(attempt, failure.retry_after)
    if wait is None:
        raise failure
    return wait


class _Sink:
    """Where an export's bytes go: a path, written as ``<path>.part`` and renamed
    over it only once the whole archive arrived (a failed export leaves what was
    there), or an open binary file (which an attempt, once it wrote, cannot take
    back)."""

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.file: IO[bytes] | None = None
        self.part: str | None = None
        self.written = 0

    def __enter__(self) -> Self:
        if isinstance(self.destination, (str, os.PathLike)):
            self.part = os.fspath(self.destination) + ".part"
            self.file = open(self.part, "wb")
        else:
            self.file = self.destination
        return self

    def write(self, chunk: bytes) -> None:
        assert self.file is not None
        self.file.write(chunk)
        self.written += len(chunk)

    def complete(self) -> int:
        """The archive arrived whole: a path takes it. The bytes written."""
        if self.part is not None and self.file is not None:
            self.file.close()
            os.replace(self.part, os.fspath(self.destination))  # type: ignore[arg-type]
            self.part = None
        return self.written

    def __exit__(self, *exc_info: object) -> None:
        if self.file is not None and self.file is not self.destination:
            self.file.close()
        if self.part is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.part)


def _import_call(workspace: str) -> Call[m.Job]:
    return Call(
        "POST",
        f"/v1/workspaces/{segment(workspace)}/import",
        routes.as_model(m.Job),
        headers={"content-type": "application/gzip"},
        # A second upload after a broken connection would meet the first's
        # workspace (409 workspace_not_empty).
        idempotent=False,
    )


class _Archive:
    """An import's body: a path (opened anew by each attempt) or an open binary
    file (rewound for a retry when it can be)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.start: int | None = None
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

    def length(self, opened: IO[bytes]) -> int | None:
        """The bytes left to send, when they can be told (a path, a seekable file):
        sent as ``Content-Length``, so memoryd refuses an oversized archive at once."""
        if not opened.seekable():
            return None
        at = opened.tell()
        end = opened.seek(0, os.SEEK_END)
        opened.seek(at)
        return end - at

    def headers(self, options: dict[str, Any], opened: IO[bytes]) -> dict[str, Any]:
        """``options`` for one attempt: no JSON body, and the archive's length."""
        options.pop("json", None)
        length = self.length(opened)
        if length is not None:
            options["headers"] = {**options.get("headers", {}), "content-length": str(length)}
        return options

    def done(self, opened: IO[bytes]) -> None:
        if opened is not self.source:
            opened.close()


def _chunks(file: IO[bytes], size: int = 1 << 16) -> Iterator[bytes]:
    while True:
        chunk = file.read(size)
        if not chunk:
            return
        yield chunk


async def _async_chunks(file: IO[bytes], size: int = 1 << 16) -> AsyncIterator[bytes]:
    # Read in a worker thread: a file read never blocks the event loop.
    while chunk := await asyncio.to_thread(file.read, size):
        yield chunk


def _events_request(
    settings: Settings, types: Sequence[str] | None, last_event_id: str | None
) -> tuple[str, dict[str, Any]]:
    """The URL and request options of one connection of an event stream."""
    headers = {"accept": "text/event-stream"}
    if last_event_id:
        headers["last-event-id"] = last_event_id
    params = {"types": ",".join(types) if types else None}
    attempts = Attempts(Call("GET", "/v1/events", routes.nothing, params=params, headers=headers), settings)
    options = attempts.options()
    options.pop("json", None)
    # Longer than the 15 s between keep-alive comments.
    options["timeout"] = httpx.Timeout(settings.timeout, read=60.0)
    return attempts.url(), options


class _Routes:
    """Every route of memoryd's API (described in :mod:`memoryd._routes`)."""

    # -- service -------------------------------------------------------------
    health = _Route(routes.health)
    ready = _Route(routes.ready)
    openapi = _Route(routes.openapi)
    metrics = _Route(routes.metrics)

    # -- admin (needs the admin token) ---------------------------------------
    create_tenant = _Route(routes.create_tenant)
    issue_key = _Route(routes.issue_key)
    list_tenants = _Route(routes.list_tenants)
    revoke_key = _Route(routes.revoke_key)
    tenant_keys = _Route(routes.tenant_keys)
    create_key = _Route(routes.create_key)
    list_keys = _Route(routes.list_keys)
    delete_key = _Route(routes.delete_key)
    tenant_limits = _Route(routes.tenant_limits)
    set_limits = _Route(routes.set_limits)
    limits = _Route(routes.limits)
    tenant_usage = _Route(routes.tenant_usage)
    usage = _Route(routes.usage)
    delete_tenant = _Route(routes.delete_tenant)

    # -- layouts -------------------------------------------------------------
    list_layouts = _Route(routes.list_layouts)
    get_layout = _Route(routes.get_layout)
    put_layout = _Route(routes.put_layout)

    # -- sessions ------------------------------------------------------------
    open_session = _Route(routes.open_session)
    list_sessions = _Route(routes.list_sessions)
    list_workspaces = _Route(routes.list_workspaces)
    get_session = _Route(routes.get_session)
    append_segment = _Route(routes.append_segment)
    append_segments = _Route(routes.append_segments)
    close_session = _Route(routes.close_session)

    # -- jobs ----------------------------------------------------------------
    list_jobs = _Route(routes.list_jobs)
    get_job = _Route(routes.get_job)
    retry_job = _Route(routes.retry_job)

    # -- memory --------------------------------------------------------------
    get_selection = _Route(routes.get_selection)
    list_runs = _Route(routes.list_runs)
    get_run = _Route(routes.get_run)
    restore_run = _Route(routes.restore_run)
    forget_rollout = _Route(routes.forget_rollout)
    forget_workspace = _Route(routes.forget_workspace)
    list_files = _Route(routes.list_files)
    get_file = _Route(routes.get_file)
    get_instructions = _Route(routes.get_instructions)

    # the running agent's memory
    list_memory = _Route(routes.list_memory)
    read_memory = _Route(routes.read_memory)
    search_memory = _Route(routes.search_memory)
    edit_memory = _Route(routes.edit_memory)

    # -- webhooks ------------------------------------------------------------
    create_webhook = _Route(routes.create_webhook)
    list_webhooks = _Route(routes.list_webhooks)
    get_webhook = _Route(routes.get_webhook)
    delete_webhook = _Route(routes.delete_webhook)
    update_webhook = _Route(routes.update_webhook)
    rotate_webhook = _Route(routes.rotate_webhook)
    test_webhook = _Route(routes.test_webhook)
    webhook_deliveries = _Route(routes.webhook_deliveries)


class _RawMemoryd(_Routes):
    """:attr:`Memoryd.with_raw_response`: each method answers a :class:`RawResponse`."""

    def __init__(self, client: Memoryd) -> None:
        self._client = client

    def sender(self, describe: Callable[..., Call[Any]]) -> Callable[..., Any]:
        @functools.wraps(describe)
        def send(*args: Any, **kwargs: Any) -> Any:
            return self._client._send(raw(describe(*args, **kwargs)))

        return send


class _RawAsyncMemoryd(_Routes):
    """:attr:`AsyncMemoryd.with_raw_response`: each method answers a :class:`RawResponse`."""

    def __init__(self, client: AsyncMemoryd) -> None:
        self._client = client

    def sender(self, describe: Callable[..., Call[Any]]) -> Callable[..., Any]:
        @functools.wraps(describe)
        async def send(*args: Any, **kwargs: Any) -> Any:
            return await self._client._send(raw(describe(*args, **kwargs)))

        return send


class _Client(_Routes):
    """What both clients hold: their settings and their HTTP client."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        admin_token: str | None,
        retry: RetryPolicy | None,
        max_retries: int | None,
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

    def with_options(
        self,
        *,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        max_retries: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Self:
        """This client for some calls with another per-attempt ``timeout``, retry
        policy (``retry`` or ``max_retries``) or extra ``headers``; it shares this
        client's connections, and closing it closes none of them."""
        policy = retry or self._settings.retry
        if max_retries is not None:
            policy = dataclasses.replace(policy, max_retries=max_retries)
        other = copy.copy(self)
        other._settings = dataclasses.replace(
            self._settings,
            timeout=self._settings.timeout if timeout is None else timeout,
            retry=policy,
            headers={**self._settings.headers, **(headers or {})},
        )
        other._owns_http = False
        return other

    def mcp_params(
        self, *, workspace: str | None = None, layout: str | None = None, session_id: str | None = None
    ) -> dict[str, Any]:
        """memoryd's MCP endpoint (``/v1/mcp``) for an MCP client: ``{"url",
        "headers"}``, as openai-agents' ``MCPServerStreamableHttp(params=...)``
        takes them. ``workspace``, ``layout`` and ``session_id`` are the
        defaults of its tool calls (a read with a session counts as usage)."""
        query = {k: v for k, v in (("workspace", workspace), ("layout", layout), ("session_id", session_id)) if v}
        url = str(httpx.URL(f"{self._settings.base_url}/v1/mcp", params=query))
        headers = {"Authorization": f"Bearer {self._settings.api_key}"} if self._settings.api_key else {}
        return {"url": url, "headers": headers}


class Memoryd(_Client):
    """The synchronous client.

    ``base_url`` and ``api_key`` default to ``MEMORYD_URL`` and
    ``MEMORYD_API_KEY``; ``admin_token`` (``MEMORYD_ADMIN_TOKEN``) is needed
    only for the admin routes. Transient failures are retried per ``retry``
    (or ``max_retries`` with the default backoff).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        admin_token: str | None = None,
        retry: RetryPolicy | None = None,
        max_retries: int | None = None,
        timeout: float = 30.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, api_key, admin_token, retry, max_retries, timeout, http_client, httpx.Client)

    def _send(self, call: Call[T]) -> T:
        attempts = Attempts(call, self._settings)
        while True:
            try:
                answer: httpx.Response | httpx.TransportError = self._http.request(
                    call.method, attempts.url(), **attempts.options()
                )
            except httpx.TransportError as exc:
                answer = exc
            outcome = attempts.judge(answer)
            if isinstance(outcome, Answered):
                return outcome.value
            if outcome.wait is None:
                raise outcome.error
            time.sleep(outcome.wait)

    def export_workspace(self, workspace: str, destination: Destination) -> int:
        """``GET /v1/workspaces/{workspace}/export``: the workspace as a gzip tar,
        streamed to ``destination`` (a path, or a binary file open for writing)
        without holding it in memory. Returns the bytes written. A failure before
        the archive starts is retried like any call; one after its first byte is
        raised. A path is written as ``<path>.part`` and renamed over it once the
        archive is whole: a failed export leaves the file that was there."""
        call = _export_call(workspace)
        attempts = Attempts(call, self._settings)
        while True:
            with _Sink(destination) as sink:
                try:
                    with self._http.stream(call.method, attempts.url(), **attempts.options()) as response:
                        if response.status_code < 400:
                            for chunk in response.iter_bytes():
                                sink.write(chunk)
                            return sink.complete()
                        response.read()
                        answer: httpx.Response | httpx.TransportError = response
                except httpx.TransportError as exc:
                    if sink.written:
                        raise connection_error(exc) from exc
                    answer = exc
            outcome = attempts.judge(answer)
            if isinstance(outcome, Answered):
                raise RuntimeError("an export attempt ended without an answer")
            if outcome.wait is None:
                raise outcome.error
            time.sleep(outcome.wait)

    def import_workspace(self, workspace: str, source: Source) -> m.Job:
        """``POST /v1/workspaces/{workspace}/import``: a gzip tar (an export, or a
        workspace the SDK wrote) from ``source`` (a path, or a binary file open for
        reading), streamed, into an empty workspace. Returns the ``import`` job."""
        call = _import_call(workspace)
        archive = _Archive(source)
        attempts = Attempts(call, self._settings)
        while True:
            body = archive.open()
            try:
                options = archive.headers(attempts.options(), body)
                answer: httpx.Response | httpx.TransportError = self._http.request(
                    call.method, attempts.url(), content=_chunks(body), **options
                )
            except httpx.TransportError as exc:
                answer = exc
            finally:
                archive.done(body)
            outcome = attempts.judge(answer)
            if isinstance(outcome, Answered):
                return outcome.value
            if outcome.wait is None or not archive.retryable():
                raise outcome.error
            time.sleep(outcome.wait)

    def iter_sessions(
        self, *, state: m.SessionState | None = None, workspace: str | None = None, page_size: int | None = None
    ) -> Iterator[m.SessionSummary]:
        """Every session of ``list_sessions`` (newest first), page after page."""
        return self._every(
            lambda c: routes.list_sessions(state=state, workspace=workspace, limit=page_size, cursor=c),
            lambda p: p.sessions,
        )

    def iter_jobs(
        self,
        *,
        state: m.JobState | None = None,
        kind: m.JobKind | None = None,
        session_id: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[m.Job]:
        """Every job of ``list_jobs`` (newest first), page after page."""
        return self._every(
            lambda c: routes.list_jobs(state=state, kind=kind, session_id=session_id, limit=page_size, cursor=c),
            lambda p: p.jobs,
        )

    def iter_runs(
        self, *, workspace: str = "default", layout: str = "default", page_size: int | None = None
    ) -> Iterator[m.PhaseTwoRun]:
        """Every run of ``list_runs`` (newest first), page after page."""
        return self._every(
            lambda c: routes.list_runs(workspace=workspace, layout=layout, limit=page_size, cursor=c),
            lambda p: p.runs,
        )

    def iter_tenants(self, *, page_size: int | None = None) -> Iterator[m.TenantSummary]:
        """Every tenant of ``list_tenants`` (oldest first), page after page (admin)."""
        return self._every(lambda c: routes.list_tenants(limit=page_size, cursor=c), lambda p: p.tenants)

    def _every(self, page: Callable[[str | None], Call[PageT]], rows: Callable[[PageT], list[RowT]]) -> Iterator[RowT]:
        cursor: str | None = None
        while True:
            answer = self._send(page(cursor))
            yield from rows(answer)
            cursor = answer.next_cursor
            if not cursor:
                return

    def events(
        self,
        types: Sequence[str] | None = None,
        *,
        last_event_id: str | None = None,
        reconnect: bool = True,
    ) -> Iterator[m.StreamedEvent]:
        """``GET /v1/events``: this tenant's events as they happen (``types``:
        only those). A broken connection is made again after the last event
        seen (``Last-Event-ID``), so none is missed while the outbox keeps them,
        after the retry policy's backoff (429 and 503 included, honouring
        ``Retry-After``; the error is raised once no retry is left);
        ``reconnect=False`` raises instead. Stop by breaking out of the loop."""
        last = last_event_id
        attempt = 0
        while True:
            url, options = _events_request(self._settings, types, last)
            failure: MemorydError | None = None
            try:
                with self._http.stream("GET", url, **options) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise error_from_response(response)
                    parser = EventStreamParser()
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            last, attempt = event.id, 0
                            yield event
            except httpx.TransportError as exc:
                failure = connection_error(exc)
            except MemorydError as exc:
                if exc.status not in RETRYABLE_STATUSES:
                    raise
                failure = exc
            if not reconnect:
                if failure is not None:
                    raise failure
                return
            time.sleep(_reconnect_wait(self._settings.retry, attempt, failure))
            attempt += 1

    @property
    def with_raw_response(self) -> _RawMemoryd:
        """The same methods, answering a :class:`RawResponse` (status, headers,
        request id, and ``parse()`` for the value): ``client.with_raw_response.get_job(id)``."""
        return _RawMemoryd(self)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncMemoryd(_Client):
    """The asynchronous client: the methods of :class:`Memoryd`, awaitable."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        admin_token: str | None = None,
        retry: RetryPolicy | None = None,
        max_retries: int | None = None,
        timeout: float = 30.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(base_url, api_key, admin_token, retry, max_retries, timeout, http_client, httpx.AsyncClient)

    async def _send(self, call: Call[T]) -> T:
        attempts = Attempts(call, self._settings)
        while True:
            try:
                answer: httpx.Response | httpx.TransportError = await self._http.request(
                    call.method, attempts.url(), **attempts.options()
                )
            except httpx.TransportError as exc:
                answer = exc
            outcome = attempts.judge(answer)
            if isinstance(outcome, Answered):
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
                            return sink.complete()
                        await response.aread()
                        answer: httpx.Response | httpx.TransportError = response
                except httpx.TransportError as exc:
                    if sink.written:
                        raise connection_error(exc) from exc
                    answer = exc
            outcome = attempts.judge(answer)
            if isinstance(outcome, Answered):
                raise RuntimeError("an export attempt ended without an answer")
            if outcome.wait is None:
                raise outcome.error
            await asyncio.sleep(outcome.wait)

    async def import_workspace(self, workspace: str, source: Source) -> m.Job:
        """As :meth:`Memoryd.import_workspace`, awaitable."""
        call = _import_call(workspace)
        archive = _Archive(source)
        attempts = Attempts(call, self._settings)
        while True:
            body = archive.open()
            try:
                options = archive.headers(attempts.options(), body)
                answer: httpx.Response | httpx.TransportError = await self._http.request(
                    call.method, attempts.url(), content=_async_chunks(body), **options
                )
            except httpx.TransportError as exc:
                answer = exc
            finally:
                archive.done(body)
            outcome = attempts.judge(answer)
            if isinstance(outcome, Answered):
                return outcome.value
            if outcome.wait is None or not archive.retryable():
                raise outcome.error
            await asyncio.sleep(outcome.wait)

    def iter_sessions(
        self, *, state: m.SessionState | None = None, workspace: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[m.SessionSummary]:
        """As :meth:`Memoryd.iter_sessions`, an async iterator."""
        return self._every(
            lambda c: routes.list_sessions(state=state, workspace=workspace, limit=page_size, cursor=c),
            lambda p: p.sessions,
        )

    def iter_jobs(
        self,
        *,
        state: m.JobState | None = None,
        kind: m.JobKind | None = None,
        session_id: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.Job]:
        """As :meth:`Memoryd.iter_jobs`, an async iterator."""
        return self._every(
            lambda c: routes.list_jobs(state=state, kind=kind, session_id=session_id, limit=page_size, cursor=c),
            lambda p: p.jobs,
        )

    def iter_runs(
        self, *, workspace: str = "default", layout: str = "default", page_size: int | None = None
    ) -> AsyncIterator[m.PhaseTwoRun]:
        """As :meth:`Memoryd.iter_runs`, an async iterator."""
        return self._every(
            lambda c: routes.list_runs(workspace=workspace, layout=layout, limit=page_size, cursor=c),
            lambda p: p.runs,
        )

    def iter_tenants(self, *, page_size: int | None = None) -> AsyncIterator[m.TenantSummary]:
        """As :meth:`Memoryd.iter_tenants`, an async iterator (admin)."""
        return self._every(lambda c: routes.list_tenants(limit=page_size, cursor=c), lambda p: p.tenants)

    async def _every(
        self, page: Callable[[str | None], Call[PageT]], rows: Callable[[PageT], list[RowT]]
    ) -> AsyncIterator[RowT]:
        cursor: str | None = None
        while True:
            answer = await self._send(page(cursor))
            for row in rows(answer):
                yield row
            cursor = answer.next_cursor
            if not cursor:
                return

    async def events(
        self,
        types: Sequence[str] | None = None,
        *,
        last_event_id: str | None = None,
        reconnect: bool = True,
    ) -> AsyncIterator[m.StreamedEvent]:
        """As :meth:`Memoryd.events`, an async iterator."""
        last = last_event_id
        attempt = 0
        while True:
            url, options = _events_request(self._settings, types, last)
            failure: MemorydError | None = None
            try:
                async with self._http.stream("GET", url, **options) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_from_response(response)
                    parser = EventStreamParser()
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            last, attempt = event.id, 0
                            yield event
            except httpx.TransportError as exc:
                failure = connection_error(exc)
            except MemorydError as exc:
                if exc.status not in RETRYABLE_STATUSES:
                    raise
                failure = exc
            if not reconnect:
                if failure is not None:
                    raise failure
                return
            await asyncio.sleep(_reconnect_wait(self._settings.retry, attempt, failure))
            attempt += 1

    @property
    def with_raw_response(self) -> _RawAsyncMemoryd:
        """As :attr:`Memoryd.with_raw_response`: coroutine functions answering a :class:`RawResponse`."""
        return _RawAsyncMemoryd(self)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
