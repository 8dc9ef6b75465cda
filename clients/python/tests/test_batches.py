"""Batch appends through both clients, and the buffers that make them: in
order, all or none, retried once, and a failure never swallowed."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_client import FAST, lines_of, segment

from memoryd import (
    AsyncMemoryd,
    AsyncSegmentBuffer,
    BadRequestError,
    BufferedAppendError,
    ConflictError,
    Memoryd,
    RetryPolicy,
    SegmentBuffer,
)
from memoryd import models as m


def test_a_batch_lands_in_order_and_a_bad_one_names_its_segment(server, tenant):
    tenant_id, key = tenant
    with Memoryd(server.base_url, key, retry=FAST) as client:
        batch = [segment("b-1", "one"), m.BatchSegment(rollout_id="b-2", input="two", layout="default")]
        batch.append(segment("b-1", "three"))
        answer = client.append_segments("py-batch", batch)
        assert [(r.rollout_id, r.segment_index) for r in answer.receipts] == [("b-1", 0), ("b-2", 0), ("b-1", 1)]
        texts = [line["input"][0]["content"] for line in lines_of(server, tenant_id, "sessions/b-1.jsonl")]
        assert texts == ["one", "three"]
        bad = [segment("b-1", "fine"), {**segment("b-1", "bad"), "terminal_metadata": {"terminal_state": "??"}}]
        with pytest.raises(BadRequestError) as refused:
            client.append_segments("py-batch", bad)
        assert (refused.value.code, refused.value.index) == ("invalid_segment", 1)
        assert len(lines_of(server, tenant_id, "sessions/b-1.jsonl")) == 2, "nothing of it was written"


def test_a_retried_batch_is_written_once(server, tenant, fault_proxy):
    tenant_id, key = tenant
    fault_proxy.faults = ["503", "drop"]
    with Memoryd(fault_proxy.base_url, key, retry=FAST) as client:
        answer = client.append_segments("py-batch-retry", [segment("br", "a"), segment("br", "b")])
    attempts = [s for s in fault_proxy.seen if "segments:batch" in s[1]]
    assert len(attempts) == 3 and len({k for _, _, k, _ in attempts}) == 1, attempts
    assert [r.segment_index for r in answer.receipts] == [0, 1]
    assert len(lines_of(server, tenant_id, "sessions/br.jsonl")) == 2


def test_a_buffer_sends_by_size_by_time_and_on_close(server, tenant):
    tenant_id, key = tenant
    with Memoryd(server.base_url, key, retry=FAST) as client:
        with SegmentBuffer(client, "py-buffer", max_segments=3, max_delay=0.05) as buffer:
            for i in range(3):
                buffer.append(segment("buf", f"s{i}"))
            assert buffer.appended == 3, "a full buffer is sent at once"
            buffer.append(segment("buf", "s3"))
            deadline = time.monotonic() + 5
            while buffer.appended < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert buffer.appended == 4, "the oldest waited max_delay, then was sent"
            buffer.append(segment("buf", "s4"))
        assert buffer.appended == 5, "closing sent the rest"
        with pytest.raises(RuntimeError):
            buffer.append(segment("buf", "after close"))
        texts = [line["input"][0]["content"] for line in lines_of(server, tenant_id, "sessions/buf.jsonl")]
        assert texts == ["s0", "s1", "s2", "s3", "s4"]

        # A failed batch stops the buffer: what comes after it is handed back, not sent past it.
        client.close_session("py-buffer")
        buffer = SegmentBuffer(client, "py-buffer", max_segments=2, max_delay=0.01)
        buffer.append(segment("buf", "late"))
        time.sleep(0.3)
        with pytest.raises(BufferedAppendError) as failed:
            buffer.append(segment("buf", "later"))
        assert failed.value.code == "session_closed" and isinstance(failed.value.__cause__, ConflictError)
        assert [s["input"] for s in failed.value.batch] == ["late"] and failed.value.idempotency_key
        buffer.close()  # the append that raised held nothing: nothing is left
        assert texts == [line["input"][0]["content"] for line in lines_of(server, tenant_id, "sessions/buf.jsonl")]


def test_the_async_buffer_keeps_order_and_surfaces_a_failure(server, tenant):
    tenant_id, key = tenant

    async def scenario() -> None:
        async with AsyncMemoryd(server.base_url, key, retry=FAST) as client:
            async with AsyncSegmentBuffer(client, "py-abuffer", max_segments=4, max_delay=0.002) as buffer:
                for i in range(10):
                    await buffer.append(segment("abuf", f"a{i}"))
                    if i % 3 == 0:
                        await asyncio.sleep(0.01)
            texts = [line["input"][0]["content"] for line in lines_of(server, tenant_id, "sessions/abuf.jsonl")]
            assert texts == [f"a{i}" for i in range(10)] and buffer.appended == 10
            buffer = AsyncSegmentBuffer(client, "py-abuffer", layout="no-such-layout")
            await buffer.append(segment("abuf", "x"))
            with pytest.raises(BufferedAppendError) as failed:
                await buffer.close()
            assert (failed.value.code, failed.value.index) == ("not_found", 0)

    asyncio.run(scenario())


def test_a_failed_batch_is_handed_back_with_its_key_and_what_came_after(server, tenant, fault_proxy):
    """memoryd wrote the batch but every answer was lost: the error hands the
    batch back with its key, and the segments given meanwhile were held, not
    sent past it; resent with that key the batch is written once."""
    tenant_id, key = tenant
    fault_proxy.faults = ["drop", "drop"]
    policy = RetryPolicy(max_retries=1, base_delay=0.01, max_delay=0.02)
    with Memoryd(fault_proxy.base_url, key, retry=policy) as client:
        buffer = SegmentBuffer(client, "py-handback", max_segments=2, max_delay=10)
        with pytest.raises(BufferedAppendError) as failed:
            buffer.append(segment("hb", "one"))
            buffer.append(segment("hb", "two"))
        assert [s["input"] for s in failed.value.batch] == ["one", "two"] and failed.value.held == []
        again = client.append_segments("py-handback", failed.value.batch, idempotency_key=failed.value.idempotency_key)
        assert [r.segment_index for r in again.receipts] == [0, 1], "the first answer, replayed"
        buffer.append(segment("hb", "three"))
        buffer.close()
    texts = [line["input"][0]["content"] for line in lines_of(server, tenant_id, "sessions/hb.jsonl")]
    assert texts == ["one", "two", "three"]
