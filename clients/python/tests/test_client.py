"""The sync and async clients against the real memoryd: every route, typed
errors, and retries that never duplicate a line."""

from __future__ import annotations

import io
import json
import socket
import tarfile
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
from conftest import serve

from memoryd import (
    AsyncMemoryd,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    ForbiddenError,
    Memoryd,
    MemorydError,
    NotFoundError,
    QuotaExceededError,
    RateLimitedError,
    RequestTimeoutError,
    RetryPolicy,
    UnavailableError,
)
from memoryd import models as m
from memoryd.models import LayoutConfig

FAST = RetryPolicy(max_retries=3, base_delay=0.05, max_delay=0.2)


def segment(rollout_id: str, text: str) -> dict:
    return {
        "rollout_id": rollout_id,
        "input": text,
        "generated_items": [{"role": "assistant", "content": f"noted: {text}"}],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
        "final_output": f"noted: {text}",
    }


def lines_of(server, tenant_id: str, rollout_path: str) -> list[dict]:
    return [json.loads(line) for line in server.rollout_file(tenant_id, rollout_path).read_text().splitlines()]


def test_the_main_job_through_the_sync_client(server, tenant):
    tenant_id, key = tenant
    with Memoryd(server.base_url, key, retry=FAST) as client:
        assert client.health() == {"status": "ok"}
        assert client.ready() == {"status": "ready"}
        opened = client.open_session("py-main", metadata={"user": "u1"})
        assert opened.state == "open" and opened.metadata == {"user": "u1"}
        first = client.append_segment("py-main", segment("chat-1", "I prefer green tea."))
        second = client.append_segment("py-main", segment("chat-1", "And oat milk."))
        assert (first.segment_index, second.segment_index) == (0, 1)
        assert first.rollout_path == "sessions/chat-1.jsonl"
        session = client.get_session("py-main")
        assert [(r.rollout_id, r.segment_count) for r in session.rollouts] == [("chat-1", 2)]
        closed = client.close_session("py-main", wait=30)
        assert closed.state == "closed", closed
        assert {j.kind for j in closed.jobs} == {"phase_one", "phase_two"}
        jobs = client.list_jobs(session_id="py-main").jobs
        assert len(jobs) == 2 and all(j.state == "succeeded" for j in jobs)
        assert client.get_job(jobs[0].job_id).job_id == jobs[0].job_id
        runs = client.list_runs().runs
        assert runs[0].state == "succeeded" and "py-main" in runs[0].sessions
        listed = client.list_sessions(state="closed")
        assert [(s.session_id, s.segments, s.rollouts) for s in listed.sessions] == [("py-main", 2, 1)]
        assert listed.next_cursor is None
        assert [(w.name, w.layouts, w.sessions) for w in client.list_workspaces()] == [("default", ["default"], 1)]
        files = {f.path: f.bytes for f in client.list_files()}
        assert "MEMORY.md" in files and files["memory_summary.md"] > 0
        selection = client.get_selection()
        assert [s.rollout_id for s in selection.selected] == ["chat-1"]
        summary = client.get_file("memory_summary.md")
        assert "green tea" in summary
        instructions = client.get_instructions()
        assert "MEMORY_SUMMARY BEGINS" in instructions.instructions and "green tea" in instructions.instructions
        assert instructions.memory_dir == "memories"
        assert "memoryd_" in client.metrics()


