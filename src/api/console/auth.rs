//! Signing in to the console: a session cookie signed with HMAC-SHA256,
//! CSRF tokens bound to it, and the check on every request that the key
//! (or admin token) it was made from is still good.

use crate::domain::ids::{constant_time_eq as same, random_hex, sha256_hex};
use hmac::{KeyInit, Mac};
use uuid::Uuid;

/// How long a console sign-in lasts.
pub const SESSION_SECS: i64 = 12 * 3600;
pub const SESSION_COOKIE: &str = "memoryd_console";
pub const LOGIN_COOKIE: &str = "memoryd_console_login";

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// Who is signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// With a tenant's API key: that tenant only.
    Tenant(Uuid),
    /// With the admin token: any tenant, once picked.
    Admin(Option<Uuid>),
}

impl Principal {
    /// The tenant whose data the pages show.
    pub fn tenant(&self) -> Option<Uuid> {
        match self {
            Self::Tenant(t) => Some(*t),
            Self::Admin(t) => *t,
        }
    }

    pub fn is_admin(&self) -> bool {
        matches!(self, Self::Admin(_))
    }
}

/// A signed-in console session, as its cookie carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    pub principal: Principal,
    /// SHA-256 of the key or token signed in with: the session ends when it
    /// no longer opens the console (revoked, rotated).
    pub credential_hash: String,
    pub expires_at: i64,
    /// Random; signing out records it as ended, on every replica.
    pub session_id: String,
}

/// The console's signing key (`MEMORYD_CONSOLE_SECRET`, or random per start).
pub struct ConsoleKeys {
    secret: Vec<u8>,
    pub secure_cookies: bool,
}

impl ConsoleKeys {
    pub fn new(secret: Option<&str>, secure_cookies: bool) -> Self {
        let secret = secret.map_or_else(|| random_hex(32).into_bytes(), |s| s.as_bytes().to_vec());
        Self { secret, secure_cookies }
    }

    fn sign(&self, what: &str, payload: &str) -> String {
        hex::encode(hmac_sha256(&self.secret, format!("{what}|{payload}").as_bytes()))
    }

    /// A session's credential digest as its cookie carries it: XORed with a
    /// keystream of the console's key and the session's random id, so a
    /// stolen cookie shows no digest of the key (an unkeyed SHA-256 of a key
    /// is what the key table is looked up by). Its own inverse.
    fn mask_credential(&self, digest_hex: &str, session_id: &str) -> Option<String> {
        let digest = hex::decode(digest_hex).ok().filter(|d| d.len() == 32)?;
        let stream = hmac_sha256(&self.secret, format!("credential|{session_id}").as_bytes());
        Some(hex::encode(digest.iter().zip(stream).map(|(a, b)| a ^ b).collect::<Vec<u8>>()))
    }

    /// The cookie value: the payload in hex, a dot, its signature.
    pub fn seal(&self, session: &ConsoleSession) -> String {
        let (kind, tenant) = match &session.principal {
            Principal::Tenant(t) => ("t", t.to_string()),
            Principal::Admin(t) => ("a", t.map_or_else(|| "-".into(), |t| t.to_string())),
        };
        let credential = self.mask_credential(&session.credential_hash, &session.session_id).unwrap_or_default();
        let payload = format!("v3|{kind}|{tenant}|{}|{credential}|{}", session.expires_at, session.session_id);
        format!("{}.{}", hex::encode(payload.as_bytes()), self.sign("session", &payload))
    }

    /// The session a cookie value names, if its signature holds and it has
    /// not expired at `now` (seconds since the epoch).
    pub fn open(&self, cookie: &str, now: i64) -> Option<ConsoleSession> {
        let (payload_hex, signature) = cookie.split_once('.')?;
        let payload = String::from_utf8(hex::decode(payload_hex).ok()?).ok()?;
        if !same(self.sign("session", &payload).as_bytes(), signature.as_bytes()) {
            return None;
        }
        let mut parts = payload.split('|');
        if parts.next()? != "v3" {
            return None;
        }
        let (kind, tenant) = (parts.next()?, parts.next()?);
        let expires_at: i64 = parts.next()?.parse().ok()?;
        let masked = parts.next()?;
        let session_id = parts.next().filter(|id| !id.is_empty())?.to_owned();
        let credential_hash = self.mask_credential(masked, &session_id)?;
        let principal = match (kind, tenant) {
            ("t", t) => Principal::Tenant(Uuid::parse_str(t).ok()?),
            ("a", "-") => Principal::Admin(None),
            ("a", t) => Principal::Admin(Some(Uuid::parse_str(t).ok()?)),
            _ => return None,
        };
        (expires_at > now).then_some(ConsoleSession { principal, credential_hash, expires_at, session_id })
    }

