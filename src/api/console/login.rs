//! Signing in and out, and the admin's choice of tenant.

use super::*;
use crate::domain::key_scope::Workspaces;

pub(super) async fn login_form(State(state): State<AppState>, client: Client) -> Response {
    // Double-submit token: a login form posted from elsewhere lacks the cookie.
    let token = random_hex(16);
    let mut response = html_page(
        StatusCode::OK,
        "Sign in",
        None,
        html! {
            form class="login" method="post" action="/console/login" {
                label for="credential" { "A tenant's API key, or the admin token" }
                input id="credential" type="password" name="credential" autocomplete="off" required;
                input type="hidden" name="csrf" value=(token);
                button type="submit" { "Sign in" }
            }
        },
    );
    if let Ok(value) = HeaderValue::from_str(&state.console.cookie(LOGIN_COOKIE, &token, 600, client.https)) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
pub struct LoginForm {
    credential: String,
    csrf: String,
}

pub(super) fn refused_login(message: &str) -> Response {
    html_page(
        StatusCode::UNAUTHORIZED,
        "Sign in",
        None,
        html! { p class="error" { (message) } p { a href="/console/login" { "Try again" } } },
    )
}

/// Too many failed sign-ins from this address: it waits (429).
pub(super) fn throttled_login(wait: Duration) -> Response {
    let secs = wait.as_secs().max(1);
    let mut response = html_page(
        StatusCode::TOO_MANY_REQUESTS,
        "Sign in",
        None,
        html! { p class="error" { "Too many failed sign-ins from this address; try again in " (secs) " s." } },
    );
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

pub(super) async fn login(
    State(state): State<AppState>,
    client: Client,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let now = std::time::Instant::now();
    if let Some(wait) = client.addr.and_then(|addr| state.caches.sign_ins.wait(addr, now)) {
        return throttled_login(wait);
    }
    let failed = |message: &str| {
        if let Some(addr) = client.addr {
            state.caches.sign_ins.failed(addr, now);
        }
        refused_login(message)
    };
    let cookies = headers.get(header::COOKIE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if cookie_value(cookies, LOGIN_COOKIE) != Some(form.csrf.as_str()) || form.csrf.is_empty() {
        return failed("The sign-in form expired; load it again.");
    }
    let credential = form.credential.trim();
    let hash = credential_hash(credential);
    let is_admin = is_admin_token(&state, credential);
    let principal = if is_admin {
        Principal::Admin(None)
    } else {
        match key_of_hash(&state, &hash).await {
            Ok(Some(key)) if !key.scope.expired(chrono::Utc::now()) => Principal::Tenant(key.tenant_id),
            Ok(_) => return failed("That key opens nothing here."),
            Err(e) => return ConsoleError(e).into_response(),
        }
    };
    if let Some(addr) = client.addr {
        state.caches.sign_ins.succeeded(addr);
    }
    let next = if is_admin { "/console/tenants" } else { "/console" };
    let hash = if is_admin { state.console.admin_credential(credential) } else { hash };
    let session = ConsoleSession {
        principal,
        credential_hash: hash,
        expires_at: now_secs() + SESSION_SECS,
        session_id: random_hex(16),
    };
    let sealed = state.console.seal(&session);
    let mut response = page::redirect(next);
    for cookie in [
        state.console.cookie(SESSION_COOKIE, &sealed, SESSION_SECS, client.https),
        state.console.cookie(LOGIN_COOKIE, "", 0, client.https),
    ] {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    tracing::info!(admin = is_admin, "console sign-in");
    response
}

pub(super) async fn logout(
    State(state): State<AppState>,
    signed: Signed,
    client: Client,
    Form(form): Form<CsrfForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    // Ended here for every replica: the cookie, even kept by someone, opens nothing.
    let expires_at = chrono::DateTime::from_timestamp(signed.session.expires_at, 0).unwrap_or_else(chrono::Utc::now);
    state.store.end_console_session(&signed.session.session_id, expires_at).await?;
    let mut response = page::redirect("/console/login");
    if let Ok(value) = HeaderValue::from_str(&state.console.cookie(SESSION_COOKIE, "", 0, client.https)) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

#[derive(Deserialize)]
pub struct TenantsQuery {
    cursor: Option<String>,
}

pub(super) async fn tenants(State(state): State<AppState>, signed: Signed, Query(q): Query<TenantsQuery>) -> Page {
    signed.require_admin()?;
    let page_request =
        PageRequest::parse(Listing::Tenants, Some(50), empty_to_none(&q.cursor)).map_err(ApiError::InvalidRequest)?;
    let rows = state.store.list_tenants(&page_request).await?;
    let (tenants, next) =
        page_request.finish(Listing::Tenants, rows, |t| PageCursor { at: t.created_at, key: t.tenant_id.to_string() });
    signed.page(
        "Tenants",
        html! {
            table {
                tr { th { "Tenant" } th { "Name" } th { "Created" } th { "Keys" } th { "Sessions" } th { "State" } th {} }
                @for t in &tenants {
                    tr {
                        td { code { (t.tenant_id) } } td { (t.name) } td { (when(&t.created_at)) }
                        td { a href={"/console/tenants/" (t.tenant_id) "/keys"} { (t.keys) } } td { (t.sessions) } td { (state_badge(t.state)) }
                        td {
                            form class="inline" method="post" action="/console/tenant" {
                                input type="hidden" name="csrf" value=(signed.csrf);
                                input type="hidden" name="tenant_id" value=(t.tenant_id);
                                button type="submit" { "Open" }
                            }
                            @if t.state != crate::store::TENANT_DELETING {
                                " "
                                (post_button(&format!("/console/tenants/{}/forget", t.tenant_id), &signed.csrf, "Forget", Some("Forget this tenant? Its keys stop working now; all its memory, conversations and records are removed.")))
                            }
                        }
                    }
                }
            }
            @if let Some(next) = next {
                p { a href={"/console/tenants" (query(&[("cursor", Some(&next))]))} { "Newer tenants →" } }
            }
        },
    )
}

#[derive(Deserialize)]
pub struct PickForm {
    csrf: String,
    tenant_id: Uuid,
}

pub(super) async fn pick_tenant(
    State(state): State<AppState>,
    signed: Signed,
    client: Client,
    Form(form): Form<PickForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    signed.require_admin()?;
    if !state.store.tenant_exists(form.tenant_id).await? {
        return Err(ConsoleError(ApiError::NotFound(format!("No tenant {}.", form.tenant_id))));
    }
    let session = ConsoleSession { principal: Principal::Admin(Some(form.tenant_id)), ..signed.session };
    let mut response = page::redirect("/console");
    let cookie = state.console.cookie(SESSION_COOKIE, &state.console.seal(&session), SESSION_SECS, client.https);
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// A tenant's live keys with what each reaches (the admin's page).
pub(super) async fn tenant_keys(State(state): State<AppState>, signed: Signed, Path(raw_id): Path<String>) -> Page {
    signed.require_admin()?;
    let not_found = || ConsoleError(ApiError::NotFound(format!("No tenant {raw_id}.")));
    let id = Uuid::parse_str(&raw_id).map_err(|_| not_found())?;
    if !state.store.tenant_exists(id).await? {
        return Err(not_found());
    }
    // The newest keys, a listing's longest page: the rest are paged by GET /v1/admin/tenants/{id}/keys.
    let newest = crate::domain::page::PageRequest { limit: crate::domain::page::MAX_LIMIT, after: None };
    let mut keys = state.store.list_api_keys(id, &newest).await?;
    keys.truncate(newest.limit as usize);
    signed.page(
        &format!("Keys of tenant {id}"),
        html! {
            table {
                tr { th { "Key" } th { "Name" } th { "Workspaces" } th { "Permissions" } th { "Expires" } th { "Created" } }
                @for k in &keys {
                    tr {
                        td { code { (k.key_id) } }
                        td { (k.name.as_deref().unwrap_or("")) }
                        td { @match &k.scope.workspaces {
                            Workspaces::All => { "every workspace" }
                            Workspaces::Only(names) => { @for n in names { code { (n) } " " } }
                        } }
                        td { (k.scope.permissions.names().join(", ")) }
                        td { (maybe_when(k.scope.expires_at.as_ref())) }
                        td { (when(&k.created_at)) }
                    }
                }
            }
        },
    )
}
