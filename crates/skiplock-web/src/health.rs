//! The database health page: the jobs table's dead rows and vacuum times, the sessions that
//! hold back vacuum, and how full the notification queue is.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use skiplock::Statement;
use tokio_postgres::Row;

use crate::db;
use crate::html::{self, esc, int, span, when_full, Nav};
use crate::{html_response, App, Viewer};

/// The most sessions listed.
const MAX_BLOCKERS: i64 = 50;

pub(crate) async fn page(State(app): State<App>, Extension(v): Extension<Viewer>) -> Response {
    let blocker_age_us = i64::try_from(app.options.blocker_age.as_micros()).unwrap_or(i64::MAX);
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        let schema = app.client.schema().name();
        let table = app.sql.health_table(&tx, schema).await?;
        let blockers = db::health_blockers(
            &tx,
            app.client.statement(Statement::HealthBlockers),
            blocker_age_us,
            MAX_BLOCKERS,
        )
        .await?;
        let usage = app.sql.health_notify(&tx).await?;
        Ok::<_, db::DbError>((table, blockers, usage))
    };
    match read.await {
        Ok((table, blockers, usage)) => {
            let f = app.frame(&v);
            let mut body = String::new();
            body.push_str(&table_section(table.as_ref()));
            body.push_str(&blockers_section(
                &blockers,
                app.options.blocker_age.as_secs(),
            ));
            body.push_str(&notify_section(usage));
            html_response(
                StatusCode::OK,
                html::page(&f, "Database health", Nav::Health, "", &body, true),
            )
        }
        Err(e) => app.db_error(&v, &e),
    }
}

fn table_section(r: Option<&Row>) -> String {
    let mut s = String::from("<h2>Jobs table</h2>");
    let Some(r) = r else {
        s.push_str(
            "<p class=\"empty\">The statistics views do not list the jobs table yet (or this \
             role cannot see it).</p>",
        );
        return s;
    };
    let live: i64 = r.get("n_live_tup");
    let dead: i64 = r.get("n_dead_tup");
    let now: f64 = r.get("now");
    let ratio = if live + dead > 0 {
        dead as f64 / (live + dead) as f64
    } else {
        0.0
    };
    let dead_class = if dead > 10_000 && dead > live {
        " class=\"bad\""
    } else if ratio > 0.2 && dead > 1_000 {
        " class=\"warn\""
    } else {
        ""
    };
    let rows: [(&str, String); 8] = [
        ("Live rows (estimate)", int(live)),
        (
            "Dead row versions",
            format!(
                "<span{dead_class}>{}</span> <span class=\"muted\">({:.1}% of all)</span>",
                int(dead),
                ratio * 100.0
            ),
        ),
        ("Last autovacuum", when_full(r.get("last_autovacuum"), now)),
        ("Last manual vacuum", when_full(r.get("last_vacuum"), now)),
        (
            "Last autoanalyze",
            when_full(r.get("last_autoanalyze"), now),
        ),
        ("Last manual analyze", when_full(r.get("last_analyze"), now)),
        (
            "Vacuums (auto / manual)",
            format!(
                "{} / {}",
                int(r.get("autovacuum_count")),
                int(r.get("vacuum_count"))
            ),
        ),
        ("Size with indexes", html::bytes(r.get("total_bytes"))),
    ];
    s.push_str("<table class=\"kv\"><tbody>");
    for (k, val) in rows {
        s.push_str(&format!("<tr><th>{k}</th><td>{val}</td></tr>"));
    }
    s.push_str("</tbody></table>");
    if dead > 10_000 && dead > live {
        s.push_str(
            "<p class=\"notice warn\">The jobs table has more dead row versions than live rows: \
             check that autovacuum runs and that no transaction stays open (below).</p>",
        );
    }
    s
}

fn blockers_section(rows: &[Row], older_than_s: u64) -> String {
    let mut s = format!(
        "<h2>Sessions holding back vacuum</h2><p class=\"note\">Open transactions that are idle, \
         or older than {older_than_s} s: while they stay open, vacuum cannot remove rows that \
         died after they started, in any table.</p>"
    );
    if rows.is_empty() {
        s.push_str("<p class=\"empty ok\">None.</p>");
        return s;
    }
    s.push_str(
        "<table class=\"grid blockers\"><thead><tr><th>PID</th><th>User</th><th>Application</th>\
         <th>Client</th><th>State</th><th>Xmin age</th><th>Transaction age</th>\
         <th>In state for</th><th>Query</th></tr></thead><tbody>",
    );
    for r in rows {
        let state: String = r.get("state");
        let state_class = if state.starts_with("idle in transaction") {
            " class=\"warn\""
        } else {
            ""
        };
        let query: String = r.get("query");
        s.push_str(&format!(
            "<tr><td class=\"n\">{pid}</td><td>{user}</td><td>{app}</td><td>{client}</td>\
             <td{state_class}>{state}</td><td class=\"n\">{xmin}</td><td>{xact}</td>\
             <td>{in_state}</td><td><code class=\"query\" title=\"{qt}\">{q}</code></td></tr>",
            pid = r.get::<_, i32>("pid"),
            user = esc(&r.get::<_, String>("usename")),
            app = esc(&r.get::<_, String>("application_name")),
            client = esc(&r.get::<_, String>("client")),
            state = esc(&state),
            xmin = int(r.get("xmin_age")),
            xact = span(r.get("xact_age_s")),
            in_state = span(r.get("state_age_s")),
            qt = esc(&query),
            q = esc(&query),
        ));
    }
    s.push_str(
        "</tbody></table><p class=\"note\">End one with <code>SELECT \
         pg_terminate_backend(pid)</code>, or commit it where it runs.</p>",
    );
    s
}

fn notify_section(usage: f64) -> String {
    let pct = usage * 100.0;
    let class = if usage >= 0.5 {
        "bad"
    } else if usage >= 0.1 {
        "warn"
    } else {
        "ok"
    };
    format!(
        "<h2>Notification queue</h2><table class=\"kv\"><tbody><tr><th>Used</th><td>\
         <span class=\"{class}\">{pct:.4}%</span> <meter min=\"0\" max=\"1\" value=\"{usage}\">\
         </meter></td></tr></tbody></table><p class=\"note\">When the server's notification \
         queue is full, a transaction that enqueues fails at commit. It fills when a listening \
         session stops reading, for instance one left idle in a transaction.</p>"
    )
}
