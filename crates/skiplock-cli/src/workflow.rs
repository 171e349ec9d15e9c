//! `skiplock enqueue --workflow FILE`: a workflow as JSON lines, one job per line, read and
//! checked here before anything reaches the database.
//!
//! Each line is a job object: `kind`, `payload`, `queue`, `priority`, `max_attempts`,
//! `delay` or `run_at`, `key` (the flags of `enqueue` give the defaults of those a line
//! leaves out), plus `ref` (a name for the job, unique in the file) and `after` (what the job
//! waits for: refs of other lines, or ids of jobs that exist already). Lines may come in any
//! order: they are sorted topologically (Kahn's algorithm, O(lines + edges)), so that each
//! job is added to the [`skiplock::Workflow`] after the jobs it waits for. A cycle, an
//! unknown or duplicate ref, or a line that is not a job is refused with a one-line message
//! naming it, before any connection is made.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use skiplock::{JobId, NewJob, Step, Workflow};

use crate::parse::{parse_duration, MAX_DURATION};

/// The most bytes a `ref` may have.
const MAX_REF_BYTES: usize = 256;

/// How many refs a cycle's message lists before it leaves the rest out.
const CYCLE_SHOWN: usize = 10;

/// What the flags of `enqueue` give the jobs of a workflow whose lines leave them out.
pub struct Defaults<'a> {
    pub kind: &'a str,
    pub queue: &'a str,
    pub priority: i16,
    pub max_attempts: i32,
    pub delay: Option<Duration>,
    pub run_at: Option<SystemTime>,
    pub key: Option<&'a str>,
}

/// One job line of the file.
struct Line {
    /// Its line number in the file (from 1).
    number: usize,
    reference: Option<String>,
    job: NewJob,
    /// The refs it waits for, as written (resolved into `parents` afterwards).
    after_refs: Vec<String>,
    /// The job lines it waits for (indexes into the plan's lines), sorted, no duplicates.
    parents: Vec<usize>,
    /// The existing jobs it waits for, sorted, no duplicates.
    existing: Vec<i64>,
}

/// A workflow file, checked and sorted.
pub struct Plan {
    lines: Vec<Line>,
    /// The job lines in an order where each comes after every line it waits for.
    order: Vec<usize>,
}

/// A job line's place in the file: its line number and its ref.
pub struct Placed<'a> {
    pub number: usize,
    pub reference: Option<&'a str>,
}

impl Plan {
    /// Reads a workflow file's text. The error is one line (without "nothing was
    /// enqueued").
    pub fn parse(text: &[u8], defaults: &Defaults<'_>) -> Result<Plan, String> {
        let mut lines = Vec::new();
        for (n, raw) in text.split(|b| *b == b'\n').enumerate() {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            if raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let number = n + 1;
            let line =
                std::str::from_utf8(raw).map_err(|_| format!("line {number}: not valid UTF-8"))?;
            lines.push(
                parse_line(number, line, defaults).map_err(|e| format!("line {number}: {e}"))?,
            );
        }
        if lines.is_empty() {
            return Err("the workflow holds no job lines".to_owned());
        }
        if lines.len() > skiplock::Workflow::MAX_JOBS {
            return Err(format!(
                "the workflow holds {} jobs; at most {} in one workflow",
                lines.len(),
                skiplock::Workflow::MAX_JOBS
            ));
        }
        // Refs: each names one line.
        let mut by_ref: HashMap<&str, usize> = HashMap::with_capacity(lines.len());
        for (i, l) in lines.iter().enumerate() {
            if let Some(r) = l.reference.as_deref() {
                if let Some(first) = by_ref.insert(r, i) {
                    return Err(format!(
                        "line {}: ref {} is already used on line {}",
                        l.number,
                        quoted(r),
                        lines[first].number
                    ));
                }
            }
        }
        let mut parents_of = Vec::with_capacity(lines.len());
        for l in &lines {
            let mut parents = Vec::with_capacity(l.after_refs.len());
            for r in &l.after_refs {
                match by_ref.get(r.as_str()) {
                    Some(p) => parents.push(*p),
                    None => {
                        return Err(format!(
                            "line {}: after {}: no job has that ref",
                            l.number,
                            quoted(r)
                        ))
                    }
                }
            }
            parents.sort_unstable();
            parents.dedup();
            parents_of.push(parents);
        }
        drop(by_ref);
        for (l, parents) in lines.iter_mut().zip(parents_of) {
            l.parents = parents;
        }
        let order = topological(&lines)?;
        Ok(Plan { lines, order })
    }

