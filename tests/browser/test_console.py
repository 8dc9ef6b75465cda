"""The console in a real headless Chromium: sign in, read a session's
conversation, close a session, retry a failed job, open a run's diff and
restore it; hostile conversation text runs nothing on any page. Every page
visited is saved as a screenshot (MEMORYD_SCREENSHOTS, default
target/console-screenshots)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
from harness import REPO, start_memoryd
from playwright.sync_api import Page, sync_playwright

CHROMIUM = os.environ.get("MEMORYD_CHROMIUM") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("MEMORYD_SCREENSHOTS", REPO / "target" / "console-screenshots"))
# The flags a root, offline machine needs (no sandbox, no background traffic).
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE = {
    "rollout_id": "evil",
    "input": "<script>alert('input')</script> I prefer green tea with oat milk.",
    "generated_items": [
        {"role": "assistant", "content": "<img src=x onerror=\"alert('img')\"> [click me](javascript:alert('link'))"},
        {"type": "function_call", "name": "lookup", "arguments": "{\"q\": \"<svg onload=alert('svg')>\"}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "<iframe src=\"javascript:alert('frame')\"></iframe>"},
    ],
    "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
    "final_output": "Noted: green tea <script>alert('final')</script>",
}


def api(server, key, method, path, **kw):
    r = httpx.request(method, server.base_url + path, headers={"authorization": f"Bearer {key}"}, timeout=60, **kw)
    r.raise_for_status()
    return r.json() if r.content else None


@pytest.fixture(scope="module")
def memoryd(tmp_path_factory):
    """Two memoryds: one that makes memory (extractive), one whose model is
    unreachable, so its jobs fail (for the Retry button)."""
    good, stop_good = start_memoryd(tmp_path_factory.mktemp("console"), "sqlite")
    bad, stop_bad = start_memoryd(
        tmp_path_factory.mktemp("failing"),
        "sqlite",
        {"MEMORYD_LLM_PROVIDER": "openai", "MEMORYD_LLM_API_KEY": "k", "MEMORYD_LLM_BASE_URL": "http://127.0.0.1:9/v1",
         "MEMORYD_MAX_ATTEMPTS": "1"},
    )
    yield good, bad
    stop_good()
    stop_bad()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (scripts/test.sh installs Debian's chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield b
        b.close()


class Visit:
    """One signed-in tab that records every dialog a page opens and saves a
    screenshot of every page it shows."""

    def __init__(self, browser, base_url: str, tag: str):
        self.page: Page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        self.base, self.tag, self.alerts, self.shots = base_url, tag, [], 0
        self.page.on("dialog", self.on_dialog)

    def on_dialog(self, dialog):
        if dialog.type == "confirm":
            dialog.accept()
        else:
            self.alerts.append(f"{self.page.url}: {dialog.type} {dialog.message}")
            dialog.dismiss()

    def shot(self, name: str):
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.shots += 1
        self.page.screenshot(path=str(SHOTS / f"{self.tag}-{self.shots:02d}-{name}.png"), full_page=True)

    def go(self, path: str, name: str):
        response = self.page.goto(self.base + path)
        assert response is not None and response.status == 200, (path, response and response.status)
        self.shot(name)
        return self.page

    def sign_in(self, credential: str):
        self.page.goto(self.base + "/console")
        assert self.page.url.endswith("/console/login")
        self.shot("sign-in")
        self.page.fill("#credential", credential)
        self.page.click("button[type=submit]")


def test_an_operator_reads_closes_retries_and_restores(memoryd, browser):
    good, bad = memoryd
    _, key = good.tenant()
    api(good, key, "POST", "/v1/sessions/s-evil/layouts/default/segments", json=HOSTILE)
    api(good, key, "POST", "/v1/sessions/s-evil/close?wait=30")
    api(good, key, "POST", "/v1/sessions/s-second/layouts/default/segments",
        json={"rollout_id": "second", "input": "Actually I switched to black coffee.", "final_output": "noted"})
    api(good, key, "POST", "/v1/sessions/s-open/layouts/default/segments",
        json={"rollout_id": "open", "input": "Remember that my cat is called Miso.", "final_output": "ok"})

    tab = Visit(browser, good.base_url, "tenant")
    tab.sign_in(key)
    page = tab.page
    assert page.url == good.base_url + "/console"
    tab.shot("overview")
    assert "Recent sessions" in page.content()

    # A session and its (hostile) conversation, then closing the second one.
    tab.go("/console/sessions", "sessions")
    page.click("a[href='/console/sessions/s-evil']")
    tab.shot("session-conversation")
    text = page.inner_text("main")
    assert "<script>alert('input')</script> I prefer green tea" in text, "shown as text, not run"
    assert "lookup" in text and "final output" in text
    assert page.locator("main img, main iframe, main svg, main script").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    tab.go("/console/sessions/s-second", "session-open")
    page.click("text=Close session")
    page.wait_for_url(good.base_url + "/console/sessions/s-second")
    tab.shot("session-closed")
    assert api(good, key, "GET", "/v1/sessions/s-second")["state"] == "closed"
    assert "closed" in page.inner_text("main")

    # The memory, the runs and a run's diff; restoring the first run.
    tab.go("/console/memory", "memory")
    assert "black coffee" in page.inner_text("main")
    tab.go("/console/runs", "runs")
    runs = api(good, key, "GET", "/v1/workspaces/default/layouts/default/runs")["runs"]
    first = runs[-1]["run_id"]
    page.click(f"a[href='/console/runs/default/default/{first}']")
    tab.shot("run-diff")
    assert page.locator("pre.diff span.add").count() > 0
    page.click("text=Restore this memory")
    page.wait_for_url(good.base_url + "/console/jobs/*")
    job_id = page.url.rsplit("/", 1)[1]
    for _ in range(200):
        if api(good, key, "GET", f"/v1/jobs/{job_id}")["state"] == "succeeded":
            break
        time.sleep(0.05)
    page.reload()
    tab.shot("restore-job")
    assert "succeeded" in page.inner_text("main")
    memory = httpx.get(good.base_url + "/v1/workspaces/default/layouts/default/files/MEMORY.md",
                       headers={"authorization": f"Bearer {key}"}).text
    assert "green tea" in memory and "black coffee" not in memory, "the first run's memory is back"
    tab.go("/console/jobs", "jobs")
    tab.go("/console/layouts", "layouts")
    assert tab.alerts == [], tab.alerts

    # A failed job, retried from the jobs page, on the memoryd whose model is away.
    _, bad_key = bad.tenant()
    api(bad, bad_key, "POST", "/v1/sessions/s-fail/layouts/default/segments", json={"rollout_id": "f", "input": "x"})
    api(bad, bad_key, "POST", "/v1/sessions/s-fail/close")
    for _ in range(200):
        jobs = api(bad, bad_key, "GET", "/v1/jobs?kind=phase_one")["jobs"]
        if jobs and jobs[0]["state"] == "failed":
            break
        time.sleep(0.05)
    failed = jobs[0]
    ops = Visit(browser, bad.base_url, "operator")
    ops.sign_in(bad_key)
    ops.go("/console/jobs", "jobs-failed")
    assert "Failed" in ops.page.inner_text("main")
    ops.page.click(f"form[action='/console/jobs/{failed['job_id']}/retry'] button")
    ops.page.wait_for_url(bad.base_url + f"/console/jobs/{failed['job_id']}")
    ops.shot("job-retried")
    for _ in range(200):
        job = api(bad, bad_key, "GET", f"/v1/jobs/{failed['job_id']}")
        if job["state"] == "failed" and job["finished_at"] > failed["finished_at"]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the retried job did not run again: {job}")
    assert ops.alerts == [], ops.alerts


def test_the_admin_picks_a_tenant(memoryd, browser):
    good, _ = memoryd
    tenant_id, key = good.tenant()
    api(good, key, "POST", "/v1/sessions/s-admin/layouts/default/segments", json={"rollout_id": "a", "input": "hello"})
    tab = Visit(browser, good.base_url, "admin")
    tab.sign_in(good.admin_token)
    tab.page.wait_for_url(good.base_url + "/console/tenants")
    tab.shot("tenants")
    tab.page.click(f"form:has(input[value='{tenant_id}']) button")
    tab.page.wait_for_url(good.base_url + "/console")
    tab.go("/console/sessions", "admin-sessions")
    assert "s-admin" in tab.page.inner_text("main")
    assert tab.alerts == []


def test_an_operator_forgets_a_conversation_and_the_admin_a_tenant(memoryd, browser):
    good, _ = memoryd
    tenant_id, key = good.tenant()
    api(good, key, "POST", "/v1/sessions/s-forget/layouts/default/segments",
        json={"rollout_id": "secretive", "input": "My passport number is X1234567.", "final_output": "noted"})
    api(good, key, "POST", "/v1/sessions/s-forget/close?wait=30")
    memory_url = good.base_url + "/v1/workspaces/default/layouts/default/files/MEMORY.md"
    assert "X1234567" in httpx.get(memory_url, headers={"authorization": f"Bearer {key}"}).text

    tab = Visit(browser, good.base_url, "forget")
    tab.sign_in(key)
    tab.page.wait_for_url(good.base_url + "/console")
    tab.go("/console/sessions/s-forget", "session-forget")
    form = "form[action='/console/forget/rollout']"
    tab.page.select_option(f"{form} select[name=mode]", "rebuild")
    tab.page.click(f"{form} button")
    tab.page.wait_for_url(good.base_url + "/console/jobs/*")
    job_id = tab.page.url.rsplit("/", 1)[1]
    for _ in range(200):
        if api(good, key, "GET", f"/v1/jobs/{job_id}")["state"] == "succeeded":
            break
        time.sleep(0.05)
    tab.page.reload()
    tab.shot("forget-job")
    text = tab.page.inner_text("main")
    assert "forget" in text and "rebuild" in text and "succeeded" in text, text
    assert "X1234567" not in httpx.get(memory_url, headers={"authorization": f"Bearer {key}"}).text
    tab.go("/console/memory", "memory-after-forget")
    assert tab.page.locator("form[action='/console/forget/workspace'] button").count() == 1
    assert tab.alerts == [], tab.alerts

    admin = Visit(browser, good.base_url, "admin-forget")
    admin.sign_in(good.admin_token)
    admin.page.wait_for_url(good.base_url + "/console/tenants")
    admin.page.click(f"form[action='/console/tenants/{tenant_id}/forget'] button")
    admin.page.wait_for_url(good.base_url + "/console/tenants")
    admin.shot("tenant-forgotten")
    for _ in range(200):
        if tenant_id not in [t["tenant_id"] for t in api(good, good.admin_token, "GET", "/v1/admin/tenants")["tenants"]]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the tenant was never removed")
    assert httpx.get(good.base_url + "/v1/sessions", headers={"authorization": f"Bearer {key}"}).status_code == 401
    assert admin.alerts == [], admin.alerts