def test_the_running_agents_memory_routes(server, tenant):
    _, key = tenant
    with Memoryd(server.base_url, key, retry=FAST) as client:
        client.append_segment("py-agent", segment("chat-7", "I prefer green tea."))
        assert client.close_session("py-agent", wait=30).state == "closed"
        listed = client.list_memory()
        assert "MEMORY.md" in [e.path for e in listed.entries]
        memory = client.read_memory("memories/MEMORY.md")
        assert "green tea" in memory.text and len(memory.sha256) == 64
        found = client.search_memory("GREEN TEA")
        assert isinstance(found, m.MemorySearch) and found.matches[0].path == "MEMORY.md"
        ranked = client.search_memory("tea green", mode="ranked", limit=1)
        assert isinstance(ranked, m.MemoryPassages) and ranked.mode == "ranked"
        assert "green tea" in ranked.matches[0].text and ranked.not_embedded is None
        with pytest.raises(MemorydError) as refused:
            client.search_memory("tea", mode="semantic")
        assert refused.value.code == "not_configured"
        done = client.edit_memory(
            operations=[
                {"command": "insert", "path": "MEMORY.md", "insert_line": 0, "insert_text": "- likes oat milk"}
            ],
            expect={"MEMORY.md": memory.sha256},
            session_id="py-agent-run",
            reason="learned today",
        )
        assert isinstance(done, m.PublishedEdit)
        assert [(c.path, c.change) for c in done.changes] == [("MEMORY.md", "modified")]
        assert client.read_memory("MEMORY.md", limit=1).text == "- likes oat milk\n"
        with pytest.raises(ConflictError) as stale:
            delete = "*** Begin Patch\n*** Delete File: MEMORY.md\n*** End Patch"
            client.edit_memory(patch=delete, expect={"MEMORY.md": memory.sha256})
        assert stale.value.code == "memory_changed"
        run = client.get_run(done.run_id)
        assert (run.kind, run.session_id, run.reason) == ("edit", "py-agent-run", "learned today")


async def test_the_async_client_reaches_memory_too(server, tenant):
    _, key = tenant
    async with AsyncMemoryd(server.base_url, key, retry=FAST) as client:
        await client.append_segment("py-async-agent", segment("chat-8", "I use vim."))
        await client.close_session("py-async-agent", wait=30)
        found = await client.search_memory("vim", context=1)
        assert found.matches and found.matches[0].text
        done = await client.edit_memory(patch="*** Begin Patch\n*** Add File: notes.md\n+vim keys\n*** End Patch")
        assert isinstance(done, m.PublishedEdit) and done.changes[0].change == "added"


def test_history_diffs_and_restores(server, tenant):
    with Memoryd(server.base_url, tenant[1], retry=FAST) as client:
        client.append_segment("py-h1", segment("h1", "I prefer green tea."))
        client.close_session("py-h1", wait=30)
        first = client.list_runs(limit=1).runs[0]
        client.append_segment("py-h2", segment("h2", "I switched to black coffee."))
        client.close_session("py-h2", wait=30)
        detail = client.get_run(first.run_id)
        assert detail.history_kept and detail.run_id == first.run_id
        memory = next(c for c in detail.changes if c.path == "MEMORY.md")
        assert memory.change == "modified" and memory.before_bytes == 0 and "+" in memory.diff
        then = client.get_file("MEMORY.md", run_id=first.run_id)
        assert "green tea" in then and "black coffee" not in then
        assert "black coffee" in client.get_file("MEMORY.md")
        job = client.restore_run(first.run_id)
        assert job.kind == "restore" and job.restore_run_id == first.run_id
        deadline = time.monotonic() + 30
        while client.get_job(job.job_id).state in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.get_file("MEMORY.md") == then
        assert client.list_runs(limit=1).runs[0].restored_from == first.run_id


def wait_for(client, job_id: str):
    deadline = time.monotonic() + 30
    while (job := client.get_job(job_id)).state in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return job


def test_forgetting_a_conversation_and_a_workspace(server, tenant):
    with Memoryd(server.base_url, tenant[1], retry=FAST) as client:
        client.append_segment("py-f1", segment("f-secret", "My locker code is 7421."))
        client.close_session("py-f1", wait=30)
        client.append_segment("py-f2", segment("f-kept", "I prefer green tea."))
        client.close_session("py-f2", wait=30)
        assert "7421" in client.get_file("MEMORY.md")
        with pytest.raises(BadRequestError):
            client.forget_rollout("f-secret", mode="erase")
        with pytest.raises(NotFoundError):
            client.forget_rollout("f-nobody")
        job = client.forget_rollout("f-secret", mode="rebuild")
        assert job.kind == "forget" and job.forget.scope == "rollouts" and job.forget.rollout_ids == ["f-secret"]
        assert wait_for(client, job.job_id).state == "succeeded"
        memory = client.get_file("MEMORY.md")
        assert "7421" not in memory and "green tea" in memory
        assert client.list_runs(limit=1).runs[0].kind == "forget"
        client.append_segment("py-f3", segment("f-team", "hello"), workspace="py-team")
        workspace_job = client.forget_workspace("py-team")
        assert workspace_job.forget.scope == "workspace"
        assert wait_for(client, workspace_job.job_id).state == "succeeded"
        with pytest.raises(NotFoundError):
            client.list_files(workspace="py-team")