    /// How many jobs it holds.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// The job lines in file order.
    pub fn placed(&self) -> impl Iterator<Item = Placed<'_>> {
        self.lines.iter().map(|l| Placed {
            number: l.number,
            reference: l.reference.as_deref(),
        })
    }

    /// The line number of the job at `index` of the [`Workflow`] that [`Plan::workflow`]
    /// builds.
    pub fn line_of_step(&self, index: usize) -> Option<usize> {
        self.order.get(index).map(|i| self.lines[*i].number)
    }

    /// The first line that waits for the existing job `id`, if any.
    pub fn line_waiting_for(&self, id: i64) -> Option<usize> {
        self.lines
            .iter()
            .find(|l| l.existing.binary_search(&id).is_ok())
            .map(|l| l.number)
    }

    /// The workflow, its jobs in topological order, and for each job line (in file order)
    /// the index of its job in the workflow (which is the index of its id in what
    /// `enqueue_workflow` returns).
    pub fn workflow(&self) -> Result<(Workflow, Vec<usize>), String> {
        let mut flow = Workflow::new();
        let mut steps: Vec<Option<Step>> = vec![None; self.lines.len()];
        for &i in &self.order {
            let l = &self.lines[i];
            let parents = l
                .parents
                .iter()
                .map(|p| steps[*p])
                .collect::<Option<Vec<Step>>>()
                .ok_or_else(|| {
                    format!(
                        "line {}: internal error: a job it waits for was not placed before it",
                        l.number
                    )
                })?;
            steps[i] = Some(flow.add_after(l.job.clone(), &parents));
        }
        let index = steps
            .into_iter()
            .map(|s| s.map(Step::index))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| "internal error: a job line was left out".to_owned())?;
        Ok((flow, index))
    }
}

