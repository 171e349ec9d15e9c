//! Workflows on a job's page (migration 13): the job's output, its parents and children with
//! their states, and the graph of its workflow as inline SVG, one node per job and one path
//! per dependency, each node in its state's class and linked to its page.

use axum::http::StatusCode;

use crate::support::{get, post, setup, Bundle};

/// Enqueues a workflow (the library's SQL function) and returns the new ids in order.
pub async fn workflow(b: &Bundle, jobs: &str) -> Vec<i64> {
    b.raw
        .query(
            "SELECT id FROM enqueue_workflow($1::text::jsonb) ORDER BY n",
            &[&jobs],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Completes job `id` with `output` (the triggers release its children).
pub async fn complete(b: &Bundle, id: i64, output: Option<&str>) {
    b.raw
        .execute(
            "UPDATE jobs SET status = 'done', attempts = 1, finished_at = now(), \
             output = $2::text::jsonb WHERE id = $1",
            &[&id, &output],
        )
        .await
        .unwrap();
}

/// Marks job `id` running, as a worker's claim does.
pub async fn start(b: &Bundle, id: i64) {
    b.raw
        .execute(
            "UPDATE jobs SET status = 'running', attempts = 1, \
             locked_until = now() + interval '5 minutes' WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
}

/// The `<svg class="wf">` of a page.
fn svg(body: &str) -> &str {
    let start = body.find("<svg class=\"wf\"").expect("a workflow graph");
    let end = start + body[start..].find("</svg>").expect("the end of the graph");
    &body[start..end]
}

/// The graph's nodes: (id, class attribute), in document order.
fn nodes(svg: &str) -> Vec<(i64, String)> {
    svg.split("<a class=\"")
        .skip(1)
        .map(|n| {
            let class = n[..n.find('"').unwrap()].to_owned();
            let at = n.find("data-id=\"").unwrap() + "data-id=\"".len();
            let id = n[at..at + n[at..].find('"').unwrap()].parse().unwrap();
            (id, class)
        })
        .collect()
}

/// The graph's edges: (parent, child), sorted.
fn edges(svg: &str) -> Vec<(i64, i64)> {
    let attr = |s: &str, name: &str| -> i64 {
        let at = s.find(name).unwrap() + name.len();
        s[at..at + s[at..].find('"').unwrap()].parse().unwrap()
    };
    let mut out: Vec<(i64, i64)> = svg
        .split("<path class=\"edge")
        .skip(1)
        .map(|e| (attr(e, "data-from=\""), attr(e, "data-to=\"")))
        .collect();
    out.sort_unstable();
    out
}

fn class_of(nodes: &[(i64, String)], id: i64) -> &str {
    &nodes.iter().find(|(n, _)| *n == id).unwrap().1
}

/// The rows of a relatives table (`parents` or `children`) as text: "id state kind queue".
fn relatives(body: &str, class: &str) -> Vec<String> {
    let start = body
        .find(&format!("<table class=\"grid {class}\">"))
        .unwrap_or_else(|| panic!("no {class} table"));
    let table = &body[start..start + body[start..].find("</table>").unwrap()];
    table
        .split("<tr>")
        .skip(2)
        .map(|row| {
            let mut out = String::new();
            let mut in_tag = false;
            for c in row.replace("</td>", " ").chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    c if !in_tag => out.push(c),
                    _ => {}
                }
            }
            out.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .collect()
}

#[tokio::test]
async fn a_diamond_workflow_shows_outputs_relatives_and_its_graph() {
    let b = setup().await;
    // a -> b, a -> c, b -> d, c -> d.
    let ids = workflow(
        &b,
        r#"[{"ref": "a", "kind": "fetch", "queue": "media"},
            {"ref": "b", "kind": "resize", "after": ["a"], "queue": "media"},
            {"ref": "c", "kind": "thumbnail", "after": ["a"], "queue": "media"},
            {"kind": "publish", "after": ["b", "c"], "queue": "web"}]"#,
    )
    .await;
    let [a, bb, c, d] = ids[..] else {
        panic!("{ids:?}")
    };
    complete(
        &b,
        a,
        Some(r#"{"rows": 3, "note": "<b>bold</b> & \"quoted\""}"#),
    )
    .await;
    start(&b, bb).await;
    let plain = b.add("mail", "send", "done").await;
    let r = b.router();

    // The first job: its output (indented, escaped), its two children and the graph.
    let page = get(&r, &format!("/jobs/{a}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = &page.body;
    assert!(body.contains("<h2>Output</h2>"), "{body}");
    assert!(
        body.contains(
            "<pre class=\"payload output\">{\n    &quot;note&quot;: &quot;&lt;b&gt;bold&lt;/b&gt; \
             &amp; \\&quot;quoted\\&quot;&quot;,\n    &quot;rows&quot;: 3\n}</pre>"
        ),
        "{body}"
    );
    assert!(!body.contains("<b>bold</b>"), "the output is escaped");
    assert!(body.contains("<th>Output size</th><td>47 B</td>"), "{body}");
    assert!(body.contains("<h2>Workflow</h2>"), "{body}");
    assert!(
        body.contains("2 jobs waited for it (released when it was done)."),
        "{body}"
    );
    assert_eq!(
        relatives(body, "children"),
        [
            format!("{bb} running resize media"),
            format!("{c} queued thumbnail media")
        ]
    );
    assert!(!body.contains("<table class=\"grid parents\">"), "{body}");
    let g = svg(body);
    let n = nodes(g);
    assert_eq!(n.len(), 4, "one node per job: {g}");
    let mut got: Vec<i64> = n.iter().map(|(id, _)| *id).collect();
    got.sort_unstable();
    assert_eq!(got, [a, bb, c, d]);
    assert_eq!(edges(g), [(a, bb), (a, c), (bb, d), (c, d)], "{g}");
    assert_eq!(class_of(&n, a), "node state-done current");
    assert_eq!(class_of(&n, bb), "node state-running");
    assert_eq!(class_of(&n, c), "node state-queued");
    assert_eq!(class_of(&n, d), "node state-waiting");
    for id in [a, bb, c, d] {
        assert!(g.contains(&format!("href=\"/jobs/{id}\"")), "{g}");
    }
    // Layers: a above b and c (side by side), d below them.
    let y = |id: i64| -> f64 {
        let at = g.find(&format!("data-id=\"{id}\"")).unwrap();
        let rect = &g[at..];
        let rect = &rect[rect.find("class=\"box\"").unwrap()..];
        let at = rect.find("y=\"").unwrap() + 3;
        rect[at..at + rect[at..].find('"').unwrap()]
            .parse()
            .unwrap()
    };
    assert!(y(a) < y(bb) && y(bb) == y(c) && y(c) < y(d), "{g}");
    // Edges out of a job that is done are settled; those out of b and c are not (dashed).
    assert_eq!(g.matches("<path class=\"edge near\"").count(), 2, "{g}");
    assert_eq!(g.matches("<path class=\"edge open").count(), 2, "{g}");
    assert!(body.contains("<p class=\"wf-legend\">"), "{body}");
    assert!(!body.contains("Showing "), "nothing was cut: {body}");

    // The last job: waiting for its two parents, listed with their states.
    let page = get(&r, &format!("/jobs/{d}")).await;
    let body = &page.body;
    assert!(
        body.contains("<span class=\"tag held after\""),
        "tagged waiting: {body}"
    );
    assert!(
        body.contains("(2 of the 2 jobs it depends on not done yet)"),
        "{body}"
    );
    assert!(body.contains("Waits for 2 jobs: 2 not done yet."), "{body}");
    assert_eq!(
        relatives(body, "parents"),
        [
            format!("{bb} running resize media"),
            format!("{c} queued thumbnail media")
        ]
    );
    assert!(!body.contains("<h2>Output</h2>"), "no output yet");
    assert!(body.contains("<th>Output size</th><td><span class=\"muted\">-</span>"));
    let n = nodes(svg(body));
    assert_eq!(n.len(), 4);
    assert_eq!(class_of(&n, d), "node state-waiting current");
    assert_eq!(class_of(&n, a), "node state-done");

    // The list tags the waiting job.
    let list = get(&r, "/jobs?state=queued&queue=web").await;
    assert!(
        list.body.contains("class=\"tag held after\""),
        "{}",
        list.body
    );

    // A job outside any workflow has no workflow section.
    let page = get(&r, &format!("/jobs/{plain}")).await;
    assert!(!page.body.contains("Workflow"), "{}", page.body);
    assert!(!page.body.contains("<svg"), "{}", page.body);

    // Cancel c from its page: d fails with it, and both show so.
    let res = post(&r, &format!("/jobs/{c}/cancel"), "").await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let page = get(&r, &format!("/jobs/{d}")).await;
    let body = &page.body;
    assert!(
        body.contains("a job it depends on did not finish"),
        "{body}"
    );
    assert!(
        body.contains("which this job waits for, was cancelled"),
        "{body}"
    );
    assert_eq!(
        relatives(body, "parents")[1],
        format!("{c} cancelled thumbnail media")
    );
    let n = nodes(svg(body));
    assert_eq!(class_of(&n, c), "node state-cancelled");
    assert_eq!(class_of(&n, d), "node state-failed current");

    // A parent deleted since: still in its child's list and graph, as deleted.
    b.raw
        .execute("DELETE FROM jobs WHERE id = $1", &[&a])
        .await
        .unwrap();
    let page = get(&r, &format!("/jobs/{bb}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        relatives(&page.body, "parents"),
        [format!("{a} deleted - -")]
    );
    let n = nodes(svg(&page.body));
    assert_eq!(n.len(), 4, "{}", page.body);
    assert_eq!(class_of(&n, a), "node state-deleted");
}

#[tokio::test]
async fn a_large_workflow_is_listed_and_drawn_in_part() {
    let b = setup().await;
    // One job that 350 jobs wait for, and one that waits for all of those.
    let mut jobs = vec![r#"{"ref": "root", "kind": "split"}"#.to_owned()];
    for i in 0..350 {
        jobs.push(format!(
            r#"{{"ref": "p{i}", "kind": "part", "after": ["root"]}}"#
        ));
    }
    let refs: Vec<String> = (0..350).map(|i| format!("\"p{i}\"")).collect();
    jobs.push(format!(
        r#"{{"kind": "join", "after": [{}]}}"#,
        refs.join(", ")
    ));
    let ids = workflow(&b, &format!("[{}]", jobs.join(","))).await;
    let (root, join) = (ids[0], ids[351]);
    let r = b.router();

    let page = get(&r, &format!("/jobs/{root}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let body = &page.body;
    assert!(body.contains("350 jobs wait for it."), "{body}");
    let children = relatives(body, "children");
    assert_eq!(children.len(), 200);
    assert_eq!(children[0], format!("{} waiting part default", ids[1]));
    assert!(
        body.contains("<p class=\"note more\">and 150 more</p>"),
        "{body}"
    );
    let n = nodes(svg(body));
    assert_eq!(n.len(), 300);
    assert!(
        body.contains("Showing 300 of 352 jobs in this workflow"),
        "{body}"
    );
    // The nearest first: the root and 299 of its children, not the join two steps away.
    assert!(n
        .iter()
        .any(|(id, c)| *id == root && c.ends_with("current")));
    assert!(!n.iter().any(|(id, _)| *id == join));

    let page = get(&r, &format!("/jobs/{join}")).await;
    let body = &page.body;
    assert!(
        body.contains("Waits for 350 jobs: 350 not done yet."),
        "{body}"
    );
    assert_eq!(relatives(body, "parents").len(), 200);
    assert!(body.contains("and 150 more"), "{body}");
    assert_eq!(nodes(svg(body)).len(), 300);
}