    /// What an admin session's cookie holds of the admin token: a MAC under
    /// the console's key, so that a stolen cookie does not let the token be
    /// guessed offline (an unkeyed hash of a chosen token would).
    pub fn admin_credential(&self, token: &str) -> String {
        self.sign("admin", token)
    }

    /// The CSRF token of a session: every form of its pages carries it.
    pub fn csrf_token(&self, cookie: &str) -> String {
        self.sign("csrf", cookie)
    }

    pub fn csrf_ok(&self, cookie: &str, token: &str) -> bool {
        same(self.csrf_token(cookie).as_bytes(), token.as_bytes())
    }

    /// `Set-Cookie` for a value (an empty value with max-age 0 clears it);
    /// `Secure` when configured, or when the request came over HTTPS.
    pub fn cookie(&self, name: &str, value: &str, max_age: i64, https: bool) -> String {
        let secure = if self.secure_cookies || https { "; Secure" } else { "" };
        format!("{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
    }
}

/// SHA-256 of a credential, as sessions record it.
pub fn credential_hash(credential: &str) -> String {
    sha256_hex(credential.as_bytes())
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie_value<'h>(header: &'h str, name: &str) -> Option<&'h str> {
    header.split(';').filter_map(|c| c.trim().split_once('=')).find(|(n, _)| *n == name).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex::encode(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        let long_key = [0xaau8; 131];
        let mac = hmac_sha256(&long_key, b"Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(hex::encode(mac), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    }

    fn session(principal: Principal) -> ConsoleSession {
        ConsoleSession {
            principal,
            credential_hash: credential_hash("mk_x"),
            expires_at: 1_000,
            session_id: "0123abcd".into(),
        }
    }

    #[test]
    fn a_sealed_session_opens_until_it_expires() {
        let keys = ConsoleKeys::new(Some("secret"), false);
        for principal in
            [Principal::Tenant(Uuid::new_v4()), Principal::Admin(None), Principal::Admin(Some(Uuid::new_v4()))]
        {
            let s = session(principal);
            let cookie = keys.seal(&s);
            let payload = String::from_utf8(hex::decode(cookie.split_once('.').unwrap().0).unwrap()).unwrap();
            assert!(!payload.contains(&s.credential_hash), "no unkeyed digest of the key: {payload}");
            assert_eq!(keys.open(&cookie, 999), Some(s));
            assert_eq!(keys.open(&cookie, 1_000), None, "expired");
        }
    }

    #[test]
    fn a_tampered_or_foreign_cookie_opens_nothing() {
        let keys = ConsoleKeys::new(Some("secret"), false);
        let cookie = keys.seal(&session(Principal::Tenant(Uuid::new_v4())));
        let (payload, signature) = cookie.split_once('.').unwrap();
        let forged_payload = hex::encode(format!("v2|a|-|99999999999|{}|s", credential_hash("x")).as_bytes());
        let unsigned_v1 = format!("v1|a|-|99999999999|{}", credential_hash("x"));
        let old_format = format!("{}.{}", hex::encode(unsigned_v1.as_bytes()), keys.sign("session", &unsigned_v1));
        let v2 = format!("v2|t|{}|99999999999|{}|s", Uuid::new_v4(), credential_hash("x"));
        let signed_v2 = format!("{}.{}", hex::encode(v2.as_bytes()), keys.sign("session", &v2));
        for bad in [
            format!("{forged_payload}.{signature}"),
            format!("{payload}.{}", "0".repeat(64)),
            format!("{payload}."),
            payload.to_owned(),
            old_format,
            signed_v2,
            "".into(),
            "zz.zz".into(),
        ] {
            assert_eq!(keys.open(&bad, 0), None, "{bad}");
        }
        assert_eq!(ConsoleKeys::new(Some("other"), false).open(&cookie, 0), None, "another secret");
        assert_eq!(ConsoleKeys::new(None, false).open(&cookie, 0), None, "a random secret");
    }

    #[test]
    fn csrf_tokens_are_bound_to_their_session() {
        let keys = ConsoleKeys::new(Some("secret"), false);
        let token = keys.csrf_token("cookie-a");
        assert!(keys.csrf_ok("cookie-a", &token));
        assert!(!keys.csrf_ok("cookie-b", &token));
        assert!(!keys.csrf_ok("cookie-a", ""));
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_when_asked() {
        assert_eq!(
            ConsoleKeys::new(None, false).cookie("n", "v", 60, false),
            "n=v; Path=/console; HttpOnly; SameSite=Strict; Max-Age=60"
        );
        assert!(ConsoleKeys::new(None, true).cookie("n", "v", 60, false).ends_with("; Secure"));
        assert!(ConsoleKeys::new(None, false).cookie("n", "v", 60, true).ends_with("; Secure"));
        assert_eq!(cookie_value("a=1; memoryd_console=xyz; b=2", SESSION_COOKIE), Some("xyz"));
        assert_eq!(cookie_value("a=1", SESSION_COOKIE), None);
    }
}
