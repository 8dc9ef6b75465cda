"""Receiving memoryd's webhooks and reading its event stream.

:func:`verify_webhook` checks a delivery as the Standard Webhooks
specification says (the scheme Svix uses): the ``webhook-signature`` header
holds one or more ``v1,<base64>`` signatures, each the HMAC-SHA256 of
``{webhook-id}.{webhook-timestamp}.{body}`` under the secret's bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from .models import Event, StreamedEvent


class WebhookVerificationError(Exception):
    """The delivery is not memoryd's, or is too old to trust."""


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    raise WebhookVerificationError(f"the {name} header is missing")


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance: float = 300.0,
    now: float | None = None,
) -> Event:
    """The event of a delivery whose signature verifies under ``secret``
    (``whsec_…``) and whose timestamp is within ``tolerance`` seconds of
    ``now``; raises :class:`WebhookVerificationError` otherwise. Pass the
    body exactly as received."""
    raw = body.encode() if isinstance(body, str) else body
    webhook_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    try:
        sent_at = int(stamp)
    except ValueError as exc:
        raise WebhookVerificationError("webhook-timestamp is not a number") from exc
    if abs((time.time() if now is None else now) - sent_at) > tolerance:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance")
    if not secret.startswith("whsec_"):
        raise WebhookVerificationError("the secret must start with whsec_")
    key = base64.b64decode(secret[len("whsec_") :])
    signed = f"{webhook_id}.{sent_at}.".encode() + raw
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split(" "):
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return Event.model_validate(json.loads(raw))
    raise WebhookVerificationError("no signature matches the secret")


class EventStreamParser:
    """Server-sent events, line by line (only what memoryd sends: ``id``,
    ``event``, ``data`` and comments)."""

    def __init__(self) -> None:
        self._id = ""
        self._data: list[str] = []

    def feed(self, line: str) -> StreamedEvent | None:
        """The event a blank line completes, if any."""
        line = line.rstrip("\r\n")
        if not line:
            if not self._data:
                return None
            payload: Any = json.loads("\n".join(self._data))
            event = StreamedEvent.model_validate({**payload, "id": self._id})
            self._data = []
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "id":
            self._id = value
        elif field == "data":
            self._data.append(value)
        return None
