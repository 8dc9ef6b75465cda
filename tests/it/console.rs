//! The console over HTTP: signing in, what each page shows, its forms and
//! their CSRF tokens, the security headers, and hostile conversation text.

use crate::every_backend;
use crate::harness::{ADMIN_TOKEN, Backend, Database, Tenant, TestApp};
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE, X_FRAME_OPTIONS};
use reqwest::{Client, Method, StatusCode};
use serde_json::json;
use sha2::Digest;
use std::time::{Duration, Instant};

every_backend!(
    signing_in_and_what_a_tenant_sees,
    forms_need_their_csrf_token_and_change_things,
    an_admin_picks_a_tenant_and_a_revoked_key_signs_out,
    what_the_pages_show_after_a_first_consolidation,
);

async fn what_the_pages_show_after_a_first_consolidation(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let mut browser = Browser::new(&app);
    assert_eq!(browser.sign_in(&t.key).await.0, StatusCode::SEE_OTHER);
    let body = json!({"rollout_id": "chat-1", "input": "I prefer green tea.", "final_output": "noted"});
    assert_eq!(app.post_segment(&t.key, "s1", "default", body).await.status(), 201);
    // The segment that just arrived counts in the overview's rate at once.
    let (_, _, overview) = browser.get("/console").await;
    assert!(!overview.contains("<div class=\"n\">0.0</div>"), "{overview}");
    let closed = app.json(Method::POST, "/v1/sessions/s1/close?wait=30", &t.key).await;
    assert_eq!(closed["state"], "closed");

    let run = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await["runs"][0].clone();
    assert_eq!((&run["added"], &run["retained"], &run["removed"]), (&json!(1), &json!(0), &json!(0)));
    let (_, _, page) = browser.get(&format!("/console/runs/default/default/{}", run["run_id"].as_str().unwrap())).await;
    let added = page.split("Added: ").nth(1).unwrap().split("</p>").next().unwrap();
    assert!(added.contains("chat-1"), "the added conversation is listed: {added}");
    assert!(page.contains("Retained: <span class=\"muted\">none</span>"), "{page}");
    assert!(!page.contains("{&quot;input_tokens"), "usage is words, not JSON: {page}");

    let (_, _, session) = browser.get("/console/sessions/s1").await;
    assert!(session.contains("class=\"state complete\""), "{session}");
    assert!(!session.contains("&quot;failures&quot;"), "memory_status is not raw JSON: {session}");
    let (_, _, raw) =
        browser.get("/console/memory/file?workspace=default&layout=default&path=raw_memories/chat-1.md").await;
    assert!(raw.contains("<th>rollout_id</th><td><code>chat-1</code></td>"), "{raw}");
    assert!(!raw.contains("<p>rollout_id: chat-1"), "{raw}");

    // The memory page links the workspace's export, which the console streams.
    let (_, _, memory) = browser.get("/console/memory").await;
    assert!(memory.contains("href=\"/console/export?workspace=default\""), "{memory}");
    let res = browser.request(Method::GET, "/console/export?workspace=default", None).send().await.unwrap();
    assert_eq!((res.status(), res.headers()[CONTENT_TYPE].to_str().unwrap()), (StatusCode::OK, "application/gzip"));
    assert!(res.bytes().await.unwrap().starts_with(&[0x1f, 0x8b]), "a gzip stream");

    // Usage: a chart per figure, drawn by the server, today's segment in it.
    let (status, _, usage) = browser.get("/console/usage").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(usage.matches("<svg").count(), 3, "{usage}");
    let today = chrono::Utc::now().format("%Y-%m-%d");
    assert!(usage.contains(&format!("<title>{today}: 1 segments</title>")), "{usage}");
    let scripts: Vec<&str> = usage.split("<script").skip(1).collect();
    assert!(
        scripts.iter().all(|s| s.starts_with(" src=\"/console/assets/console.js\"")),
        "no charting script: {usage}"
    );
}

/// Status and content type of a console answer, and that an HTML one carries the console's headers.
async fn error_page(
    browser: &mut Browser<'_>,
    method: Method,
    path: &str,
    form: Option<&[(&str, &str)]>,
) -> StatusCode {
    let res = browser.request(method.clone(), path, form).send().await.unwrap();
    let kind = res.headers().get(CONTENT_TYPE).map(|t| t.to_str().unwrap().to_owned()).unwrap_or_default();
    assert!(kind.starts_with("text/html"), "{method} {path}: {kind}");
    let csp = res.headers().get(CONTENT_SECURITY_POLICY).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    assert!(csp.contains("script-src 'self'"), "{method} {path}: no CSP");
    assert_eq!(res.headers().get(X_FRAME_OPTIONS).map(|v| v.to_str().unwrap()), Some("DENY"));
    let status = res.status();
    let body = res.text().await.unwrap();
    assert!(body.contains("Back to the console") || body.contains("Sign in"), "{path}: {body}");
    status
}

