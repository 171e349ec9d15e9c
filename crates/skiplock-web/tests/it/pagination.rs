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
        assert!(sql.contains("ORDER BY j.id"));
    }
}

#[tokio::test]
async fn a_rare_match_beyond_the_scan_budget_is_found_by_searching_older() {
    let b = setup().await;
    let old = b.add("q", "rare", "failed").await;
    b.add_many(150, "q", "common", "done").await;
    let r = b.dashboard(Access::full("t")).scan_budget(100).router();

    // The first page reads the newest 100 jobs only, finds nothing, and says so.
    let page = get(&r, "/jobs?state=failed").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(ids(&page.body).is_empty(), "{}", page.body);
    assert!(
        page.body.contains("0 matches among the 100 jobs searched"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("among the newest 100 jobs"),
        "{}",
        page.body
    );
    assert!(page.body.contains("Search older ›"), "{}", page.body);

    // Its link goes on below where the scan stopped, and finds the older match.
    let next = link(&page.body, "next").expect("a search-older link");
    let page = get(&r, &next).await;
    assert_eq!(ids(&page.body), vec![old], "{}", page.body);
    // That stretch reached the oldest job: nothing further to search.
    assert!(link(&page.body, "next").is_none(), "{}", page.body);
    // And back up: the stretch above it, searched again.
    let prev = link(&page.body, "prev").expect("a newer link");
    let page = get(&r, &prev).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(ids(&page.body).is_empty(), "{}", page.body);

    // An indexed filter is exact whatever the budget.
    b.add_many(120, "q", "k", "queued").await;
    let page = get(&r, "/jobs?state=queued").await;
    assert!(
        page.body.contains("120 matching jobs, newest first"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn budgeted_statements_read_a_primary_key_range_even_with_stale_statistics() {
    let b = setup().await;
    // Statistics taken on a small table, then many more rows: stale.
    b.add_many(100, "q", "k", "done").await;
    b.raw.batch_execute("ANALYZE jobs").await.unwrap();
    b.raw
        .batch_execute(
            "INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at) \
             SELECT 'q', 'k' || (i % 7), '{}', CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'done' END, \
                    1, now() FROM generate_series(1, 200000) i",
        )
        .await
        .unwrap();
    let top: i64 = b
        .raw
        .query_one("SELECT max(id) FROM jobs", &[])
        .await
        .unwrap()
        .get(0);
    let lo = top - 5_000;
    let schema = format!("\"{}\"", b.db.schema());
    let render = |sql: &str| -> String {
        sql.lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("{schema}", &schema)
    };
    let cases: [(&str, String); 5] = [
        (
            "job_list_older",
            render(include_str!("../../queries/job_list_older.sql"))
                .replace("$1::text", "'failed'::text")
                .replace("$2::text", "NULL::text")
                .replace("$3::text", "'nosuchkind'::text")
                .replace("$4::int8", "NULL::int8")
                .replace("$5", "51")
                .replace("$6::int8", &format!("{lo}::int8"))
                .replace("$7::bool", "false::bool")
                .replace("$8::text", "NULL::text"),
        ),
        (
            "job_list_newer",
            render(include_str!("../../queries/job_list_newer.sql"))
                .replace("$1::text", "'failed'::text")
                .replace("$2::text", "NULL::text")
                .replace("$3::text", "'nosuchkind'::text")
                .replace("$4::int8", &format!("{}::int8", lo - 5_000))
                .replace("$5", "51")
                .replace("$6::int8", &format!("{lo}::int8"))
                .replace("$7::bool", "false::bool")
                .replace("$8::text", "NULL::text"),
        ),
        (
            "job_count",
            render(include_str!("../../queries/job_count.sql"))
                .replace("$1::text", "'done'::text")
                .replace("$2::text", "NULL::text")
                .replace("$3::text", "'k3'::text")
                .replace("$4", "10000")
                .replace("$5::int8", &format!("{lo}::int8"))
                .replace("$6::bool", "false::bool")
                .replace("$7::text", "NULL::text"),
        ),
        (
            "job_select_ids",
            render(include_str!("../../queries/job_select_ids.sql"))
                .replace("$1::text", "'failed'::text")
                .replace("$2::text", "NULL::text")
                .replace("$3::text", "NULL::text")
                .replace("$4::int8", &format!("{top}::int8"))
                .replace("$5", "1000")
                .replace("$6::int8", &format!("{lo}::int8"))
                .replace("$7::bool", "false::bool")
                .replace("$8::text", "NULL::text"),
        ),
        (
            // The payload search: the newest N jobs by id, however rare the text is.
            "job_search",
            render(include_str!("../../queries/job_search.sql"))
                .replace("$1::text", "'needle'::text")
                .replace("$2::int8", &format!("{lo}::int8"))
                .replace("$3", "51"),
        ),
    ];
    for (name, sql) in cases {
        let plan: Vec<String> = b
            .raw
            .query(&format!("EXPLAIN {sql}"), &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let plan = plan.join("\n");
        assert!(
            plan.contains("jobs_pkey") && !plan.contains("Seq Scan"),
            "{name} reads a primary key range:\n{plan}"
        );
    }
}
