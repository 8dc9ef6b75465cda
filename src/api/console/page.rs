//! The console's page frame, its security headers, and small pieces
//! every page uses.

use super::auth::Principal;
use crate::domain::key_scope::{KeyScope, Permission};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

/// Scripts and styles only from the console itself, no inline script, no
/// framing: conversation text and memory files are hostile.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// A redirect to `to`, hardened like every console response.
pub fn redirect(to: &str) -> Response {
    harden(axum::response::Redirect::to(to).into_response())
}

/// The security headers of every console response.
pub fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Who the frame shows as signed in, and the CSRF token its forms carry.
pub struct Frame<'a> {
    pub principal: &'a Principal,
    pub csrf: &'a str,
    /// The nav links only the pages the key may open.
    pub scope: &'a KeyScope,
}

pub fn html_page(status: StatusCode, title: &str, frame: Option<&Frame<'_>>, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · memoryd" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                header {
                    a class="brand" href="/console" { "memoryd" }
                    @if let Some(frame) = frame {
                        @let reads = frame.scope.permissions.has(Permission::Read);
                        @let manages_all = frame.scope.permissions.has(Permission::Manage) && frame.scope.workspaces.is_all();
                        nav {
                            a href="/console" { "Overview" }
                            @if reads {
                                a href="/console/sessions" { "Sessions" }
                                a href="/console/jobs" { "Jobs" }
                                a href="/console/memory" { "Memory" }
                                a href="/console/runs" { "Runs" }
                                a href="/console/layouts" { "Layouts" }
                            }
                            @if manages_all {
                                a href="/console/usage" { "Usage" }
                                a href="/console/webhooks" { "Webhooks" }
                            }
                            @if frame.principal.is_admin() { a href="/console/tenants" { "Tenants" } }
                        }
                        div class="who" {
                            @match frame.principal {
                                Principal::Tenant(t) => { span { "tenant " code { (t) } } }
                                Principal::Admin(Some(t)) => { span { "admin · tenant " a href="/console/tenants" { code { (t) } } } }
                                Principal::Admin(None) => { span { "admin" } }
                            }
                            form class="inline" method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(frame.csrf);
                                button class="secondary" type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { h1 { (title) } (body) }
                script src="/console/assets/console.js" {}
            }
        }
    };
    harden((status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], markup.into_string()).into_response())
}

/// A time the browser shows in its own zone (UTC without JavaScript).
pub fn when(at: &DateTime<Utc>) -> Markup {
    let iso = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    html! { time datetime=(iso) { (iso) } }
}

pub fn maybe_when(at: Option<&DateTime<Utc>>) -> Markup {
    match at {
        Some(at) => when(at),
        None => html! { span class="muted" { "—" } },
    }
}

pub fn state(state: &str) -> Markup {
    html! { span class={"state " (state)} { (state) } }
}

/// A form that posts to `action` with the CSRF token: one button.
pub fn post_button(action: &str, csrf: &str, label: &str, confirm: Option<&str>) -> Markup {
    html! {
        form class="inline" method="post" action=(action) data-confirm=[confirm] {
            input type="hidden" name="csrf" value=(csrf);
            button type="submit" { (label) }
        }
    }
}

/// `?key=value&…` with the values percent-encoded; `None`s left out.
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let encoded: Vec<String> =
        pairs.iter().filter_map(|(k, v)| v.map(|v| format!("{k}={}", percent_encode(v)))).collect();
    if encoded.is_empty() { String::new() } else { format!("?{}", encoded.join("&")) }
}

/// Every byte but RFC 3986's unreserved characters is escaped.
const NOT_UNRESERVED: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

pub fn percent_encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, NOT_UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_encoded_and_skip_what_is_unset() {
        assert_eq!(query(&[("a", Some("x y&z")), ("b", None), ("c", Some("ü"))]), "?a=x%20y%26z&c=%C3%BC");
        assert_eq!(query(&[("a", None)]), "");
    }

    #[test]
    fn every_page_carries_the_security_headers() {
        let response = html_page(StatusCode::OK, "<x>", None, html! { p { "hi" } });
        let headers = response.headers();
        assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
    }
}