/// Kahn's algorithm: the lines in an order where each comes after its parents (lines without
/// parents first, in file order), or the refusal of a cycle naming its refs.
fn topological(lines: &[Line]) -> Result<Vec<usize>, String> {
    let n = lines.len();
    let mut waiting: Vec<usize> = lines.iter().map(|l| l.parents.len()).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, l) in lines.iter().enumerate() {
        for p in &l.parents {
            children[*p].push(i);
        }
    }
    let mut ready: VecDeque<usize> = (0..n).filter(|i| waiting[*i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for c in &children[i] {
            waiting[*c] -= 1;
            if waiting[*c] == 0 {
                ready.push_back(*c);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    Err(cycle(lines, &waiting))
}

/// The refusal of a cycle. Every line left out of the order still waits for a parent that
/// was left out too; following such parents from the first of them must come back to a line
/// already seen: that loop is a cycle.
fn cycle(lines: &[Line], waiting: &[usize]) -> String {
    let Some(start) = (0..lines.len()).find(|i| waiting[*i] > 0) else {
        return "workflow: a cycle".to_owned();
    };
    let mut seen_at: Vec<Option<usize>> = vec![None; lines.len()];
    let mut path = Vec::new();
    let mut cur = start;
    let looped = loop {
        if let Some(at) = seen_at[cur] {
            break &path[at..];
        }
        seen_at[cur] = Some(path.len());
        path.push(cur);
        match lines[cur].parents.iter().find(|p| waiting[**p] > 0) {
            Some(p) => cur = *p,
            None => return "workflow: a cycle".to_owned(),
        }
    };
    // Start the loop at its first line in the file.
    let first = (0..looped.len()).min_by_key(|k| looped[*k]).unwrap_or(0);
    let mut names: Vec<String> = looped[first..]
        .iter()
        .chain(&looped[..first])
        .map(|i| ref_name(&lines[*i]))
        .collect();
    let len = names.len();
    let back = names.first().cloned().unwrap_or_default();
    if len > CYCLE_SHOWN {
        names.truncate(CYCLE_SHOWN);
        names.push(format!("… ({} more)", len - CYCLE_SHOWN));
    }
    names.push(back);
    format!(
        "workflow: a cycle: {} (each waits for the next)",
        names.join(" -> ")
    )
}

/// A line's ref as a cycle's message shows it: bare when plain, else quoted; a line in a
/// cycle always has one (something waits for it).
fn ref_name(l: &Line) -> String {
    match l.reference.as_deref() {
        Some(r)
            if r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:@/-".contains(&b)) =>
        {
            r.to_owned()
        }
        Some(r) => quoted(r),
        None => format!("line {}", l.number),
    }
}

/// A text as a JSON string.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// A line's fields in their order, each value as written.
struct Fields(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object (one job)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(V)
    }
}

/// A serde_json error without its position in the line, with the column after it.
fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    let bare = text.strip_suffix(&at).unwrap_or(&text);
    let what = match e.classify() {
        serde_json::error::Category::Data => String::new(),
        _ => "not valid JSON: ".to_owned(),
    };
    if e.column() > 0 {
        format!("{what}{bare} (column {})", e.column())
    } else {
        format!("{what}{bare}")
    }
}

fn value<T: serde::de::DeserializeOwned>(raw: &RawValue) -> Option<T> {
    serde_json::from_str(raw.get()).ok()
}

/// The fields a line takes.
const FIELDS: &str =
    "ref, after, kind, payload, queue, priority, max_attempts, delay, run_at and key";

fn parse_line(number: usize, line: &str, d: &Defaults<'_>) -> Result<Line, String> {
    let Fields(fields) = serde_json::from_str(line).map_err(|e| json_error(&e))?;
    let mut seen: Vec<&str> = Vec::with_capacity(fields.len());
    let mut reference = None;
    let mut after_refs = Vec::new();
    let mut existing = Vec::new();
    let mut kind = None;
    let mut payload = None;
    let mut queue = None;
    let mut priority = None;
    let mut max_attempts = None;
    let mut delay = None;
    let mut run_at = None;
    let mut key = None;
    for (name, raw) in &fields {
        if seen.contains(&name.as_str()) {
            return Err(format!("field {} is given twice", quoted(name)));
        }
        seen.push(name);
        match name.as_str() {
            "ref" => {
                let r: String = value(raw)
                    .filter(|r: &String| !r.is_empty() && r.len() <= MAX_REF_BYTES)
                    .ok_or_else(|| {
                        format!("\"ref\" must be a string of 1 to {MAX_REF_BYTES} bytes")
                    })?;
                reference = Some(r);
            }
            "after" => {
                let items: Vec<serde_json::Value> = value(raw).ok_or_else(|| {
                    "\"after\" must be an array of refs (strings) and job ids (positive whole numbers)"
                        .to_owned()
                })?;
                for item in items {
                    match &item {
                        serde_json::Value::String(r) => after_refs.push(r.clone()),
                        serde_json::Value::Number(n) if n.as_i64().is_some_and(|i| i > 0) => {
                            existing.extend(n.as_i64());
                        }
                        other => {
                            return Err(format!(
                                "\"after\" holds {other}, which is neither a ref (a string) nor a job id (a positive whole number)"
                            ))
                        }
                    }
                }
            }
            "kind" => kind = Some(value::<String>(raw).ok_or("\"kind\" must be a string")?),
            "payload" => payload = Some(raw.get().to_owned()),
            "queue" => queue = Some(value::<String>(raw).ok_or("\"queue\" must be a string")?),
            "priority" => {
                priority = Some(value::<i16>(raw).ok_or(
                    "\"priority\" must be a whole number from -32768 to 32767 (lower runs first)",
                )?)
            }
            "max_attempts" => {
                max_attempts = Some(
                    value::<i32>(raw)
                        .ok_or("\"max_attempts\" must be a whole number from 1 to 10000")?,
                )
            }
            "delay" => delay = Some(parse_delay(raw)?),
            "run_at" => {
                let s: String = value(raw)
                    .ok_or("\"run_at\" must be an RFC 3339 time, e.g. \"2030-01-01T09:00:00Z\"")?;
                run_at = Some(
                    crate::enqueue::parse_rfc3339(&s).map_err(|e| format!("\"run_at\": {e}"))?,
                );
            }
            "key" => key = Some(value::<String>(raw).ok_or("\"key\" must be a string")?),
            other => {
                return Err(format!(
                    "unknown field {}; a line takes {FIELDS}",
                    quoted(other)
                ))
            }
        }
    }
    if delay.is_some() && run_at.is_some() {
        return Err("give \"delay\" or \"run_at\", not both".to_owned());
    }
    let mut job = NewJob::from_json(
        kind.as_deref().unwrap_or(d.kind),
        payload.unwrap_or_else(|| "{}".to_owned()),
    )
    .queue(queue.as_deref().unwrap_or(d.queue))
    .priority(priority.unwrap_or(d.priority))
    .max_attempts(max_attempts.unwrap_or(d.max_attempts));
    match (delay, run_at) {
        (Some(t), _) => job = job.delay(t),
        (None, Some(t)) => job = job.run_at(t),
        (None, None) => {
            if let Some(t) = d.delay {
                job = job.delay(t);
            }
            if let Some(t) = d.run_at {
                job = job.run_at(t);
            }
        }
    }
    if let Some(k) = key.as_deref().or(d.key) {
        job = job.key(k);
    }
    existing.sort_unstable();
    existing.dedup();
    if !existing.is_empty() {
        job = job.after(existing.iter().map(|i| JobId(*i)));
    }
    Ok(Line {
        number,
        reference,
        job,
        after_refs,
        parents: Vec::new(),
        existing,
    })
}

/// `"delay"`: a duration like `"30s"`, or a number of seconds.
fn parse_delay(raw: &RawValue) -> Result<Duration, String> {
    const FORM: &str =
        "\"delay\" must be a duration like \"30s\" or \"5m\", or a number of seconds";
    match value::<serde_json::Value>(raw) {
        Some(serde_json::Value::String(s)) => {
            parse_duration(&s).map_err(|e| format!("\"delay\": {e}"))
        }
        Some(serde_json::Value::Number(n)) => n
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s <= MAX_DURATION.as_secs_f64())
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{FORM} (0 to 36500 days)")),
        _ => Err(FORM.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const D: Defaults<'static> = Defaults {
        kind: "default",
        queue: "default",
        priority: 0,
        max_attempts: 5,
        delay: None,
        run_at: None,
        key: None,
    };

    fn plan(text: &str) -> Result<Plan, String> {
        Plan::parse(text.as_bytes(), &D)
    }

    /// The refs in the plan's topological order.
    fn sorted(p: &Plan) -> Vec<String> {
        p.order
            .iter()
            .map(|i| p.lines[*i].reference.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_diamond_in_any_order_is_sorted_parents_first() {
        let p = plan(
            r#"{"ref":"d","after":["b","c"]}
               {"ref":"c","after":["a"]}

               {"ref":"b","after":["a", "a"]}
               {"ref":"a","kind":"k","after":[7]}"#,
        )
        .unwrap();
        let order = sorted(&p);
        let at = |r: &str| order.iter().position(|x| x == r).unwrap();
        assert_eq!(at("a"), 0);
        assert!(at("b") < at("d") && at("c") < at("d"));
        let lines: Vec<usize> = p.placed().map(|l| l.number).collect();
        assert_eq!(
            lines,
            [1, 2, 4, 5],
            "blank lines skipped, numbered as in the file"
        );
        assert_eq!(p.line_waiting_for(7), Some(5));
        let (flow, index) = p.workflow().unwrap();
        assert_eq!(flow.len(), 4);
        // Line 5 ("a") is the workflow's first job.
        assert_eq!(index[3], 0);
        assert_eq!(p.line_of_step(0), Some(5));
    }

    #[test]
    fn cycles_are_refused_naming_their_refs() {
        let e = plan(
            "{\"ref\":\"a\",\"after\":[\"b\"]}\n{\"ref\":\"b\",\"after\":[\"a\"]}\n{\"ref\":\"c\"}",
        )
        .err()
        .unwrap();
        assert_eq!(
            e,
            "workflow: a cycle: a -> b -> a (each waits for the next)"
        );
        let e = plan(r#"{"ref":"self","after":["self"]}"#).err().unwrap();
        assert_eq!(
            e,
            "workflow: a cycle: self -> self (each waits for the next)"
        );
        // A cycle behind a line that merely waits for it: the loop alone is named.
        let e = plan(
            "{\"ref\":\"x\",\"after\":[\"y\"]}\n{\"ref\":\"y\",\"after\":[\"z\"]}\n{\"ref\":\"z\",\"after\":[\"w\"]}\n{\"ref\":\"w\",\"after\":[\"y\"]}",
        )
        .err()
        .unwrap();
        assert_eq!(
            e,
            "workflow: a cycle: y -> z -> w -> y (each waits for the next)"
        );
        // A long one is shortened.
        let n = 50;
        let text: Vec<String> = (0..n)
            .map(|i| format!("{{\"ref\":\"r{i}\",\"after\":[\"r{}\"]}}", (i + 1) % n))
            .collect();
        let e = plan(&text.join("\n")).err().unwrap();
        assert!(e.starts_with("workflow: a cycle: r0 -> r1 -> "), "{e}");
        assert!(e.contains("… (40 more) -> r0 "), "{e}");
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (text, needle) in [
            (
                "{}\n{\"ref\":\"a\",\"after\":[\"x\"]}",
                "line 2: after \"x\": no job has that ref",
            ),
            (
                "{\"ref\":\"a\"}\n\n{\"ref\":\"a\"}",
                "line 3: ref \"a\" is already used on line 1",
            ),
            (
                "{}\n{nope",
                "line 2: not valid JSON: key must be a string (column 2)",
            ),
            (
                "[1]",
                "line 1: invalid type: sequence, expected a JSON object (one job)",
            ),
            (
                "{\"knd\":\"x\"}",
                "line 1: unknown field \"knd\"; a line takes ref, after",
            ),
            (
                "{\"kind\":\"a\",\"kind\":\"b\"}",
                "line 1: field \"kind\" is given twice",
            ),
            (
                "{\"after\":[true]}",
                "\"after\" holds true, which is neither a ref",
            ),
            ("{\"after\":[0]}", "\"after\" holds 0, which is neither"),
            ("{\"after\":\"a\"}", "\"after\" must be an array"),
            (
                "{\"ref\":\"\"}",
                "\"ref\" must be a string of 1 to 256 bytes",
            ),
            (
                "{\"priority\":\"high\"}",
                "\"priority\" must be a whole number",
            ),
            (
                "{\"delay\":\"soon\"}",
                "line 1: \"delay\": \"soon\" is not a duration",
            ),
            (
                "{\"delay\":\"1s\",\"run_at\":\"2030-01-01T00:00:00Z\"}",
                "not both",
            ),
            (
                "{\"run_at\":\"tomorrow\"}",
                "\"run_at\": \"tomorrow\" is not an RFC 3339 time",
            ),
            ("\n  \n", "the workflow holds no job lines"),
        ] {
            let e = plan(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} was accepted"));
            assert!(e.contains(needle), "{text:?}: {e:?} lacks {needle:?}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        // The negative control: the same shapes, written right, pass.
        plan("{}\n{\"ref\":\"a\",\"after\":[1, 2],\"delay\":5,\"priority\":-3,\"payload\":null}")
            .unwrap();
    }

    #[test]
    fn ten_thousand_lines_in_reverse_order_sort_fast() {
        let n = 10_000;
        let text: Vec<String> = (0..n)
            .rev()
            .map(|i| {
                if i == 0 {
                    "{\"ref\":\"j0\"}".to_owned()
                } else {
                    format!(
                        "{{\"ref\":\"j{i}\",\"after\":[\"j{}\"],\"payload\":{{\"i\":{i}}}}}",
                        i - 1
                    )
                }
            })
            .collect();
        let t = std::time::Instant::now();
        let p = plan(&text.join("\n")).unwrap();
        let (flow, _) = p.workflow().unwrap();
        assert_eq!(flow.len(), n);
        assert_eq!(sorted(&p)[0], "j0");
        assert_eq!(sorted(&p)[n - 1], format!("j{}", n - 1));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
}