def test_layouts_with_etags(server, tenant):
    with Memoryd(server.base_url, tenant[1], retry=FAST) as client:
        assert [layout.name for layout in client.list_layouts()] == ["default"]
        created = client.put_layout("notes", LayoutConfig(memories_dir="notes/memory", sessions_dir="notes/sessions"))
        assert created.name == "notes" and created.etag
        assert client.get_layout("notes").etag == created.etag
        with pytest.raises(ConflictError) as stale:
            client.put_layout("notes", {"memories_dir": "notes/m2", "sessions_dir": "notes/s2"}, if_match='"stale"')
        assert stale.value.status == 412 and stale.value.code == "precondition_failed"
        replaced = client.put_layout(
            "notes", {"memories_dir": "notes/m2", "sessions_dir": "notes/s2"}, if_match=created.etag
        )
        assert replaced.memories_dir == "notes/m2" and replaced.etag != created.etag
        assert client.get_instructions(layout="notes") is None  # no memory yet: 204

        # Read, change, write back: the read's etag is the precondition.
        current = client.get_layout("notes")
        assert current.redaction is not None and current.retention is not None  # defaults are shown
        unchanged = client.put_layout("notes", current)
        assert unchanged.etag == current.etag
        assert current.generate is not None
        current.generate.max_raw_memories_for_consolidation = 32
        changed = client.put_layout("notes", current)
        assert changed.generate is not None and changed.generate.max_raw_memories_for_consolidation == 32
        with pytest.raises(ConflictError) as lost_update:
            client.put_layout("notes", current)  # its etag is no longer the layout's
        assert lost_update.value.status == 412


def test_problem_documents_are_typed_errors(server, tenant):
    with Memoryd(server.base_url, tenant[1], retry=FAST) as client:
        with pytest.raises(NotFoundError) as missing:
            client.get_session("nobody")
        err = missing.value
        assert (err.status, err.code) == (404, "not_found")
        assert err.request_id and err.detail
        with pytest.raises(BadRequestError) as bad:
            client.append_segment("py-bad", segment("user:42", "x"))
        assert (bad.value.status, bad.value.code) == (400, "invalid_rollout_id")
        assert "file-safe ID" in bad.value.detail
        client.append_segment("py-closed", segment("c", "x"))
        client.close_session("py-closed")
        with pytest.raises(ConflictError) as closed:
            client.append_segment("py-closed", segment("c", "y"))
        assert closed.value.code == "session_closed"
    with Memoryd(server.base_url, "not-a-key", retry=FAST) as stranger:
        with pytest.raises(AuthenticationError) as denied:
            stranger.list_jobs()
        assert (denied.value.status, denied.value.code) == (401, "unauthorized")


