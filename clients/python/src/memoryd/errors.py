"""Errors raised by the memoryd client.

Every problem document memoryd answers with (RFC 9457, with a stable ``code``)
becomes a :class:`MemorydError`, or the subclass of its family, so callers can
catch ``NotFoundError`` rather than compare status codes.
"""

from __future__ import annotations

from typing import Any


class MemorydError(Exception):
    """A request memoryd refused or could not serve.

    ``status`` is the HTTP status (``None`` when no answer arrived at all),
    ``code`` memoryd's stable error code, ``detail`` its explanation and
    ``request_id`` the ``x-request-id`` to quote when asking about it. For a
    batch append refused for one of its segments, ``index`` is that
    segment's place in the batch (else ``None``).
    """

    def __init__(
        self,
        *,
        status: int | None,
        code: str,
        detail: str,
        title: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.title = title
        self.request_id = request_id
        self.retry_after = retry_after
        self.body = body
        self.index: int | None = body.get("index") if isinstance(body, dict) else None
        where = f" (request {request_id})" if request_id else ""
        super().__init__(f"{status or 'no answer'} {code}: {detail}{where}")


class ConnectionFailedError(MemorydError):
    """memoryd could not be reached, or the connection broke before an answer."""


class RequestTimeoutError(ConnectionFailedError):
    """No answer came within the client's timeout (code ``timeout``); a
    :class:`ConnectionFailedError` too, so code that catches that still does."""


class BadRequestError(MemorydError):
    """The request itself is wrong (400, 405, 408, 413, 415, 422, 431): retrying it unchanged fails again."""


class AuthenticationError(MemorydError):
    """The API key or admin token is missing, unknown or revoked (401)."""


class NotFoundError(MemorydError):
    """No such resource for this tenant (404)."""


class ConflictError(MemorydError):
    """The resource's state forbids the request (409, 412): e.g. a closed session, a stale etag."""


class QuotaExceededError(MemorydError):
    """A limit of the tenant is reached (403 ``quota_exceeded``): e.g. its open
    sessions. Never retried: waiting does not lift it."""


class ForbiddenError(MemorydError):
    """The key lacks the permission the route takes, or may not reach that far
    (403 ``forbidden``): e.g. a session opened outside its workspaces. Never retried."""


class RateLimitedError(MemorydError):
    """Too many requests (429); retried automatically before it is raised."""


class UnavailableError(MemorydError):
    """memoryd cannot reach its database (503); retried automatically before it is raised."""


class InsufficientStorageError(MemorydError):
    """memoryd's data volume is full (507); nothing was written. Retried before it is raised."""


class ServerError(MemorydError):
    """memoryd failed (500 or an unexpected answer)."""


_BY_STATUS: dict[int, type[MemorydError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: QuotaExceededError,
    404: NotFoundError,
    405: BadRequestError,
    408: BadRequestError,
    409: ConflictError,
    412: ConflictError,
    413: BadRequestError,
    415: BadRequestError,
    422: BadRequestError,
    429: RateLimitedError,
    431: BadRequestError,
    503: UnavailableError,
    507: InsufficientStorageError,
}


def error_class_for(status: int, code: str = "") -> type[MemorydError]:
    if status == 403 and code == "forbidden":
        return ForbiddenError
    return _BY_STATUS.get(status, ServerError if status >= 500 else MemorydError)
