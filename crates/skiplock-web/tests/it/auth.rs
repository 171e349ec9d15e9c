//! The authorisation hook decides; read-only access and cross-site requests cannot act; every
//! action is logged with who did it.

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use skiplock_web::{Access, Dashboard};

use crate::support::{get, post, post_with, setup};

#[tokio::test]
async fn forbidden_sees_nothing_and_does_nothing() {
    let b = setup().await;
    let id = b.add("q", "k", "failed").await;
    let r = b.dashboard(Access::Forbidden).router();
    for path in [
        "/",
        "/jobs",
        &format!("/jobs/{id}"),
        "/health",
        "/bulk?action=retry&state=failed",
        "/assets/dashboard.js",
        "/nowhere",
    ] {
        let page = get(&r, path).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{path}");
        assert!(!page.body.contains("boom"));
    }
    let p = post(&r, &format!("/jobs/{id}/retry"), "").await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert_eq!(b.status(id).await.as_deref(), Some("failed"));
}

#[tokio::test]
async fn read_only_sees_every_page_but_cannot_post() {
    let b = setup().await;
    let failed = b.add("q", "k", "failed").await;
    let queued = b.add("q", "k", "queued").await;
    for r in [
        b.dashboard(Access::read_only("viewer")).router(),
        // The dashboard's own switch caps even full access.
        b.dashboard(Access::full("admin")).read_only(true).router(),
    ] {
        for path in ["/", "/jobs?state=failed", "/health"] {
            let page = get(&r, path).await;
            assert_eq!(page.status, StatusCode::OK, "{path}");
            assert!(page.body.contains("read-only"), "{path}");
        }
        let job = get(&r, &format!("/jobs/{failed}")).await;
        assert!(
            !job.body.contains("<form method=\"post\""),
            "no action buttons"
        );
        assert!(job.body.contains("Read-only access"));
        let list = get(&r, "/jobs?state=failed").await;
        assert!(!list.body.contains("/bulk?"), "no bulk links");

        for (path, form) in [
            (format!("/jobs/{failed}/retry"), String::new()),
            (format!("/jobs/{failed}/delete"), String::new()),
            (format!("/jobs/{queued}/cancel"), String::new()),
            (
                "/bulk".to_owned(),
                "action=retry&state=failed&max_id=999999&confirm=yes".to_owned(),
            ),
        ] {
            let p = post(&r, &path, &form).await;
            assert_eq!(p.status, StatusCode::FORBIDDEN, "{path}");
            assert!(p.body.contains("read-only"), "{}", p.body);
        }
        assert_eq!(b.status(failed).await.as_deref(), Some("failed"));
        assert_eq!(b.status(queued).await.as_deref(), Some("queued"));
    }
}

#[tokio::test]
async fn the_hook_sees_the_request_and_names_who_acts() {
    let b = setup().await;
    let id = b.add("q", "k", "failed").await;
    // An application's auth layer would have put the user in the extensions; here a header
    // stands in for it.
    let r = Dashboard::new(
        b.client.clone(),
        |req: &axum::http::request::Parts| match req
            .headers
            .get("x-user")
            .and_then(|v| v.to_str().ok())
        {
            Some("alice") => Access::full("alice"),
            Some(other) => Access::read_only(other),
            None => Access::Forbidden,
        },
    )
    .router();
    assert_eq!(get(&r, "/").await.status, StatusCode::FORBIDDEN);
    let bob = post_with(
        &r,
        &format!("/jobs/{id}/retry"),
        "",
        &[("x-user", "bob"), ("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(bob.status, StatusCode::FORBIDDEN);

    let log = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || Sink(sink.clone()))
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let alice = post_with(
        &r,
        &format!("/jobs/{id}/retry"),
        "",
        &[("x-user", "alice"), ("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(alice.status, StatusCode::SEE_OTHER);
    assert_eq!(alice.location(), format!("/jobs/{id}?done=retry&changed=1"));
    assert_eq!(b.status(id).await.as_deref(), Some("queued"));
    let text = String::from_utf8(log.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("principal=alice")
            && text.contains("action=\"retry\"")
            && text.contains(&format!("job={id}")),
        "{text}"
    );
    assert!(
        text.contains("principal=bob") || !text.contains("bob"),
        "bob's refusal was logged before the capture"
    );
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn cross_site_posts_are_refused() {
    let b = setup().await;
    let id = b.add("q", "k", "failed").await;
    let r = b.router();
    for headers in [
        &[("sec-fetch-site", "cross-site")][..],
        &[("sec-fetch-site", "same-site")][..],
        &[("origin", "https://evil.example")][..],
        &[("origin", "null")][..],
    ] {
        let p = post_with(&r, &format!("/jobs/{id}/retry"), "", headers).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{headers:?}");
        assert!(p.body.contains("another site"));
        assert_eq!(b.status(id).await.as_deref(), Some("failed"), "{headers:?}");
    }
    // A browser on the same origin (either header) may act.
    let ok = post_with(
        &r,
        &format!("/jobs/{id}/retry"),
        "",
        &[("origin", "http://127.0.0.1:8080")],
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    assert_eq!(b.status(id).await.as_deref(), Some("queued"));
    // A GET never changes anything, whatever it asks.
    let id2 = b.add("q", "k", "failed").await;
    let g = get(&r, &format!("/jobs/{id2}/retry")).await;
    assert_eq!(g.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(b.status(id2).await.as_deref(), Some("failed"));
}