def test_admin_routes(server):
    with Memoryd(server.base_url, admin_token=server.admin_token, retry=FAST) as admin:
        issued = admin.create_tenant("py-admin")
        another = admin.issue_key(issued.tenant_id)
        assert another.api_key and another.api_key != issued.api_key
        listed = {t.tenant_id: t for t in admin.list_tenants(limit=1000).tenants}
        assert (listed[issued.tenant_id].name, listed[issued.tenant_id].keys) == ("py-admin", 2)
        admin.revoke_key(another.key_id)
        assert {t.tenant_id: t.keys for t in admin.list_tenants(limit=1000).tenants}[issued.tenant_id] == 1
        first = admin.list_tenants(limit=1)
        assert len(first.tenants) == 1 and first.next_cursor
        second = admin.list_tenants(limit=1, cursor=first.next_cursor)
        assert second.tenants[0].tenant_id != first.tenants[0].tenant_id
    with Memoryd(server.base_url, another.api_key, retry=FAST) as revoked, pytest.raises(AuthenticationError):
        revoked.list_layouts()
    with Memoryd(server.base_url, admin_token=server.admin_token, retry=FAST) as admin:
        doomed = admin.create_tenant("py-doomed")
        job = admin.delete_tenant(doomed.tenant_id)
        assert job.kind == "forget" and job.forget.scope == "tenant"
        deadline = time.monotonic() + 30
        while doomed.tenant_id in {t.tenant_id for t in admin.list_tenants(limit=1000).tenants}:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(NotFoundError):
            admin.delete_tenant(doomed.tenant_id)
    with Memoryd(server.base_url, admin_token=server.admin_token, retry=FAST) as admin:
        limited = admin.create_tenant("py-limited")
        set_now = admin.set_limits(limited.tenant_id, requests_per_second=2, burst=4, storage_bytes=0)
        assert (set_now.requests_per_second, set_now.burst, set_now.storage_bytes) == (2, 4, None)
        assert admin.tenant_limits(limited.tenant_id) == set_now
    with Memoryd(server.base_url, limited.api_key, retry=FAST) as tenant:
        assert tenant.limits() == set_now
    with Memoryd(server.base_url, admin_token=server.admin_token, retry=FAST) as admin:
        admin.set_limits(limited.tenant_id, open_sessions=1)
    with Memoryd(server.base_url, limited.api_key, retry=FAST) as tenant:
        tenant.open_session("py-only")
        with pytest.raises(QuotaExceededError) as capped:
            tenant.open_session("py-one-more")
        assert (capped.value.status, capped.value.code) == (403, "quota_exceeded")
        tenant.append_segment("py-only", segment("r", "counted"))
        used = tenant.usage()
        today = datetime.now(timezone.utc).date()
        assert len(used.days) == 30 and used.days[-1].date == today
        assert (used.days[-1].segments, used.days[-1].closes) == (1, 0)
        assert used.storage_bytes == used.days[-1].bytes_ingested > 0
        assert tenant.usage(from_date=today, to_date=today.isoformat()).days == [used.days[-1]]
        with pytest.raises(BadRequestError):
            tenant.usage(from_date="yesterday")
    with Memoryd(server.base_url, admin_token=server.admin_token, retry=FAST) as admin:
        assert admin.tenant_usage(limited.tenant_id) == used
        admin.set_limits(limited.tenant_id, storage_bytes=used.storage_bytes + 1)
    with Memoryd(server.base_url, limited.api_key, retry=FAST) as tenant, pytest.raises(QuotaExceededError):
        tenant.append_segment("py-only", segment("r", "no room for this"))
    with Memoryd(server.base_url, doomed.api_key, retry=FAST) as gone, pytest.raises(AuthenticationError):
        gone.list_layouts()


def test_scoped_keys(server):
    """One key per end user: its workspace only, its permissions only."""
    with Memoryd(server.base_url, admin_token=server.admin_token, retry=FAST) as admin:
        issued = admin.create_tenant("py-scoped")
        dashboard = admin.issue_key(issued.tenant_id, name="dashboard", workspaces="*", permissions=["read"])
        assert (dashboard.workspaces, dashboard.permissions) == ("*", ["read"])
    with Memoryd(server.base_url, issued.api_key, retry=FAST) as owner:
        until = datetime.now(timezone.utc).replace(year=datetime.now(timezone.utc).year + 1)
        alice = owner.create_key(["py-alice"], ["ingest", "read"], name="alice", expires_at=until)
        assert (alice.workspaces, alice.permissions, alice.name) == (["py-alice"], ["ingest", "read"], "alice")
        assert alice.expires_at is not None and abs((alice.expires_at - until).total_seconds()) < 0.001
        listed = owner.list_keys().keys
        assert [k.name for k in listed] == ["alice", "dashboard", None], "newest first"
        assert all(isinstance(k, m.Key) and not hasattr(k, "api_key") for k in listed)
        assert listed[0].created_by == listed[2].key_id and listed[2].created_by is None
        first = owner.list_keys(limit=1)
        assert len(first.keys) == 1 and first.next_cursor is not None
        assert [k.name for k in owner.list_keys(limit=5, cursor=first.next_cursor).keys] == ["dashboard", None]
    with Memoryd(server.base_url, alice.api_key, retry=FAST) as runtime:
        runtime.open_session("py-a1", workspace="py-alice")
        with pytest.raises(ForbiddenError) as elsewhere:
            runtime.open_session("py-b1", workspace="py-bob")
        assert (elsewhere.value.status, elsewhere.value.code) == (403, "forbidden")
        with pytest.raises(NotFoundError):
            runtime.get_instructions(workspace="py-bob")
        with pytest.raises(ForbiddenError):
            runtime.create_key("*", ["read"])
        assert [s.workspace for s in runtime.list_sessions().sessions] == ["py-alice"]
    with Memoryd(server.base_url, issued.api_key, retry=FAST) as owner:
        owner.delete_key(alice.key_id)
        with pytest.raises(NotFoundError):
            owner.delete_key(alice.key_id)
    with Memoryd(server.base_url, alice.api_key, retry=FAST) as revoked, pytest.raises(AuthenticationError):
        revoked.list_sessions()
    with Memoryd(server.base_url, admin_token=server.admin_token, retry=FAST) as admin:
        assert [k.name for k in admin.tenant_keys(issued.tenant_id).keys] == ["dashboard", None]


