"""Buffered appends: segments gathered for one session and sent as batches
(``POST /v1/sessions/{id}/segments:batch``), for runtimes that finish many
runs a second and can wait a few milliseconds for their acknowledgement.

A buffer sends what it holds once it holds ``max_segments`` or when the
oldest segment has waited ``max_delay`` seconds, and on ``flush()`` and
``close()``; each batch under an ``Idempotency-Key`` of its own, retried by
the client's policy. A batch that fails is never dropped silently, nor
overtaken: nothing more is sent, and the next call (``append``, ``flush`` or
``close``) raises :class:`BufferedAppendError`, which hands back the failed
batch with its key and every segment held after it, in order. The buffer is
then empty and may go on; the segment of an ``append`` that raises is not held.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from . import models as m
from .errors import MemorydError

if TYPE_CHECKING:
    from .client import AsyncMemoryd, Memoryd

DEFAULT_MAX_SEGMENTS = 64
DEFAULT_MAX_DELAY = 0.005


class BufferedAppendError(MemorydError):
    """A batch of buffered segments was refused or could not be sent.

    The fields are those of the error that failed it (``__cause__``).
    ``batch`` is that batch's segments and ``idempotency_key`` its key:
    sending ``batch`` again with that key appends it once, whether or not
    memoryd had it. ``held`` are the segments given after it, never sent;
    ``segments`` both, in order.
    """

    def __init__(self, cause: BaseException, batch: list[dict[str, Any]], idempotency_key: str) -> None:
        if isinstance(cause, MemorydError):
            fields: dict[str, Any] = {
                "status": cause.status,
                "code": cause.code,
                "detail": cause.detail,
                "title": cause.title,
                "request_id": cause.request_id,
                "retry_after": cause.retry_after,
                "body": cause.body,
            }
        else:
            fields = {"status": None, "code": "client_error", "detail": f"{type(cause).__name__}: {cause}"}
        super().__init__(**fields)
        self.__cause__ = cause
        self.batch = batch
        self.idempotency_key = idempotency_key
        self.held: list[dict[str, Any]] = []

    @property
    def segments(self) -> list[dict[str, Any]]:
        return self.batch + self.held


def _with_layout(segment: Mapping[str, Any] | m.Segment, layout: str) -> dict[str, Any]:
    body = segment.model_dump(mode="json", exclude_unset=True) if isinstance(segment, m.Segment) else dict(segment)
    body.setdefault("layout", layout)
    return body


class _Held:
    """What both buffers keep: the segments held, a failed batch, the limits."""

    def __init__(
        self, session_id: str, layout: str, workspace: str | None, max_segments: int, max_delay: float
    ) -> None:
        if max_segments < 1:
            raise ValueError("max_segments must be at least 1")
        if max_delay < 0:
            raise ValueError("max_delay must not be negative")
        self._session_id, self._layout, self._workspace = session_id, layout, workspace
        self._max_segments, self._max_delay = max_segments, max_delay
        self._held: list[dict[str, Any]] = []
        self._failed: BufferedAppendError | None = None
        self._closed = False
        self.appended = 0

    def _usable(self) -> None:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        self._raise_failure()

    def _raise_failure(self) -> None:
        """Raises a failed batch, handing back what is held after it."""
        failed, self._failed = self._failed, None
        if failed is not None:
            failed.held, self._held = self._held, []
            raise failed


class SegmentBuffer(_Held):
    """Appends one session's segments in batches, from any thread.

    Use it as a context manager (or call :meth:`close`) so that what it
    holds is sent before the session is closed. ``appended`` counts the
    segments memoryd acknowledged.
    """

    def __init__(
        self,
        client: Memoryd,
        session_id: str,
        *,
        layout: str = "default",
        workspace: str | None = None,
        max_segments: int = DEFAULT_MAX_SEGMENTS,
        max_delay: float = DEFAULT_MAX_DELAY,
    ) -> None:
        super().__init__(session_id, layout, workspace, max_segments, max_delay)
        self._client = client
        self._state = threading.Lock()
        # One batch at a time, so that batches land in the order they were made.
        self._sending = threading.Lock()
        self._timer: threading.Timer | None = None

    def append(self, segment: Mapping[str, Any] | m.Segment, *, layout: str | None = None) -> None:
        """Holds a segment (to ``layout``, else the buffer's, unless it names
        its own); sends the batch once it is full."""
        body = _with_layout(segment, layout or self._layout)
        with self._state:
            self._usable()
            self._held.append(body)
            full = len(self._held) >= self._max_segments
            if not full and self._timer is None:
                self._timer = threading.Timer(self._max_delay, self._send_held, kwargs={"raise_now": False})
                self._timer.daemon = True
                self._timer.start()
        if full:
            self._send_held(raise_now=True)

    def flush(self) -> list[m.AppendedSegment]:
        """Sends what is held now; the receipts of this batch."""
        with self._state:
            self._usable()
        return self._send_held(raise_now=True)

    def close(self) -> None:
        """Sends what is left; raises if a batch failed. Nothing is taken after."""
        try:
            self.flush()
        finally:
            with self._state:
                self._closed = True
                if self._timer is not None:
                    self._timer.cancel()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send_held(self, *, raise_now: bool) -> list[m.AppendedSegment]:
        with self._sending:
            with self._state:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                if self._failed is not None:
                    # An earlier batch failed: nothing more is sent before it is handed back.
                    if raise_now:
                        self._raise_failure()
                    return []
                batch, self._held = self._held, []
            if not batch:
                return []
            key = str(uuid.uuid4())
            try:
                answer = self._client.append_segments(
                    self._session_id, batch, workspace=self._workspace, idempotency_key=key
                )
            except Exception as err:
                with self._state:
                    self._failed = BufferedAppendError(err, batch, key)
                    if raise_now:
                        self._raise_failure()
                return []
            self.appended += len(batch)
            return answer.receipts


class AsyncSegmentBuffer(_Held):
    """:class:`SegmentBuffer` for :class:`~memoryd.AsyncMemoryd`, in one event loop."""

    def __init__(
        self,
        client: AsyncMemoryd,
        session_id: str,
        *,
        layout: str = "default",
        workspace: str | None = None,
        max_segments: int = DEFAULT_MAX_SEGMENTS,
        max_delay: float = DEFAULT_MAX_DELAY,
    ) -> None:
        super().__init__(session_id, layout, workspace, max_segments, max_delay)
        self._client = client
        self._sending = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[list[m.AppendedSegment]]] = set()

    async def append(self, segment: Mapping[str, Any] | m.Segment, *, layout: str | None = None) -> None:
        """Holds a segment; sends the batch once it is full."""
        self._usable()
        self._held.append(_with_layout(segment, layout or self._layout))
        if len(self._held) >= self._max_segments:
            await self._send_held(raise_now=True)
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._max_delay, self._send_due)

    async def flush(self) -> list[m.AppendedSegment]:
        """Sends what is held now; the receipts of this batch."""
        self._usable()
        return await self._send_held(raise_now=True)

    async def close(self) -> None:
        """Sends what is left, waits for batches under way; raises if one failed."""
        try:
            await self.flush()
            if self._tasks:
                await asyncio.gather(*self._tasks)
            self._raise_failure()
        finally:
            self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _send_due(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._send_held(raise_now=False))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_held(self, *, raise_now: bool) -> list[m.AppendedSegment]:
        # The batch is taken once the one before it is sent: batches land in order.
        async with self._sending:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._failed is not None:
                if raise_now:
                    self._raise_failure()
                return []
            batch, self._held = self._held, []
            if not batch:
                return []
            key = str(uuid.uuid4())
            try:
                answer = await self._client.append_segments(
                    self._session_id, batch, workspace=self._workspace, idempotency_key=key
                )
            except Exception as err:
                self._failed = BufferedAppendError(err, batch, key)
                if raise_now:
                    self._raise_failure()
                return []
        self.appended += len(batch)
        return answer.receipts
