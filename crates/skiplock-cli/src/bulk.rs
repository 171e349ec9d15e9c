//! `skiplock retry`, `cancel` and `delete` with filters: every job the filters match, in
//! bounded batches.
//!
//! The match is `queries/jobs_match.sql` of the library (`Statement::JobsMatch`): the ids
//! `skiplock jobs` lists with the same filters, newest first, below a cursor, a page at a
//! time. The command walks it once to count (pages of [`COUNT_PAGE`] ids), asks, then walks
//! it again, [`BATCH`] ids at a time, each batch through the library's own admin call
//! ([`skiplock::Client::retry`], `cancel`, `delete`: the guarded statements, one transaction
//! per batch), so that memory and statement size stay bounded however many jobs match.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;

use anyhow::Context as _;
use skiplock::{JobId, Statement};

use crate::admin::Action;
use crate::connect::Target;
use crate::errors::{schema_hint, usage};
use crate::jobs::{self, Filter};
use crate::output::{errln, outln, print_json, progress};

/// Ids per page while counting.
const COUNT_PAGE: i64 = 10_000;

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
    let mut params = filter.params()?;
    let client = target.client(1).await?;

    let (matched, top) = count(&client, target, &params).await?;
    let Some(top) = top else {
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

    // The jobs counted, not one enqueued since.
    params.id_to = Some(top);
    let bar = progress(matched, &format!("{{bar:40}} {{pos}}/{{len}} {done}"), json);
    let mut tally = Tally::default();
    let mut before = None;
    loop {
        let batch = async {
            let rows = jobs::select(
                &client,
                target,
                Statement::JobsMatch,
                &params,
                before,
                BATCH,
            )
            .await?;
            rows.iter()
                .map(|r| r.try_get::<_, i64>("id").map(JobId))
                .collect::<Result<Vec<_>, _>>()
                .context("could not read the matching jobs")
        }
        .await;
        let ids = batch.map_err(|e| partial(e, &tally, done))?;
        let Some(last) = ids.last() else {
            break;
        };
        before = Some(last.0);
        let full = ids.len() >= usize::try_from(BATCH).unwrap_or(usize::MAX);
        act(&client, target, action, ids, &mut tally)
            .await
            .map_err(|e| partial(e, &tally, done))?;
        bar.set_position(tally.seen);
        if !full {
            break;
        }
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

/// How many jobs match, and the highest id among them (`None`: none match), walking the
/// match a page at a time.
async fn count(
    client: &skiplock::Client,
    target: &Target,
    params: &jobs::Params,
) -> anyhow::Result<(u64, Option<i64>)> {
    let (mut n, mut top, mut before) = (0u64, None, None);
    loop {
        let rows = jobs::select(
            client,
            target,
            Statement::JobsMatch,
            params,
            before,
            COUNT_PAGE,
        )
        .await?;
        let page = rows
            .iter()
            .map(|r| r.try_get::<_, i64>("id"))
            .collect::<Result<Vec<_>, _>>()
            .context("could not count the matching jobs")?;
        let Some(&last) = page.last() else {
            break;
        };
        top = top.or(page.first().copied());
        n += page.len() as u64;
        before = Some(last);
        if page.len() < usize::try_from(COUNT_PAGE).unwrap_or(usize::MAX) {
            break;
        }
    }
    Ok((n, top))
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