@pytest.mark.parametrize("fault", ["503", "429", "drop"])
def test_a_retried_append_is_written_once(server, tenant, fault_proxy, fault):
    """memoryd wrote the line, but its answer was replaced by a 503/429 with
    Retry-After (or the connection broke): the retry carries the same
    Idempotency-Key and gets the first answer; the file has the line once."""
    tenant_id, key = tenant
    fault_proxy.faults = [fault, fault]
    with Memoryd(fault_proxy.base_url, key, retry=FAST) as client:
        started = time.monotonic()
        appended = client.append_segment(f"py-retry-{fault}", segment("r", "only once"))
        waited = time.monotonic() - started
    attempts = [s for s in fault_proxy.seen if "/segments" in s[1]]
    assert len(attempts) == 3, attempts
    assert len({key for _, _, key, _ in attempts}) == 1 and attempts[0][2]
    assert all(status == 201 for *_, status in attempts)
    if fault != "drop":
        assert waited >= 2.0, "Retry-After: 1 was not honoured twice"
    assert appended.segment_index == 0
    assert [line["input"][0]["content"] for line in lines_of(server, tenant_id, appended.rollout_path)] == ["only once"]


def test_retries_give_up_with_the_last_error(server, tenant, fault_proxy):
    fault_proxy.faults = ["503-before"] * 3
    policy = RetryPolicy(max_retries=2, base_delay=0.01)
    with Memoryd(fault_proxy.base_url, tenant[1], retry=policy) as client, pytest.raises(UnavailableError) as gave_up:
        client.append_segment("py-giveup", segment("g", "x"))
    assert gave_up.value.status == 503 and gave_up.value.retry_after == 1.0
    assert gave_up.value.request_id == "proxy-injected"
    assert len(fault_proxy.seen) == 3


def test_a_rate_limit_beyond_the_retries_is_raised(server, tenant, fault_proxy):
    fault_proxy.faults = ["429"]
    policy = RetryPolicy(max_retries=0)
    with Memoryd(fault_proxy.base_url, tenant[1], retry=policy) as client, pytest.raises(RateLimitedError) as limited:
        client.append_segment("py-limited", segment("l", "x"))
    assert limited.value.code == "rate_limited"


def test_an_unreachable_memoryd_is_a_connection_error():
    policy = RetryPolicy(max_retries=1, base_delay=0.01)
    with Memoryd("http://127.0.0.1:9", "k", retry=policy) as client, pytest.raises(ConnectionFailedError) as down:
        client.list_jobs()
    assert down.value.status is None and down.value.code == "connection_failed"


async def test_the_async_client(server, tenant):
    tenant_id, key = tenant
    async with AsyncMemoryd(server.base_url, key, retry=FAST) as client:
        appended = await client.append_segment("py-async", segment("a", "async hello"), idempotency_key="k-1")
        again = await client.append_segment("py-async", segment("a", "async hello"), idempotency_key="k-1")
        assert appended.segment_index == again.segment_index == 0
        with pytest.raises(ConflictError) as reused:
            await client.append_segment("py-async", segment("a", "other"), idempotency_key="k-1")
        assert reused.value.code == "idempotency_conflict"
        closed = await client.close_session("py-async", wait=30)
        assert closed.state == "closed"
        with pytest.raises(NotFoundError):
            await client.get_job("00000000-0000-0000-0000-000000000000")
        into = io.BytesIO()
        written = await client.export_workspace("default", into)
        assert written == len(into.getvalue()) > 0
        with tarfile.open(fileobj=io.BytesIO(into.getvalue()), mode="r:gz") as archive:
            assert archive.getnames()[0] == "memoryd-export.json"
            assert appended.rollout_path in archive.getnames()
    assert len(lines_of(server, tenant_id, appended.rollout_path)) == 1


