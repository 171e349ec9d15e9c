//! `skiplock retry`, `cancel` and `delete` with filters: every job the filters match, in
//! bounded batches.
//!
//! The match is `queries/jobs_match.sql` of the library (`Statement::JobsMatch`): the ids
//! `skiplock jobs` lists with the same filters, newest first, one window of ids at a time
//! (a range of the primary key, from `queries/jobs_id_bounds.sql`'s highest id down to its
//! lowest), so that every statement reads at most its window's rows whatever the
//! statistics say. The command walks the match once to count it (pages of [`COUNT_PAGE`]
//! ids), asks, then walks it again, [`BATCH`] ids at a time, each batch through the
//! library's own admin call ([`skiplock::Client::retry`], `cancel`, `delete`: the guarded
//! statements, one transaction per batch), so that memory and statement size stay bounded
//! however many jobs match.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;

use anyhow::Context as _;
use skiplock::{JobId, Statement};

use crate::admin::Action;
use crate::connect::Target;
use crate::errors::{schema_hint, usage};
use crate::jobs::{self, Filter};
use crate::output::{errln, outln, print_json, progress, spinner};

/// Ids per page while counting.
const COUNT_PAGE: i64 = 10_000;

/// How many ids wide a window of the walk starts; a window that finds few matches doubles
/// the next one, up to [`MAX_WINDOW`].
const WINDOW: i64 = 10_000;
const MAX_WINDOW: i64 = 1_000_000;

/// Ids per action statement.
pub const BATCH: i64 = 1_000;

/// Why a matching job was left alone: its stored status, or one of these.
const GONE: &str = "gone";
const UNIQUE_TAKEN: &str = "unique key taken";

/// What the action did so far.
#[derive(Debug, Default)]
struct Tally {
    /// Matching jobs handed to the action.
    seen: u64,
    changed: u64,
    skipped_by: BTreeMap<&'static str, u64>,
}

impl Tally {
    fn skipped(&self) -> u64 {
        self.skipped_by.values().sum()
    }

    fn skip(&mut self, why: &'static str) {
        *self.skipped_by.entry(why).or_default() += 1;
    }

    /// `running: 2, gone: 1`.
    fn reasons(&self) -> String {
        let parts: Vec<String> = self
            .skipped_by
            .iter()
            .map(|(why, n)| format!("{why}: {n}"))
            .collect();
        parts.join(", ")
    }
}

/// `1 job matches`, `3 jobs match`.
fn jobs_match(n: u64) -> String {
    if n == 1 {
        "1 job matches".to_owned()
    } else {
        format!("{n} jobs match")
    }
}

pub async fn run(
    target: &Target,
    action: Action,
    filter: &Filter,
    yes: bool,
    json: bool,
) -> anyhow::Result<()> {
    let (verb, done) = action.verb();
    let params = filter.params()?;
    let client = target.client(1).await?;

    let (matched, ends) = count(&client, target, &params, json).await?;
    let Some((top, bottom)) = ends else {
        if json {
            print_json(&serde_json::json!({
                "matched": 0, done: 0, "skipped": 0, "skipped_by": {},
            }));
        } else {
            outln!("no jobs match: none to {verb}");
        }
        return Ok(());
    };
    let counted = jobs_match(matched);
    if yes {
        errln!("{counted}");
    } else {
        let terminal = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        if !terminal {
            return Err(usage(format!(
                "{counted}; refusing to {verb} them without confirmation: standard input is \
                 not a terminal; add --yes"
            )));
        }
        crate::output::write_quietly(
            std::io::stderr().lock(),
            format_args!("{counted}; {verb} them? [y/N] "),
            false,
        );
        let mut answer = String::new();
        std::io::stdin()
            .read_line(&mut answer)
            .context("could not read the confirmation")?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            return Err(usage(format!("not confirmed: no job was {done}")));
        }
    }

    // The ids counted: no job enqueued since.
    let mut walk = Walk::new(&client, target, &params, bottom, top);
    let bar = progress(matched, &format!("{{bar:40}} {{pos}}/{{len}} {done}"), json);
    let mut tally = Tally::default();
    while let Some(ids) = walk
        .next(BATCH)
        .await
        .map_err(|e| partial(e, &tally, done))?
    {
        act(&client, target, action, ids, &mut tally)
            .await
            .map_err(|e| partial(e, &tally, done))?;
        bar.set_position(tally.seen);
    }
    bar.finish_and_clear();

    if tally.seen != matched {
        errln!(
            "note: {} matched when acted on ({} when counted): jobs changed meanwhile",
            tally.seen,
            matched
        );
    }
    if json {
        print_json(&serde_json::json!({
            "matched": tally.seen, done: tally.changed, "skipped": tally.skipped(),
            "skipped_by": tally.skipped_by,
        }));
    } else {
        let skipped = match tally.skipped() {
            0 => "skipped 0".to_owned(),
            n => format!("skipped {n} ({})", tally.reasons()),
        };
        outln!(
            "{done} {} of {} matching job(s); {skipped}",
            tally.changed,
            tally.seen
        );
    }
    Ok(())
}

/// A walk of the match, newest first, one window of ids at a time: every statement reads
/// at most the window's rows (a range of the primary key).
struct Walk<'a> {
    client: &'a skiplock::Client,
    target: &'a Target,
    params: jobs::Params,
    /// The lowest id left to look at.
    low: i64,
    /// The highest id left to look at (the walk is over below `low`).
    high: i64,
    window: i64,
}

