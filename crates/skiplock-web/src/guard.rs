//! The layer in front of every route: asks the [`Authorize`](crate::Authorize) hook, refuses
//! what the access does not allow, refuses cross-site `POST`s, and adds the security headers.

use axum::extract::{OriginalUri, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::html;
use crate::{html_response, Access, App, Viewer};

/// Pages load their script and style from the dashboard only, run no inline script, post
/// forms only to it, and are never framed (no clickjacking of the action buttons).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let access = app.authorize.authorize(&parts);
    let base = base_path(&parts);
    let (principal, full) = match access {
        Access::Forbidden => {
            return secure(html_response(
                StatusCode::FORBIDDEN,
                "<!doctype html><title>Forbidden</title><p>Forbidden.</p>\n".to_owned(),
            ));
        }
        Access::Full { principal } => (principal, !app.options.read_only),
        Access::ReadOnly { principal } => (principal, false),
    };
    let viewer = Viewer {
        principal,
        full,
        base,
    };
    let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe {
        let refusal = if !viewer.full {
            Some("Your access to this dashboard is read-only.")
        } else if let Some(why) = cross_site(&parts.headers, &app.options.trusted_origins) {
            tracing::warn!(
                principal = %viewer.principal,
                path = %parts.uri.path(),
                reason = why,
                "dashboard refused a cross-site request"
            );
            Some("This request came from another site and was refused.")
        } else {
            None
        };
        if let Some(text) = refusal {
            if !viewer.full {
                tracing::warn!(
                    principal = %viewer.principal,
                    path = %parts.uri.path(),
                    "dashboard refused an action: read-only access"
                );
            }
            return secure(html_response(
                StatusCode::FORBIDDEN,
                html::message(&app.frame(&viewer), "Refused", text),
            ));
        }
    }
    let mut req = Request::from_parts(parts, body);
    req.extensions_mut().insert(viewer);
    secure(next.run(req).await)
}

fn secure(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    res
}

/// The path the dashboard is mounted at: the original path less the part the router saw.
fn base_path(parts: &axum::http::request::Parts) -> String {
    let inner = parts.uri.path();
    let Some(OriginalUri(original)) = parts.extensions.get::<OriginalUri>() else {
        return String::new();
    };
    let full = original.path();
    if let Some(base) = full.strip_suffix(inner) {
        return base.trim_end_matches('/').to_owned();
    }
    // Mounted at "/admin" and asked for "/admin": the router saw "/".
    if inner == "/" {
        return full.trim_end_matches('/').to_owned();
    }
    String::new()
}

/// Why a state-changing request is cross-site, or `None` when it is not.
///
/// Browsers send `Sec-Fetch-Site` (same-origin, same-site, cross-site, or none for a request
/// the user started); older ones send `Origin` on every `POST`. A request with neither does
/// not come from a browser, so no web page can have forged it.
pub(crate) fn cross_site(headers: &HeaderMap, trusted: &[String]) -> Option<&'static str> {
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(|o| o.trim_end_matches('/').to_ascii_lowercase());
    if let Some(o) = &origin {
        if trusted.iter().any(|t| t == o) {
            return None;
        }
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        return match site.as_bytes() {
            b"same-origin" | b"none" => None,
            _ => Some("Sec-Fetch-Site is not same-origin"),
        };
    }
    let origin = origin?;
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match (origin_host, host) {
        (Some(o), Some(h)) if o == h => None,
        _ => Some("Origin is not this host"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn same_origin_passes_and_cross_site_is_refused() {
        let none: &[String] = &[];
        assert!(cross_site(&headers(&[]), none).is_none());
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-origin")]), none).is_none());
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")]), none).is_some());
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-site")]), none).is_some());
        assert!(cross_site(
            &headers(&[
                ("origin", "http://127.0.0.1:8080"),
                ("host", "127.0.0.1:8080")
            ]),
            none
        )
        .is_none());
        assert!(cross_site(
            &headers(&[
                ("origin", "https://evil.example"),
                ("host", "127.0.0.1:8080")
            ]),
            none
        )
        .is_some());
        assert!(cross_site(&headers(&[("origin", "null"), ("host", "a")]), none).is_some());
        let trusted = vec!["https://admin.example".to_owned()];
        assert!(cross_site(
            &headers(&[
                ("origin", "https://admin.example"),
                ("host", "backend:8080"),
                ("sec-fetch-site", "cross-site")
            ]),
            &trusted
        )
        .is_none());
    }
}