every_backend!(signing_out_ends_the_session_everywhere);

async fn signing_out_ends_the_session_everywhere(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let mut browser = Browser::new(&app);
    assert_eq!(browser.sign_in(&t.key).await.0, StatusCode::SEE_OTHER);
    let kept = browser.cookies.clone();
    let (_, _, overview) = browser.get("/console").await;
    let csrf = hidden(&overview, "csrf");
    let (status, location, _) = browser.post("/console/logout", &[("csrf", &csrf)]).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console/login"));
    // Someone who kept the cookie is signed out too.
    let mut thief = Browser::new(&app);
    thief.cookies = kept;
    let (status, location, _) = thief.get("/console").await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console/login"));
    // A new sign-in is a new session.
    assert_eq!(browser.sign_in(&t.key).await.0, StatusCode::SEE_OTHER);
    assert_eq!(browser.get("/console").await.0, StatusCode::OK);
}

#[tokio::test]
async fn sign_ins_are_throttled_per_address_and_cookies_are_secure_over_https() {
    let app = TestApp::start(Backend::Sqlite).await;
    let t = app.tenant().await;
    let http = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let attempt = async |credential: &str, forwarded: Option<(&str, &str)>| {
        let mut form = http.get(format!("{}/console/login", app.base));
        if let Some((addr, proto)) = forwarded {
            form = form.header("x-forwarded-for", addr).header("x-forwarded-proto", proto);
        }
        let res = form.send().await.unwrap();
        let set = res.headers()[SET_COOKIE].to_str().unwrap().to_owned();
        let token = set.split_once('=').unwrap().1.split(';').next().unwrap().to_owned();
        let mut post = http
            .post(format!("{}/console/login", app.base))
            .header(COOKIE, format!("memoryd_console_login={token}"))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("credential={}&csrf={token}", encode(credential)));
        if let Some((addr, proto)) = forwarded {
            post = post.header("x-forwarded-for", addr).header("x-forwarded-proto", proto);
        }
        let res = post.send().await.unwrap();
        let cookies: Vec<String> =
            res.headers().get_all(SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        (res.status(), res.headers().get("retry-after").is_some(), set, cookies)
    };
    // Over HTTPS (a proxy on this host says so), every cookie is Secure; over HTTP, none is.
    let (status, _, form_cookie, cookies) = attempt(&t.key, Some(("203.0.113.1", "https"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(form_cookie.contains("; Secure") && cookies.iter().all(|c| c.contains("; Secure")), "{cookies:?}");
    let (status, _, form_cookie, cookies) = attempt(&t.key, None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(!form_cookie.contains("Secure") && cookies.iter().all(|c| !c.contains("Secure")), "{cookies:?}");
    // Ten failures from one address, then it waits, even with the right key; another address does not.
    let guesser = Some(("198.51.100.7", "http"));
    for _ in 0..10 {
        assert_eq!(attempt("mk_guess", guesser).await.0, StatusCode::UNAUTHORIZED);
    }
    let (status, retry_after, _, _) = attempt(&t.key, guesser).await;
    assert_eq!((status, retry_after), (StatusCode::TOO_MANY_REQUESTS, true));
    assert_eq!(attempt(&t.key, Some(("198.51.100.8", "http"))).await.0, StatusCode::SEE_OTHER);
    // What a client writes left of what the proxy appended changes nothing.
    for i in 0..10 {
        let forwarded = format!("203.0.113.{i}, 198.51.100.20");
        assert_eq!(attempt("mk_guess", Some((&forwarded, "http"))).await.0, StatusCode::UNAUTHORIZED);
    }
    let (status, _, _, _) = attempt(&t.key, Some(("203.0.113.99, 198.51.100.20", "http"))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "the address the proxy saw is throttled");
    // Garbage and the proxy's own address: the proxy's address is the one counted.
    for i in 0..10 {
        let forwarded = format!("x{i}, 127.0.0.1");
        assert_eq!(attempt("mk_guess", Some((&forwarded, "http"))).await.0, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(attempt(&t.key, Some(("y, 127.0.0.1", "http"))).await.0, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn console_errors_are_pages_with_the_consoles_headers() {
    let app = TestApp::start(Backend::Sqlite).await;
    let t = app.tenant().await;
    let mut browser = Browser::new(&app);
    let (_, _, login) = browser.get("/console/login").await;
    let token = hidden(&login, "csrf");
    let failed = [("credential", "mk_not_a_key"), ("csrf", token.as_str())];
    assert_eq!(error_page(&mut browser, Method::POST, "/console/login", Some(&failed)).await, StatusCode::UNAUTHORIZED);
    assert_eq!(browser.sign_in(&t.key).await.0, StatusCode::SEE_OTHER);
    let stale = [("csrf", "stale")];
    let status = error_page(&mut browser, Method::POST, "/console/sessions/s/close", Some(&stale)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_page(&mut browser, Method::GET, "/console/sessions/nobody", None).await, StatusCode::NOT_FOUND);
    assert_eq!(error_page(&mut browser, Method::GET, "/console/no-such-page", None).await, StatusCode::NOT_FOUND);
    assert_eq!(error_page(&mut browser, Method::DELETE, "/console/jobs", None).await, StatusCode::METHOD_NOT_ALLOWED);
    // Retrying a job that did not fail: the console's 409, not a problem document.
    assert_eq!(app.post_segment(&t.key, "s", "default", json!({"input": "hi"})).await.status(), 201);
    let closed = app.json(Method::POST, "/v1/sessions/s/close?wait=30", &t.key).await;
    let job = closed["jobs"][0]["job_id"].as_str().unwrap().to_owned();
    let (_, _, page) = browser.get(&format!("/console/jobs/{job}")).await;
    let csrf = hidden(&page, "csrf");
    let form = [("csrf", csrf.as_str())];
    let status = error_page(&mut browser, Method::POST, &format!("/console/jobs/{job}/retry"), Some(&form)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    // The API's own errors stay problem documents.
    let res = app.request(Method::GET, "/v1/no-such-route", &t.key).send().await.unwrap();
    assert_eq!(res.headers()[CONTENT_TYPE], "application/problem+json");
}

fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A browser without JavaScript: it keeps the console's cookies and does
/// not follow redirects, so each answer can be looked at.
pub(crate) struct Browser<'a> {
    app: &'a TestApp,
    http: Client,
    cookies: Vec<(String, String)>,
}

impl<'a> Browser<'a> {
    pub(crate) fn new(app: &'a TestApp) -> Self {
        let http = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Self { app, http, cookies: Vec::new() }
    }

    fn keep_cookies(&mut self, res: &reqwest::Response) {
        for set in res.headers().get_all(SET_COOKIE) {
            let set = set.to_str().unwrap();
            assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
            let (pair, _) = set.split_once(';').unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(n, _)| n != name);
            if !value.is_empty() {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        form: Option<&[(&str, &str)]>,
    ) -> (StatusCode, String, String) {
        let res = self.request(method, path, form).send().await.unwrap();
        self.keep_cookies(&res);
        let status = res.status();
        // Every page, error pages included, carries the console's headers.
        if res.headers().get(CONTENT_TYPE).is_some_and(|t| t.to_str().unwrap().starts_with("text/html")) {
            let csp = res.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
            assert_eq!(res.headers()[X_FRAME_OPTIONS], "DENY");
        }
        let location = res.headers().get(LOCATION).map(|l| l.to_str().unwrap().to_owned()).unwrap_or_default();
        (status, location, res.text().await.unwrap())
    }

    /// A request carrying this browser's cookies (and a form, if any).
    fn request(&self, method: Method, path: &str, form: Option<&[(&str, &str)]>) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.app.base));
        let jar: Vec<String> = self.cookies.iter().map(|(n, v)| format!("{n}={v}")).collect();
        if !jar.is_empty() {
            req = req.header(COOKIE, jar.join("; "));
        }
        if let Some(form) = form {
            let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
            req = req.header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(body.join("&"));
        }
        req
    }

    pub(crate) async fn get(&mut self, path: &str) -> (StatusCode, String, String) {
        self.send(Method::GET, path, None).await
    }

    pub(crate) async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> (StatusCode, String, String) {
        self.send(Method::POST, path, Some(form)).await
    }

    pub(crate) async fn sign_in(&mut self, credential: &str) -> (StatusCode, String, String) {
        let (status, _, page) = self.get("/console/login").await;
        assert_eq!(status, 200);
        let token = hidden(&page, "csrf");
        self.post("/console/login", &[("credential", credential), ("csrf", &token)]).await
    }
}

/// The value of the first hidden input `name` on a page.
pub(crate) fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page.find(&marker).unwrap_or_else(|| panic!("no {name} in {page}")) + marker.len();
    page[start..].split('"').next().unwrap().to_owned()
}

async fn hostile_session(app: &TestApp, t: &Tenant, session: &str) {
    let body = json!({
        "rollout_id": "evil",
        "input": "<script>alert('input')</script> I prefer tea",
        "generated_items": [
            {"role": "assistant", "content": "<img src=x onerror=alert('out')> [click](javascript:alert('link'))"},
            {"type": "function_call", "name": "lookup", "arguments": "{\"q\":\"<b>x</b>\"}", "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "<iframe src=javascript:alert(1)>"}
        ],
        "final_output": "<script>alert('final')</script>"
    });
    assert_eq!(app.post_segment(&t.key, session, "default", body).await.status(), 201);
}

async fn signing_in_and_what_a_tenant_sees(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let mut browser = Browser::new(&app);
    assert_eq!(browser.get("/console").await.1, "/console/login", "signed out: the sign-in page");
    assert_eq!(browser.sign_in("mk_not_a_key").await.0, StatusCode::UNAUTHORIZED);
    // A sign-in form posted from elsewhere carries no matching cookie.
    let mut stranger = Browser::new(&app);
    let forged = stranger.post("/console/login", &[("credential", &t.key), ("csrf", "guess")]).await;
    assert_eq!(forged.0, StatusCode::UNAUTHORIZED);
    let (status, location, _) = browser.sign_in(&t.key).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console"));

    hostile_session(&app, &t, "s-evil").await;
    let closed = app.json(Method::POST, "/v1/sessions/s-evil/close?wait=30", &t.key).await;
    assert_eq!(closed["state"], "closed");
    let (status, _, overview) = browser.get("/console").await;
    assert_eq!(status, 200);
    assert!(overview.contains("href=\"/console/sessions/s-evil\""), "{overview}");
    for path in ["/console/sessions", "/console/jobs", "/console/memory", "/console/runs", "/console/layouts"] {
        let (status, _, page) = browser.get(path).await;
        assert_eq!(status, 200, "{path}: {page}");
        assert!(!page.contains("<script>alert"), "{path} runs hostile script");
    }
    let (_, _, session) = browser.get("/console/sessions/s-evil").await;
    for hostile in ["<script>alert", "<img src=x", "<iframe", "href=\"javascript", "<b>x</b>"] {
        assert!(!session.contains(hostile), "{hostile} on the session page");
    }
    assert!(session.contains("&lt;script&gt;alert('input')&lt;/script&gt; I prefer tea"), "{session}");
    assert!(session.contains("lookup") && session.contains("final output"), "{session}");
    let (_, _, memory) = browser.get("/console/memory").await;
    assert!(memory.contains("memory_summary.md") && memory.contains("I prefer tea"), "{memory}");
    assert!(!memory.contains("<script>alert") && !memory.contains("href=\"javascript"), "{memory}");
    let run = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await["runs"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _, run_page) = browser.get(&format!("/console/runs/default/default/{run}")).await;
    assert_eq!(status, 200);
    assert!(run_page.contains("class=\"diff\"") && run_page.contains("class=\"add\""), "{run_page}");
    assert!(run_page.contains("Restore this memory"));

    // Another tenant's session is not there for this one.
    let other = app.tenant().await;
    hostile_session(&app, &other, "theirs").await;
    assert_eq!(browser.get("/console/sessions/theirs").await.0, StatusCode::NOT_FOUND);
    let (status, _, asset) = browser.get("/console/assets/console.js").await;
    assert!(status == 200 && asset.contains("toLocaleString"));
}

/// Adds 1,200 copies of each failed job, straight into memoryd's database.
async fn copy_failed_jobs(db: &mut Database) {
    const POSTGRES: &str = "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id,
            layout_config, state, attempts, run_after, created_at, finished_at, spec)
        SELECT gen_random_uuid(), tenant_id, kind, session_id, workspace, layout, rollout_id,
            layout_config, state, attempts, run_after, created_at, finished_at, spec
        FROM jobs CROSS JOIN generate_series(1, 1200) WHERE state = 'failed'";
    const SQLITE: &str = "INSERT INTO jobs (id, tenant_id, kind, session_id, workspace, layout, rollout_id,
            layout_config, state, attempts, run_after, created_at, finished_at, spec)
        WITH RECURSIVE copies(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM copies WHERE n < 1200)
        SELECT randomblob(16), tenant_id, kind, session_id, workspace, layout, rollout_id,
            layout_config, state, attempts, run_after, created_at, finished_at, spec
        FROM jobs CROSS JOIN copies WHERE state = 'failed'";
    let sql = if matches!(db, Database::Postgres(_)) { POSTGRES } else { SQLITE };
    db.run(sql).await;
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < Duration::from_secs(30), "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn forms_need_their_csrf_token_and_change_things(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&t.key).await;
    assert_eq!(
        app.post_segment(&t.key, "s1", "default", json!({"rollout_id": "r1", "input": "I like tea"})).await.status(),
        201
    );
    let (_, _, page) = browser.get("/console/sessions/s1").await;
    let token = hidden(&page, "csrf");
    assert_eq!(browser.post("/console/sessions/s1/close", &[("csrf", "forged")]).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(
        app.json(Method::GET, "/v1/sessions/s1", &t.key).await["state"],
        "open",
        "a forged form changes nothing"
    );
    let (status, location, _) = browser.post("/console/sessions/s1/close", &[("csrf", &token)]).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console/sessions/s1"));
    assert_eq!(app.json(Method::GET, "/v1/sessions/s1", &t.key).await["state"], "closed", "closed with its wait");

    // Restore from the run's page, then retry a failed job from the jobs page.
    let run = app.json(Method::GET, "/v1/workspaces/default/layouts/default/runs", &t.key).await["runs"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let restore = format!("/console/runs/default/default/{run}/restore");
    let (status, location, _) = browser.post(&restore, &[("csrf", &token)]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let job_id = location.strip_prefix("/console/jobs/").unwrap().to_owned();
    wait_for("the restore", async || {
        app.json(Method::GET, &format!("/v1/jobs/{job_id}"), &t.key).await["state"] == "succeeded"
    })
    .await;
    let (_, _, job_page) = browser.get(&location).await;
    assert!(job_page.contains("restore") && job_page.contains(&run[..8]), "{job_page}");

    let failing = TestApp::start_with(backend, |c| {
        c.model.provider = Some(memoryd::config::ProviderKind::Openai);
        c.model.api_key = Some("k".into());
        c.jobs.max_attempts = 1;
    })
    .await;
    let ft = failing.tenant().await;
    let mut operator = Browser::new(&failing);
    operator.sign_in(&ft.key).await;
    assert_eq!(
        failing.post_segment(&ft.key, "s", "default", json!({"rollout_id": "r", "input": "x"})).await.status(),
        201
    );
    failing.json(Method::POST, "/v1/sessions/s/close", &ft.key).await;
    let jobs = failing.settled_jobs(&ft.key, "kind=phase_one").await;
    let failed = jobs[0]["job_id"].as_str().unwrap().to_owned();
    assert_eq!(jobs[0]["state"], "failed");
    let (_, _, jobs_page) = operator.get("/console/jobs").await;
    assert!(
        jobs_page.contains("<h2>Failed</h2>") && jobs_page.contains(&format!("/console/jobs/{failed}/retry")),
        "{jobs_page}"
    );
    let token = hidden(&jobs_page, "csrf");
    let first_failure = jobs[0]["finished_at"].as_str().unwrap().to_owned();
    let (status, location, _) = operator.post(&format!("/console/jobs/{failed}/retry"), &[("csrf", &token)]).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/console/jobs/{failed}")));
    // Queued again, it ran once more (and failed again: the model is still away).
    wait_for("the retried attempt", async || {
        let job = failing.json(Method::GET, &format!("/v1/jobs/{failed}"), &ft.key).await;
        job["state"] == "failed" && job["finished_at"].as_str().is_some_and(|at| at > first_failure.as_str())
    })
    .await;

    // The overview counts every job, not the newest page of them.
    copy_failed_jobs(&mut Database::connect(backend, &failing.database_url).await).await;
    let (_, _, overview) = operator.get("/console").await;
    assert!(
        overview.contains(r#"<div class="n">1201</div><a href="/console/jobs?state=failed">jobs failed in 24 h</a>"#),
        "{overview}"
    );
    assert!(overview.contains(r#"state=failed">1201</a>"#), "the queue table counts them too: {overview}");

    // Signing out ends the session.
    let (_, _, page) = browser.get("/console").await;
    let token = hidden(&page, "csrf");
    assert_eq!(browser.post("/console/logout", &[("csrf", &token)]).await.1, "/console/login");
    assert_eq!(browser.get("/console").await.1, "/console/login");
}

async fn an_admin_picks_a_tenant_and_a_revoked_key_signs_out(backend: Backend) {
    let app = TestApp::start(backend).await;
    let t = app.tenant().await;
    assert_eq!(app.post_segment(&t.key, "s-admin", "default", json!({"rollout_id": "r"})).await.status(), 201);
    let mut admin = Browser::new(&app);
    let (status, location, _) = admin.sign_in(ADMIN_TOKEN).await;
    // No cookie carries an unkeyed hash of the admin token (which could be
    // guessed offline) or of a tenant's key (what the key table is looked up by).
    let payload = |browser: &Browser| {
        let cookie = browser.cookies.iter().find(|(n, _)| n == "memoryd_console").unwrap().1.clone();
        let payload_hex = cookie.split_once('.').unwrap().0.to_owned();
        let bytes: Vec<u8> = (0..payload_hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&payload_hex[i..i + 2], 16).unwrap())
            .collect();
        String::from_utf8(bytes).unwrap()
    };
    let unkeyed = |secret: &str| -> String {
        sha2::Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    };
    let admin_payload = payload(&admin);
    assert!(admin_payload.starts_with("v3|a|") && !admin_payload.contains(&unkeyed(ADMIN_TOKEN)), "{admin_payload}");
    let mut tenant = Browser::new(&app);
    tenant.sign_in(&t.key).await;
    let tenant_payload = payload(&tenant);
    assert!(tenant_payload.starts_with("v3|t|") && !tenant_payload.contains(&unkeyed(&t.key)), "{tenant_payload}");
    assert_eq!(tenant.get("/console").await.0, StatusCode::OK, "the masked digest still opens the console");
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console/tenants"));
    assert_eq!(admin.get("/console").await.1, "/console/tenants", "no tenant picked yet");
    let (_, _, tenants) = admin.get("/console/tenants").await;
    assert!(tenants.contains(&t.id), "{tenants}");
    let token = hidden(&tenants, "csrf");
    let (status, location, _) = admin.post("/console/tenant", &[("csrf", &token), ("tenant_id", &t.id)]).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/console"));
    let (status, _, sessions) = admin.get("/console/sessions").await;
    assert_eq!(status, 200);
    assert!(sessions.contains("s-admin"), "{sessions}");

    // A tenant's console session lasts only as long as its key.
    let res = app.request(Method::POST, &format!("/v1/admin/tenants/{}/keys", t.id), ADMIN_TOKEN).send().await.unwrap();
    let issued: serde_json::Value = res.json().await.unwrap();
    let mut user = Browser::new(&app);
    user.sign_in(issued["api_key"].as_str().unwrap()).await;
    assert_eq!(user.get("/console/sessions").await.0, StatusCode::OK);
    let key_id = issued["key_id"].as_str().unwrap();
    let res = app.request(Method::DELETE, &format!("/v1/admin/keys/{key_id}"), ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(res.status(), 204);
    assert_eq!(user.get("/console/sessions").await.1, "/console/login");
    // A tenant cannot open the admin's page.
    let mut tenant_user = Browser::new(&app);
    tenant_user.sign_in(&t.key).await;
    assert_eq!(tenant_user.get("/console/tenants").await.0, StatusCode::NOT_FOUND);
}

/// A tenant's console pages are its requests too: under its request rate.
#[tokio::test]
async fn console_pages_count_against_the_tenants_request_rate() {
    let app = TestApp::start(Backend::Sqlite).await;
    let t = app.tenant().await;
    let res = app
        .request(reqwest::Method::PUT, &format!("/v1/admin/tenants/{}/limits", t.id), ADMIN_TOKEN)
        .json(&json!({"requests_per_second": 0.2, "burst": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut browser = Browser::new(&app);
    browser.sign_in(&t.key).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(browser.get("/console/sessions").await.0);
    }
    assert_eq!(&statuses[..2], [StatusCode::OK, StatusCode::OK], "{statuses:?}");
    assert!(statuses[2..].iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS), "{statuses:?}");
}