impl<'a> Walk<'a> {
    /// A walk of the ids from `high` down to `low`, both included (the filters' id range
    /// narrows them).
    fn new(
        client: &'a skiplock::Client,
        target: &'a Target,
        params: &jobs::Params,
        low: i64,
        high: i64,
    ) -> Self {
        Walk {
            client,
            target,
            low: params.id_from.map_or(low, |f| f.max(low)),
            high: params.id_to.map_or(high, |t| t.min(high)),
            params: params.clone(),
            window: WINDOW,
        }
    }

    /// The next ids of the match, at most `limit`, newest first; `None` once the walk is
    /// over.
    async fn next(&mut self, limit: i64) -> anyhow::Result<Option<Vec<JobId>>> {
        while self.high >= self.low {
            let from = self.low.max(self.high.saturating_sub(self.window - 1));
            self.params.id_from = Some(from);
            self.params.id_to = Some(self.high);
            let rows = jobs::select(
                self.client,
                self.target,
                Statement::JobsMatch,
                &self.params,
                None,
                limit,
            )
            .await?;
            let ids = rows
                .iter()
                .map(|r| r.try_get::<_, i64>("id").map(JobId))
                .collect::<Result<Vec<_>, _>>()
                .context("could not read the matching jobs")?;
            let full = i64::try_from(ids.len()).unwrap_or(i64::MAX) >= limit;
            match ids.last() {
                // The rest of the window next.
                Some(last) if full => self.high = last.0.saturating_sub(1),
                _ => {
                    self.high = from.saturating_sub(1);
                    if i64::try_from(ids.len()).unwrap_or(i64::MAX) < limit / 2 {
                        self.window = self.window.saturating_mul(2).min(MAX_WINDOW);
                    }
                }
            }
            if !ids.is_empty() {
                return Ok(Some(ids));
            }
        }
        Ok(None)
    }
}

/// The lowest and highest job ids (`None`: no job at all).
async fn id_bounds(
    client: &skiplock::Client,
    target: &Target,
) -> anyhow::Result<Option<(i64, i64)>> {
    let conn = client
        .pool()
        .get()
        .await
        .context("could not get a database connection to find jobs")?;
    let row = conn
        .query_one(client.statement(Statement::JobsIdBounds), &[])
        .await
        .map_err(|e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
                crate::connect::missing_schema(&target.schema)
            } else {
                anyhow::Error::new(e).context("could not find the range of job ids")
            }
        })?;
    let low: Option<i64> = row.try_get("low").context("could not read the lowest id")?;
    let high: Option<i64> = row
        .try_get("high")
        .context("could not read the highest id")?;
    Ok(low.zip(high))
}

/// How many jobs match, and the highest and lowest ids among them (`None`: none match).
async fn count(
    client: &skiplock::Client,
    target: &Target,
    params: &jobs::Params,
    json: bool,
) -> anyhow::Result<(u64, Option<(i64, i64)>)> {
    let Some((low, high)) = id_bounds(client, target).await? else {
        return Ok((0, None));
    };
    let bar = spinner("counting the matching jobs".to_owned(), json);
    let mut walk = Walk::new(client, target, params, low, high);
    let (mut n, mut ends) = (0u64, None::<(i64, i64)>);
    while let Some(page) = walk.next(COUNT_PAGE).await? {
        n += page.len() as u64;
        if let (Some(first), Some(last)) = (page.first(), page.last()) {
            ends = Some((ends.map_or(first.0, |(top, _)| top), last.0));
        }
        bar.set_message(format!("counting the matching jobs: {n}"));
    }
    bar.finish_and_clear();
    Ok((n, ends))
}

/// One batch through the library's admin call. A retry that would make a second active job
/// with a unique key (the library refuses the whole call, naming the job) goes again
/// without that job, which is skipped.
async fn act(
    client: &skiplock::Client,
    target: &Target,
    action: Action,
    mut ids: Vec<JobId>,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    tally.seen += ids.len() as u64;
    let report = loop {
        let r = match action {
            Action::Retry => client.retry(&ids).await,
            Action::Cancel => client.cancel(&ids).await,
            Action::Delete => client.delete(&ids).await,
        };
        match r {
            Ok(r) => break r,
            Err(skiplock::Error::UniqueConflict { id, .. }) if ids.contains(&id) => {
                ids.retain(|j| *j != id);
                tally.skip(UNIQUE_TAKEN);
                if ids.is_empty() {
                    return Ok(());
                }
            }
            Err(e) => return Err(schema_hint(e, &target.schema)),
        }
    };
    tally.changed += report.changed.len() as u64;
    for (_, state) in &report.unchanged {
        tally.skip(state.map_or(GONE, |s| s.as_str()));
    }
    Ok(())
}

/// A failure part of the way through: says how many jobs were changed before it.
fn partial(e: anyhow::Error, tally: &Tally, done: &str) -> anyhow::Error {
    e.context(format!(
        "stopped after {} of the matching jobs were {done} ({} skipped)",
        tally.changed,
        tally.skipped()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_well() {
        assert_eq!(jobs_match(0), "0 jobs match");
        assert_eq!(jobs_match(1), "1 job matches");
        assert_eq!(jobs_match(2500), "2500 jobs match");
        let mut t = Tally::default();
        t.skip("running");
        t.skip(GONE);
        t.skip("running");
        assert_eq!(t.skipped(), 3);
        assert_eq!(t.reasons(), "gone: 1, running: 2");
    }
}
