"""memoryd: long-term memory for AI agents — the Python client.

>>> from memoryd import Memoryd
>>> client = Memoryd()            # MEMORYD_URL, MEMORYD_API_KEY
>>> client.get_session("chat-1")

The openai-agents integration is :mod:`memoryd.agents` (``pip install
"memoryd-client[agents]"``).
"""

from . import models
from ._transport import RawResponse, RetryPolicy
from .buffer import AsyncSegmentBuffer, BufferedAppendError, SegmentBuffer
from .client import AsyncMemoryd, Memoryd
from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    ForbiddenError,
    InsufficientStorageError,
    MemorydError,
    NotFoundError,
    QuotaExceededError,
    RateLimitedError,
    RequestTimeoutError,
    ServerError,
    UnavailableError,
)
from .webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "AsyncMemoryd",
    "AsyncSegmentBuffer",
    "BufferedAppendError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "ConnectionFailedError",
    "RequestTimeoutError",
    "InsufficientStorageError",
    "Memoryd",
    "MemorydError",
    "NotFoundError",
    "ForbiddenError",
    "QuotaExceededError",
    "RateLimitedError",
    "RawResponse",
    "RetryPolicy",
    "SegmentBuffer",
    "ServerError",
    "UnavailableError",
    "WebhookVerificationError",
    "models",
    "verify_webhook",
]
