"""What the sync and the async client share: how a call becomes an HTTP
request, which failures are retried and for how long, and how an answer
becomes a model or an error."""

from __future__ import annotations

import email.utils
import os
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from .errors import ConnectionFailedError, MemorydError, RequestTimeoutError, error_class_for

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
# 429, 503 and 507 promise that nothing was done and that it may pass by itself.
RETRYABLE_STATUSES = frozenset({429, 503, 507})

T = TypeVar("T")


def segment(value: str) -> str:
    """One path segment, percent-encoded (a slash in an id must not become a path)."""
    return quote(value, safe="")


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried: connection errors, 429, 503 and 507.

    The wait before retry *n* (from 0) is a random time up to
    ``min(max_delay, base_delay * 2**n)`` ("full jitter"), but never less
    than the ``Retry-After`` memoryd asked for (itself capped at
    ``max_retry_after``, beyond which the error is raised at once).
    """

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        if attempt >= self.max_retries:
            return None
        if retry_after is not None and retry_after > self.max_retry_after:
            return None
        backoff = random.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))
        return max(backoff, retry_after or 0.0)


@dataclass
class Call(Generic[T]):
    """One API call: the request, whether a retry is safe, and how to read the answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    # A call that may have taken effect before its connection broke is
    # retried only if repeating it is harmless.
    idempotent: bool = True
    admin: bool = False
    # Seconds beyond the client's timeout this call may take (a close that waits).
    extra_time: float = 0.0
    # Seconds the whole call may take, its retries and their waits included.
    budget: float | None = None

    def query(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self.params.items():
            if v is None:
                continue
            out[k] = ("true" if v else "false") if isinstance(v, bool) else v
        return out


def new_idempotency_key() -> str:
    return f"memoryd-py-{uuid.uuid4().hex}"


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_from_response(response: httpx.Response) -> MemorydError:
    request_id = response.headers.get("x-request-id")
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    body: Any = None
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if isinstance(body, dict) and "code" in body:
        code, detail, title = str(body["code"]), str(body.get("detail", "")), body.get("title")
    else:
        code, detail, title = "unexpected_response", f"HTTP {response.status_code}: {str(body)[:200]}", None
    cls = error_class_for(response.status_code, code)
    return cls(
        status=response.status_code,
        code=code,
        detail=detail,
        title=title,
        request_id=request_id,
        retry_after=retry_after,
        body=body,
    )


def connection_error(exc: httpx.TransportError) -> MemorydError:
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.TimeoutException):
        return RequestTimeoutError(status=None, code="timeout", detail=detail)
    return ConnectionFailedError(status=None, code="connection_failed", detail=detail)


@dataclass
class Settings:
    base_url: str
    api_key: str | None
    admin_token: str | None
    retry: RetryPolicy
    timeout: float
    # Sent with every request (a tracing header, say); a call's own win.
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        base_url: str | None,
        api_key: str | None,
        admin_token: str | None,
        retry: RetryPolicy | None,
        max_retries: int | None,
        timeout: float,
    ) -> Settings:
        policy = retry or RetryPolicy()
        if max_retries is not None:
            policy = RetryPolicy(
                max_retries=max_retries,
                base_delay=policy.base_delay,
                max_delay=policy.max_delay,
                max_retry_after=policy.max_retry_after,
            )
        return cls(
            base_url=(base_url or os.environ.get("MEMORYD_URL") or DEFAULT_BASE_URL).rstrip("/"),
            api_key=api_key or os.environ.get("MEMORYD_API_KEY"),
            admin_token=admin_token or os.environ.get("MEMORYD_ADMIN_TOKEN"),
            retry=policy,
            timeout=timeout,
        )

    def request_options(self, call: Call[Any], remaining: float | None) -> dict[str, Any]:
        headers = {"user-agent": "memoryd-python/0.1", **self.headers, **call.headers}
        token = self.admin_token if call.admin else self.api_key
        if token:
            headers["authorization"] = f"Bearer {token}"
        timeout = self.timeout + call.extra_time
        if remaining is not None:
            timeout = max(0.001, min(timeout, remaining))
        return {
            "params": call.query(),
            "json": call.json,
            "headers": headers,
            "timeout": timeout,
        }


@dataclass
class RawResponse(Generic[T]):
    """An answer as it came (``with_raw_response``): its status, headers and
    request id, and the value the method would have returned, on demand."""

    http_response: httpx.Response
    parser: Callable[[httpx.Response], T]

    @property
    def status_code(self) -> int:
        return self.http_response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.http_response.headers

    @property
    def request_id(self) -> str | None:
        found: str | None = self.http_response.headers.get("x-request-id")
        return found

    def parse(self) -> T:
        return self.parser(self.http_response)


def raw(call: Call[T]) -> Call[RawResponse[T]]:
    """The call, answering its response rather than its value."""
    parse = call.parse

    def answer(response: httpx.Response) -> RawResponse[T]:
        return RawResponse(response, parse)

    return Call(
        call.method,
        call.path,
        answer,
        params=call.params,
        json=call.json,
        headers=call.headers,
        idempotent=call.idempotent,
        admin=call.admin,
        extra_time=call.extra_time,
        budget=call.budget,
    )


@dataclass
class Answered(Generic[T]):
    """An attempt that got its answer."""

    value: T


@dataclass
class Failed:
    """An attempt that failed, and the wait before the next one (``None``:
    give up and raise ``error``)."""

    error: MemorydError
    wait: float | None = None


Outcome = Answered[T] | Failed


class Attempts(Generic[T]):
    """The attempts of one call, as both clients make them: the options of
    the next request, and what an answer comes to within the retry policy
    and the call's budget."""

    def __init__(self, call: Call[T], settings: Settings) -> None:
        self.call = call
        self.settings = settings
        self.number = 0
        self.ends = None if call.budget is None else time.monotonic() + call.budget

    def url(self) -> str:
        return self.settings.base_url + self.call.path

    def options(self) -> dict[str, Any]:
        remaining = None if self.ends is None else self.ends - time.monotonic()
        return self.settings.request_options(self.call, remaining)

    def judge(self, answer: httpx.Response | httpx.TransportError) -> Outcome[T]:
        outcome = judge(self.call, self.number, self.settings.retry, answer)
        self.number += 1
        if isinstance(outcome, Failed) and outcome.wait is not None and self.ends is not None:
            outcome.wait = None if time.monotonic() + outcome.wait >= self.ends else outcome.wait
        return outcome


def judge(
    call: Call[T], attempt: int, policy: RetryPolicy, answer: httpx.Response | httpx.TransportError
) -> Outcome[T]:
    if isinstance(answer, httpx.TransportError):
        wait = policy.delay(attempt, None) if call.idempotent else None
        return Failed(connection_error(answer), wait)
    if answer.status_code < 400:
        return Answered(call.parse(answer))
    error = error_from_response(answer)
    wait = policy.delay(attempt, error.retry_after) if transient(call, answer.status_code) else None
    return Failed(error, wait)


def transient(call: Call[Any], status: int) -> bool:
    """An answer worth trying again: memoryd's own transient ones (429, 503, 507);
    a gateway's (502, 504) when repeating the call is harmless; a 500 of a read."""
    if status in RETRYABLE_STATUSES:
        return True
    if status in (502, 504):
        return call.idempotent
    return status == 500 and call.method == "GET"