def test_a_workspace_exports_to_a_file(server, tenant, tmp_path):
    tenant_id, key = tenant
    with Memoryd(server.base_url, key, retry=FAST) as client:
        first = client.append_segment("py-export", segment("e", "export me"))
        client.append_segment("py-export", segment("e", "and me"))
        path = tmp_path / "default.tar.gz"
        written = client.export_workspace("default", path)
        assert written == path.stat().st_size
        with tarfile.open(path, mode="r:gz") as archive:
            manifest = json.load(archive.extractfile("memoryd-export.json"))
            rollout = archive.extractfile(first.rollout_path).read()
        assert rollout == server.rollout_file(tenant_id, first.rollout_path).read_bytes()
        listed = {r["rollout_id"]: r for r in manifest["layouts"][0]["rollouts"]}
        assert listed["e"]["committed_len"] == len(rollout) and listed["e"]["segment_count"] == 2
        with pytest.raises(NotFoundError):
            client.export_workspace("nowhere", tmp_path / "nowhere.tar.gz")
        # A failed export leaves the file that was there, and no part file.
        before = path.read_bytes()
        with pytest.raises(NotFoundError):
            client.export_workspace("nowhere", path)
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["default.tar.gz"]
        # Into another workspace, from the path and (async) from an open file.
        job = client.import_workspace("py-copy", path)
        assert job.kind == "import" and job.state in ("queued", "running", "succeeded")
        deadline = time.monotonic() + 30
        while client.get_job(job.job_id).state in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.get_job(job.job_id).state == "succeeded"
        assert server.rollout_file(tenant_id, first.rollout_path, "py-copy").read_bytes() == rollout
        with pytest.raises(ConflictError) as taken:
            client.import_workspace("py-copy", path)
        assert taken.value.code == "workspace_not_empty"
        with pytest.raises(BadRequestError) as refused:
            client.import_workspace("py-bad", io.BytesIO(b"not gzip"))
        assert (refused.value.status, refused.value.code) == (422, "invalid_archive")


async def test_the_async_client_imports_from_a_file(server, tenant, tmp_path):
    tenant_id, key = tenant
    async with AsyncMemoryd(server.base_url, key, retry=FAST) as client:
        await client.append_segment("py-async-export", segment("ae", "move me"))
        path = tmp_path / "ws.tar.gz"
        await client.export_workspace("default", path)
        with open(path, "rb") as archive:
            job = await client.import_workspace("py-async-copy", archive)
        assert job.kind == "import"


def test_environment_configures_the_client(monkeypatch, server, tenant):
    monkeypatch.setenv("MEMORYD_URL", server.base_url)
    monkeypatch.setenv("MEMORYD_API_KEY", tenant[1])
    with Memoryd() as client:
        assert client.base_url == server.base_url
        assert [layout.name for layout in client.list_layouts()] == ["default"]


def test_pages_follow_their_cursors(server, tenant):
    with Memoryd(server.base_url, tenant[1], retry=FAST) as client:
        for n in range(5):
            client.open_session(f"py-page-{n}")
        seen, cursor = [], None
        while True:
            page = client.list_sessions(limit=2, cursor=cursor)
            seen += [s.session_id for s in page.sessions]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == [f"py-page-{n}" for n in reversed(range(5))]
        with pytest.raises(BadRequestError) as garbage:
            client.list_sessions(cursor="not-a-cursor")
        assert garbage.value.code == "invalid_request"


def test_ids_are_one_path_segment(server, tenant):
    """An id with a slash is percent-encoded, so it cannot reach another route."""
    with Memoryd(server.base_url, tenant[1], retry=FAST) as client, pytest.raises((NotFoundError, BadRequestError)):
        client.get_session("../v1/jobs")


