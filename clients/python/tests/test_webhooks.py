"""Webhooks and the event stream through the client, against the real
binary: deliveries verify with the ``standardwebhooks`` package (the
reference implementation of the scheme) and with ``verify_webhook``; the
stream iterates in order and resumes after an event id, sync and async."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import standardwebhooks
from conftest import serve

from memoryd import AsyncMemoryd, ConflictError, Memoryd, NotFoundError, WebhookVerificationError, verify_webhook


class Receiver:
    """A local endpoint that answers 200 and keeps what it got."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server, base = serve(Handler)
        self.url = f"{base}/hook"

    def wait_for(self, count: int, timeout: float = 20.0) -> list[tuple[dict[str, str], bytes]]:
        deadline = time.monotonic() + timeout
        while len(self.got) < count:
            assert time.monotonic() < deadline, f"received {len(self.got)} of {count}"
            time.sleep(0.02)
        return list(self.got)


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()


def test_deliveries_verify_with_the_standard_webhooks_package(server, tenant, receiver):
    with Memoryd(server.base_url, tenant[1]) as client:
        hook = client.create_webhook(receiver.url, events=["session.closed", "run.succeeded"], description="tests")
        assert hook.secret.startswith("whsec_") and hook.state == "enabled"
        assert hook.events == ["run.succeeded", "session.closed"]
        assert [w.webhook_id for w in client.list_webhooks()] == [hook.webhook_id]
        assert not hasattr(client.get_webhook(hook.webhook_id), "secret")

        client.append_segment(
            "py-s1", {"rollout_id": "py-chat", "input": "I prefer green tea.", "final_output": "noted"}
        )
        assert client.close_session("py-s1", wait=30).state == "closed"
        got = receiver.wait_for(2)
        types = set()
        for headers, body in got:
            payload = standardwebhooks.Webhook(hook.secret).verify(body, headers)
            event = verify_webhook(hook.secret, headers, body)
            assert payload["type"] == event.type
            types.add(event.type)
            with pytest.raises(WebhookVerificationError):
                verify_webhook(hook.secret, headers, body + b" ")
            with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
                standardwebhooks.Webhook("whsec_" + "A" * 43 + "=").verify(body, headers)
            with pytest.raises(WebhookVerificationError, match="tolerance"):
                verify_webhook(hook.secret, headers, body, now=time.time() + 3600)
        assert types == {"session.closed", "run.succeeded"}
        closed = next(verify_webhook(hook.secret, h, b) for h, b in got if b'"session.closed"' in b)
        assert closed.data["session_id"] == "py-s1"

        # The receiver has a request before memoryd records its answer.
        deadline = time.monotonic() + 10
        deliveries = client.webhook_deliveries(hook.webhook_id)
        while any(d.state != "succeeded" for d in deliveries) and time.monotonic() < deadline:
            time.sleep(0.05)
            deliveries = client.webhook_deliveries(hook.webhook_id)
        assert len(deliveries) == 2 and all(d.state == "succeeded" and d.last_status == 200 for d in deliveries)

        rotated = client.rotate_webhook(hook.webhook_id)
        assert rotated.secret != hook.secret and rotated.previous_secret_until is not None
        client.test_webhook(hook.webhook_id)
        headers, body = receiver.wait_for(3)[2]
        assert len(headers["webhook-signature"].split(" ")) == 2
        for secret in (hook.secret, rotated.secret):
            assert standardwebhooks.Webhook(secret).verify(body, headers)["type"] == "webhook.test"

        changed = client.update_webhook(hook.webhook_id, events=["*"], description=None)
        assert changed.events == ["*"] and changed.description is None and changed.state == "enabled"
        assert client.update_webhook(hook.webhook_id, state="disabled").state == "disabled"
        with pytest.raises(ConflictError, match="disabled"):
            client.test_webhook(hook.webhook_id)
        assert client.update_webhook(hook.webhook_id, state="enabled").state == "enabled"

        client.delete_webhook(hook.webhook_id)
        with pytest.raises(NotFoundError):
            client.get_webhook(hook.webhook_id)


def _from_the_start(tenant_id: str) -> str:
    """The Last-Event-ID that replays a tenant's outbox from its first event."""
    return f"evt_{0:016d}_{tenant_id.replace('-', '')[:12]}"


def _close_empty_sessions(client: Memoryd, names: list[str]) -> None:
    """A ``session.closed`` event each, in order."""
    for name in names:
        client.open_session(name)
        client.close_session(name)


def test_the_event_stream_iterates_in_order_and_resumes(server, tenant, receiver):
    with Memoryd(server.base_url, tenant[1]) as client:
        hook = client.create_webhook(receiver.url, events=["job.failed"])
        client.test_webhook(hook.webhook_id)  # for the endpoint alone, never on the stream
        _close_empty_sessions(client, ["e0", "e1", "e2"])
        events = []
        for event in client.events(last_event_id=_from_the_start(tenant[0])):
            events.append(event)
            if len(events) == 3:
                break
        assert [(e.type, e.data["session_id"]) for e in events] == [("session.closed", f"e{n}") for n in range(3)]
        resumed = []
        for event in client.events(last_event_id=events[0].id):
            resumed.append(event)
            if len(resumed) == 2:
                break
        assert [e.id for e in resumed] == [e.id for e in events[1:]]

        # Live: an event made after the stream opened arrives on it.
        seen: list[str] = []

        def follow() -> None:
            for event in client.events(types=["session.closed"]):
                seen.append(event.data["session_id"])
                return

        reader = threading.Thread(target=follow)
        reader.start()
        time.sleep(0.5)
        _close_empty_sessions(client, ["later"])
        reader.join(20)
        assert seen == ["later"]


async def test_the_async_stream_resumes_too(server, tenant, receiver):
    with Memoryd(server.base_url, tenant[1]) as sync_client:
        _close_empty_sessions(sync_client, ["a0", "a1", "a2"])
    async with AsyncMemoryd(server.base_url, tenant[1]) as client:
        got = []

        async def read(after: str, count: int) -> None:
            async for event in client.events(last_event_id=after):
                got.append(event.data["session_id"])
                if len(got) == count:
                    return

        await asyncio.wait_for(read(_from_the_start(tenant[0]), 3), 20)
        assert got == ["a0", "a1", "a2"]
