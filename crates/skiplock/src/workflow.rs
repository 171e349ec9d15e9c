//! Workflows: jobs enqueued together with the dependencies among them, in one statement and
//! one transaction (the SQL function `enqueue_workflow()` of migration 13).

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::job::{NewJob, Schedule};

/// A job of a [`Workflow`], to name it as another job's parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Step(usize);

impl Step {
    /// Its position in the workflow (from 0): the index of its id in what
    /// [`Client::enqueue_workflow`](crate::Client::enqueue_workflow) returns.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Jobs and the dependencies among them, enqueued in one call and one transaction: fan-out
/// (many jobs after one) and fan-in (one job after many) in any shape without a cycle.
///
/// A job may wait for jobs added before it ([`Workflow::add_after`]) and for jobs that
/// already exist ([`NewJob::after`]); so a cycle cannot be built.
///
/// ```
/// use skiplock::{NewJob, Workflow};
/// use serde_json::json;
///
/// let mut flow = Workflow::new();
/// let fetch = flow.add(NewJob::new("fetch", &json!({ "url": "https://example.com/a.png" })));
/// let small = flow.add_after(NewJob::new("resize", &json!({ "width": 64 })), &[fetch]);
/// let large = flow.add_after(NewJob::new("resize", &json!({ "width": 1024 })), &[fetch]);
/// flow.add_after(NewJob::new("publish", &json!({})), &[small, large]);
/// // client.enqueue_workflow(&flow).await? returns the four ids, in this order.
/// ```
#[derive(Debug, Clone, Default)]
pub struct Workflow {
    jobs: Vec<(NewJob, Vec<Step>)>,
}

/// The most jobs one workflow may hold (what `enqueue_workflow()` accepts).
pub const MAX_WORKFLOW_JOBS: usize = 100_000;

impl Workflow {
    /// The most jobs one workflow may hold.
    pub const MAX_JOBS: usize = MAX_WORKFLOW_JOBS;
}

impl Workflow {
    /// An empty workflow.
    pub fn new() -> Self {
        Workflow::default()
    }

    /// Adds a job that waits for no other job of the workflow (it may still wait for existing
    /// jobs, [`NewJob::after`]).
    pub fn add(&mut self, job: NewJob) -> Step {
        self.add_after(job, &[])
    }

    /// Adds a job that runs once each of `parents` (jobs added before it) is done.
    pub fn add_after(&mut self, job: NewJob, parents: &[Step]) -> Step {
        let step = Step(self.jobs.len());
        self.jobs.push((job, parents.to_vec()));
        step
    }

    /// How many jobs it holds.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether it holds no job.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Validates every job and renders the workflow as the JSON array that
    /// `enqueue_workflow()` takes. The first refusal refuses the whole workflow
    /// ([`Error::InvalidBatchItem`] names the job, counting from 0).
    pub(crate) fn encode(&self, max_payload_bytes: usize) -> Result<String> {
        if self.jobs.len() > MAX_WORKFLOW_JOBS {
            return Err(Error::invalid(
                "workflow",
                format!(
                    "{} jobs; at most {MAX_WORKFLOW_JOBS} in one call",
                    self.jobs.len()
                ),
            ));
        }
        let mut referenced = vec![false; self.jobs.len()];
        for (index, (_, parents)) in self.jobs.iter().enumerate() {
            for p in parents {
                if p.0 >= index {
                    return Err(item(
                        index,
                        Error::invalid(
                            "workflow",
                            format!(
                                "job {index} waits for step {}, which is not added before it",
                                p.0
                            ),
                        ),
                    ));
                }
                referenced[p.0] = true;
            }
        }
        let mut out = Vec::with_capacity(self.jobs.len());
        for (index, (job, parents)) in self.jobs.iter().enumerate() {
            out.push(encode_one(
                index,
                job,
                parents,
                referenced[index],
                max_payload_bytes,
            )?);
        }
        serde_json::to_string(&Value::Array(out))
            .map_err(|e| Error::invalid("workflow", format!("it could not be serialized: {e}")))
    }
}

fn item(index: usize, e: Error) -> Error {
    Error::InvalidBatchItem {
        index,
        source: Box::new(e),
    }
}

fn encode_one(
    index: usize,
    job: &NewJob,
    parents: &[Step],
    referenced: bool,
    max_payload_bytes: usize,
) -> Result<Value> {
    if job.unique.is_some() {
        return Err(item(
            index,
            Error::invalid(
                "job",
                "it has a uniqueness rule; a job of a workflow cannot be unique",
            ),
        ));
    }
    if job.sequence.is_some() {
        return Err(item(
            index,
            Error::invalid(
                "job",
                "it belongs to a sequence; a job of a workflow cannot (order it with the workflow instead)",
            ),
        ));
    }
    let e = job
        .encode_base(max_payload_bytes)
        .map_err(|e| item(index, e))?;
    let payload: Value = serde_json::from_str(&e.payload)
        .map_err(|err| item(index, Error::invalid("payload", err.to_string())))?;
    let mut o = Map::new();
    if referenced {
        o.insert("ref".into(), Value::from(index.to_string()));
    }
    o.insert("kind".into(), Value::from(e.kind));
    o.insert("payload".into(), payload);
    o.insert("queue".into(), Value::from(e.queue));
    o.insert("priority".into(), Value::from(e.priority));
    o.insert("max_attempts".into(), Value::from(e.max_attempts));
    match job.schedule {
        Schedule::Delay(_) => {
            // Seconds, as a number: PostgreSQL 13 cannot read an interval of more than
            // 2^31 microseconds written as text.
            o.insert("delay".into(), Value::from(e.delay_us as f64 / 1_000_000.0));
        }
        Schedule::At(_) => {
            // Seconds since the epoch, as enqueue_workflow() reads a number.
            let us = e.run_at_us.unwrap_or(0);
            o.insert("run_at".into(), Value::from(us as f64 / 1_000_000.0));
        }
    }
    if let Some(k) = e.key {
        o.insert("key".into(), Value::from(k));
    }
    let mut after: Vec<Value> = parents
        .iter()
        .map(|p| Value::from(p.0.to_string()))
        .collect();
    after.extend(e.after.unwrap_or_default().into_iter().map(Value::from));
    if !after.is_empty() {
        o.insert("after".into(), Value::Array(after));
    }
    Ok(Value::Object(o))
}