def test_httpx_client_can_be_supplied(server, tenant):
    http = httpx.Client(timeout=5)
    client = Memoryd(server.base_url, tenant[1], http_client=http)
    client.list_layouts()
    client.close()
    assert not http.is_closed, "a supplied http client belongs to the caller"
    http.close()


def test_a_post_that_is_not_idempotent_is_sent_once_over_a_broken_connection():
    """A stub that reads each request and hangs up without an answer."""
    received: list[str] = []

    class HangUp(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            received.append(self.path)
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        do_GET = do_POST

    httpd, base = serve(HangUp)
    try:
        with Memoryd(base, "mk_x", retry=FAST) as client:
            for call in (
                lambda: client.retry_job("00000000-0000-0000-0000-000000000001"),
                lambda: client.restore_run("00000000-0000-0000-0000-000000000002"),
                lambda: client.import_workspace("w", io.BytesIO(b"not sent twice")),
            ):
                received.clear()
                with pytest.raises(ConnectionFailedError):
                    call()
                assert len(received) == 1, received
            received.clear()
            with pytest.raises(ConnectionFailedError):
                client.get_job("00000000-0000-0000-0000-000000000003")
            assert len(received) > 1, "a read is retried"
    finally:
        httpd.shutdown()


def test_the_event_stream_backs_off_on_503_and_then_gives_up():
    at: list[float] = []

    class Unavailable(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            at.append(time.monotonic())
            body = json.dumps({"code": "unavailable", "status": 503, "detail": "down"}).encode()
            self.send_response(503)
            self.send_header("content-type", "application/problem+json")
            self.send_header("retry-after", "1")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd, base = serve(Unavailable)
    try:
        policy = RetryPolicy(max_retries=1, base_delay=0.01, max_delay=0.02)
        with Memoryd(base, "mk_x", retry=policy) as client, pytest.raises(UnavailableError):
            for _ in client.events():
                pass
        assert len(at) == 2, "one reconnect, then the error"
        assert at[1] - at[0] >= 0.95, "Retry-After was honoured"
    finally:
        httpd.shutdown()


def test_the_iterators_walk_every_page(server, tenant):
    with Memoryd(server.base_url, tenant[1], admin_token=server.admin_token, retry=FAST) as client:
        for n in range(5):
            client.append_segment(f"page-{n}", segment(f"r{n}", f"conversation {n}"))
            client.close_session(f"page-{n}", wait=30)
        sessions = [s.session_id for s in client.iter_sessions(page_size=2)]
        assert sorted(sessions) == [f"page-{n}" for n in range(5)] and len(set(sessions)) == 5
        assert sessions == [s.session_id for s in client.list_sessions(limit=100).sessions], "the same order"
        jobs = list(client.iter_jobs(page_size=2))
        assert len(jobs) == len(client.list_jobs(limit=1000).jobs) >= 6
        runs = list(client.iter_runs(page_size=2))
        assert len(runs) == len(client.list_runs(limit=1000).runs) >= 1
        tenants = [t.tenant_id for t in client.iter_tenants(page_size=1)]
        assert tenant[0] in tenants and len(tenants) == len(set(tenants))


async def test_the_async_iterators_walk_every_page(server, tenant):
    with Memoryd(server.base_url, tenant[1], retry=FAST) as sync_client:
        for n in range(3):
            sync_client.open_session(f"async-page-{n}")
    async with AsyncMemoryd(server.base_url, tenant[1], retry=FAST) as client:
        sessions = [s.session_id async for s in client.iter_sessions(page_size=1)]
        assert sorted(sessions) == [f"async-page-{n}" for n in range(3)]


def test_an_import_says_its_length():
    seen: list[dict[str, str]] = []

    class Refuse(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            body = json.dumps({"code": "invalid_archive", "status": 422, "detail": "no"}).encode()
            self.send_response(422)
            self.send_header("content-type", "application/problem+json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd, base = serve(Refuse)
    try:
        archive = b"x" * 200_000
        with Memoryd(base, "mk_x", retry=FAST) as client, pytest.raises(BadRequestError):
            client.import_workspace("w", io.BytesIO(archive))
        assert seen[0].get("content-length") == str(len(archive)) and "transfer-encoding" not in seen[0]
    finally:
        httpd.shutdown()


def test_a_failed_instructions_lookup_is_remembered_for_the_ttl():
    from memoryd.agents import SyncMemorydMemory

    asked: list[str] = []

    class Down(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(500)
            self.send_header("content-length", "0")
            self.end_headers()

    httpd, base = serve(Down)
    try:
        with Memoryd(base, "mk_x", retry=FAST) as client:
            memory = SyncMemorydMemory(client, instructions_ttl=60)
            assert memory.memory_instructions() is None
            first = len(asked)
            assert first >= 1
            assert memory.memory_instructions() is None
            assert len(asked) == first, "the second turn did not ask a memoryd that is down"
    finally:
        httpd.shutdown()


def test_a_gateways_502_is_retried_for_a_read_and_a_500_only_for_a_get():
    seen: list[str] = []

    class Failing(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self) -> None:
            seen.append(self.command)
            self.rfile.read(int(self.headers.get("content-length", "0")))
            status = 502 if self.command == "GET" and len(seen) == 1 else 500
            body = json.dumps({"code": "internal", "status": status, "detail": "x"}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/problem+json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

    httpd, base = serve(Failing)
    try:
        with Memoryd(base, "mk_x", retry=RetryPolicy(max_retries=2, base_delay=0.001, max_delay=0.002)) as client:
            with pytest.raises(MemorydError):
                client.get_job("j")
            assert seen == ["GET", "GET", "GET"], "the 502 and the 500s of a read are retried"
            seen.clear()
            with pytest.raises(MemorydError):
                client.retry_job("j")
            assert seen == ["POST"], "a POST's 500 is not"
    finally:
        httpd.shutdown()


LIMIT_FIELDS = ("requests_per_second", "burst", "storage_bytes", "model_tokens_per_day", "open_sessions")


def test_per_call_options_and_raw_responses(server, tenant):
    seen: list[dict[str, str]] = []

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(dict(self.headers))
            time.sleep(0.5)
            body = json.dumps(dict.fromkeys(LIMIT_FIELDS)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd, base = serve(Slow)
    try:
        with Memoryd(base, "mk_x", timeout=5, max_retries=0) as client:
            hurried = client.with_options(timeout=0.1, headers={"x-trace": "t-1"})
            with pytest.raises(RequestTimeoutError):
                hurried.limits()
            assert seen[-1]["x-trace"] == "t-1"
            client.limits()
            assert "x-trace" not in seen[-1], "the client it came from is unchanged"
            hurried.close()
            client.limits()  # closing the copy closed no connection of the original
    finally:
        httpd.shutdown()

    with Memoryd(server.base_url, tenant[1], retry=FAST) as client:
        client.open_session("py-raw")
        answer = client.with_raw_response.get_session("py-raw")
        assert answer.status_code == 200 and answer.request_id == answer.headers["x-request-id"]
        assert answer.parse().session_id == "py-raw"


async def test_async_raw_responses(server, tenant):
    async with AsyncMemoryd(server.base_url, tenant[1], retry=FAST) as client:
        answer = await client.with_raw_response.list_layouts()
        assert answer.status_code == 200 and [layout.name for layout in answer.parse()] == ["default"]
        assert (await client.with_options(max_retries=0).list_layouts())[0].name == "default"


def test_an_answer_that_is_no_problem_document_is_unexpected_response():
    class Gateway(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = b"<h1>Bad Gateway</h1>"
            self.send_response(502)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd, base = serve(Gateway)
    try:
        with Memoryd(base, "mk_x", max_retries=0) as client, pytest.raises(MemorydError) as failed:
            client.get_job("j")
        value = failed.value
        assert (value.status, value.code, value.detail) == (
            502,
            "unexpected_response",
            "HTTP 502: <h1>Bad Gateway</h1>",
        )
    finally:
        httpd.shutdown()


def test_a_timeout_is_its_own_error():
    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            time.sleep(1.0)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    httpd, base = serve(Slow)
    try:
        with Memoryd(base, "mk_x", timeout=0.2, max_retries=0) as client, pytest.raises(RequestTimeoutError) as late:
            client.get_job("j")
        assert isinstance(late.value, ConnectionFailedError) and late.value.code == "timeout"
    finally:
        httpd.shutdown()
