//! `--metrics-addr ADDR` of `skiplock work` and `skiplock serve`: installs a Prometheus
//! recorder for the library's metrics (see `skiplock::metrics`) and serves them as
//! `GET /metrics` in Prometheus' text format on an address of its own, apart from the
//! dashboard's (no authentication: bind it where only the scraper reaches it).
//!
//! With it, the process also reads the database-derived gauges every
//! `--metrics-gauges-interval` (one process at a time across all of them: a worker only
//! after real work when its poll is off; `serve` on the bare timer).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::output::errln;
use crate::parse::optional_within;

/// Bucket bounds of the `_seconds` histograms: 1 ms to 1 hour.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];
/// Bucket bounds of the claim batch size.
const BATCH_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
];
/// How often the recorder drains its histograms' buffers between scrapes.
const UPKEEP: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub struct Every(Option<Duration>);

fn parse_every(s: &str) -> Result<Every, String> {
    // 100 ms to 1 day, or `off`.
    optional_within::<100, 86_400>(s).map(Every)
}

#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics as GET /metrics on this address (e.g. 127.0.0.1:9187; port
    /// 0 picks a free one, printed at start). No authentication.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// With --metrics-addr (and always for `serve`, whose charts draw the per-minute rollup
    /// the same round writes): how often the database-derived gauges (jobs per queue and
    /// state, oldest ready age, dead tuples, oldest transaction holding back vacuum) are
    /// read, by one process at a time, or `off`.
    #[arg(long, value_name = "D|off", value_parser = parse_every, default_value = "15s")]
    metrics_gauges_interval: Every,
}

impl MetricsArgs {
    /// The gauges interval, when metrics are served.
    pub fn gauges_interval(&self) -> Option<Duration> {
        self.metrics_addr.and(self.metrics_gauges_interval.0)
    }

    /// The gauges interval whether or not metrics are served (`off` turns it off): the
    /// dashboard's process runs the gauges service for the per-minute rollup its charts draw.
    pub fn rollup_interval(&self) -> Option<Duration> {
        self.metrics_gauges_interval.0
    }

    /// With --metrics-addr: installs the recorder and serves /metrics until the process
    /// ends. Returns once listening.
    pub async fn start(&self) -> anyhow::Result<()> {
        let Some(addr) = self.metrics_addr else {
            return Ok(());
        };
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full(skiplock::metrics::CLAIM_BATCH_SIZE.to_owned()),
                    BATCH_BUCKETS,
                )
            })
            .context("the metrics histograms' buckets")?
            .install_recorder()
            .context("could not install the metrics recorder")?;
        skiplock::metrics::describe();
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("could not listen on {addr} for metrics"))?;
        let local = listener.local_addr().context("the metrics address")?;
        errln!("metrics on http://{local}/metrics");
        let upkeep = handle.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(UPKEEP);
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        let app = axum::Router::new()
            .route("/metrics", axum::routing::get(render))
            .with_state(handle);
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the metrics endpoint stopped");
            }
        });
        Ok(())
    }
}

async fn render(
    axum::extract::State(handle): axum::extract::State<PrometheusHandle>,
) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
}
