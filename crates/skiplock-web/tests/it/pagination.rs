//! The job list pages by id (keyset), forwards and back, and new jobs do not shift pages.

use axum::http::StatusCode;
use skiplock_web::Access;

use crate::support::{get, ids, link, setup};

#[tokio::test]
async fn keyset_pages_cover_every_match_once_in_both_directions() {
    let b = setup().await;
    let mut mine = Vec::new();
    for i in 0..23 {
        mine.push(b.add("mine", "k", "failed").await);
        // Other jobs between them, which the filter leaves out.
        b.add(if i % 2 == 0 { "other" } else { "mine" }, "k", "done")
            .await;
    }
    mine.reverse();
    let r = b.dashboard(Access::full("t")).page_size(5).router();

    let mut seen: Vec<i64> = Vec::new();
    let mut pages = Vec::new();
    let mut path = "/jobs?state=failed&queue=mine".to_owned();
    loop {
        let page = get(&r, &path).await;
        assert_eq!(page.status, StatusCode::OK);
        let got = ids(&page.body);
        assert!(got.len() <= 5);
        if pages.is_empty() {
            // A job added while paging lands before the first page, and moves nothing.
            b.add("mine", "k", "failed").await;
        }
        seen.extend(&got);
        pages.push(got);
        match link(&page.body, "next") {
            Some(next) => path = next,
            None => break,
        }
    }
    assert_eq!(seen, mine, "every match once, newest first");
    assert_eq!(pages.len(), 5);
    assert_eq!(pages.last().unwrap().len(), 3);

    // Back from the last page with "Newer": the same pages in reverse.
    let mut back = vec![pages.last().unwrap().clone()];
    let mut page = get(&r, &path).await;
    while let Some(prev) = link(&page.body, "prev") {
        page = get(&r, &prev).await;
        back.push(ids(&page.body));
    }
    // The same pages in reverse, then one more page: the job added meanwhile.
    let newest = back.pop().unwrap();
    assert_eq!(newest.len(), 1);
    assert!(newest[0] > mine[0]);
    back.reverse();
    assert_eq!(back, pages);
}

#[tokio::test]
async fn no_statement_pages_with_offset() {
    // The list's statements page by id; OFFSET would read every skipped row.
    for sql in [
        include_str!("../../queries/job_list_older.sql"),
        include_str!("../../queries/job_list_newer.sql"),
    ] {
        let code: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect();
        assert!(!code.to_ascii_uppercase().contains("OFFSET"));
        assert!(sql.contains("ORDER BY id"));
    }
}
