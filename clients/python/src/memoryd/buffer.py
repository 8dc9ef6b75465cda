"""Buffered appends: segments gathered for one session and sent as batches
(``POST /v1/sessions/{id}/segments:batch``), for runtimes that finish many
runs a second and can wait a few milliseconds for their acknowledgement.

A buffer sends what it holds once it holds ``max_segments`` or when the
oldest segment has waited ``max_delay`` seconds, and on ``flush()`` and
``close()``. A batch that fails is never dropped silently: the next call
(``append``, ``flush`` or ``close``) raises :class:`BufferedAppendError`,
which carries the segments it held, in order, to send again; the segment of
an ``append`` that raises is not held.
"""

from __future__ import annotations

import asyncio
import threading
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

    The fields are those of the error that failed it (``__cause__``);
    ``segments`` are the batch's segments, as given to ``append``, in order.
    """

    def __init__(self, cause: MemorydError, segments: list[dict[str, Any]]) -> None:
        super().__init__(
            status=cause.status,
            code=cause.code,
            detail=cause.detail,
            title=cause.title,
            request_id=cause.request_id,
            retry_after=cause.retry_after,
            body=cause.body,
        )
        self.segments = segments


def _with_layout(segment: Mapping[str, Any] | m.Segment, layout: str) -> dict[str, Any]:
    body = segment.model_dump(mode="json", exclude_unset=True) if isinstance(segment, m.Segment) else dict(segment)
    body.setdefault("layout", layout)
    return body


class _Limits:
    def __init__(self, max_segments: int, max_delay: float) -> None:
        if max_segments < 1:
            raise ValueError("max_segments must be at least 1")
        if max_delay < 0:
            raise ValueError("max_delay must not be negative")
        self.max_segments = max_segments
        self.max_delay = max_delay


class SegmentBuffer:
    """Appends one session's segments in batches, from any thread.

    Use it as a context manager (or call :meth:`close`) so that what it
    holds is sent before the session is closed.
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
        self._client, self._session_id, self._layout, self._workspace = client, session_id, layout, workspace
        self._limits = _Limits(max_segments, max_delay)
        self._held: list[dict[str, Any]] = []
        self._state = threading.Lock()
        # One batch at a time, so that batches land in the order they were made.
        self._sending = threading.Lock()
        self._timer: threading.Timer | None = None
        self._failed: BufferedAppendError | None = None
        self.receipts: list[m.AppendedSegment] = []

    def append(self, segment: Mapping[str, Any] | m.Segment, *, layout: str | None = None) -> None:
        """Holds a segment (to ``layout``, else the buffer's, unless it names
        its own); sends the batch once it is full."""
        body = _with_layout(segment, layout or self._layout)
        with self._state:
            self._raise_failure()
            self._held.append(body)
            full = len(self._held) >= self._limits.max_segments
            if not full and self._timer is None:
                self._timer = threading.Timer(self._limits.max_delay, self._send_due)
                self._timer.daemon = True
                self._timer.start()
        if full:
            self.flush()

    def flush(self) -> list[m.AppendedSegment]:
        """Sends what is held now; the receipts of this batch."""
        with self._sending:
            with self._state:
                self._raise_failure()
                batch, self._held = self._held, []
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            return self._send(batch, raise_now=True)

    def close(self) -> None:
        """Sends what is left; raises if any batch failed."""
        self.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send_due(self) -> None:
        with self._sending:
            with self._state:
                self._timer = None
                batch, self._held = self._held, []
            self._send(batch, raise_now=False)

    def _send(self, batch: list[dict[str, Any]], *, raise_now: bool) -> list[m.AppendedSegment]:
        if not batch:
            return []
        try:
            answer = self._client.append_segments(self._session_id, batch, workspace=self._workspace)
        except MemorydError as err:
            failure = BufferedAppendError(err, batch)
            failure.__cause__ = err
            if raise_now:
                raise failure from err
            with self._state:
                self._failed = self._failed or failure
            return []
        self.receipts.extend(answer.receipts)
        return answer.receipts

    def _raise_failure(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed


class AsyncSegmentBuffer:
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
        self._client, self._session_id, self._layout, self._workspace = client, session_id, layout, workspace
        self._limits = _Limits(max_segments, max_delay)
        self._held: list[dict[str, Any]] = []
        self._sending = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[list[m.AppendedSegment]]] = set()
        self._failed: BufferedAppendError | None = None
        self.receipts: list[m.AppendedSegment] = []

    async def append(self, segment: Mapping[str, Any] | m.Segment, *, layout: str | None = None) -> None:
        """Holds a segment; sends the batch once it is full."""
        self._raise_failure()
        self._held.append(_with_layout(segment, layout or self._layout))
        if len(self._held) >= self._limits.max_segments:
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._limits.max_delay, self._send_due)

    async def flush(self) -> list[m.AppendedSegment]:
        """Sends what is held now; the receipts of this batch."""
        self._raise_failure()
        return await self._send(raise_now=True)

    async def close(self) -> None:
        """Sends what is left, waits for batches under way; raises if any failed."""
        await self.flush()
        if self._tasks:
            await asyncio.gather(*self._tasks)
        self._raise_failure()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _take(self) -> list[dict[str, Any]]:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._held = self._held, []
        return batch

    def _send_due(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._send(raise_now=False))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, *, raise_now: bool) -> list[m.AppendedSegment]:
        # The batch is taken once the one before it is sent: batches land in order.
        async with self._sending:
            batch = self._take()
            if not batch:
                return []
            try:
                answer = await self._client.append_segments(self._session_id, batch, workspace=self._workspace)
            except MemorydError as err:
                failure = BufferedAppendError(err, batch)
                if raise_now:
                    raise failure from err
                failure.__cause__ = err
                self._failed = self._failed or failure
                return []
        self.receipts.extend(answer.receipts)
        return answer.receipts

    def _raise_failure(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed
