//! Runs N clients, each one request at a time on its own connection, for a fixed time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::Conn;
use crate::spec::Workload;

/// What one timed run measured.
#[derive(Debug, Default)]
pub struct Run {
    pub requests: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    /// Per-request latencies, sorted.
    pub latencies: Vec<Duration>,
}

impl Run {
    pub fn percentile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let at = ((self.latencies.len() as f64 * q) as usize).min(self.latencies.len() - 1);
        self.latencies[at]
    }
}

/// Drives `conns.len()` clients for `seconds`; each takes inputs in turn (client i starts at input
/// i, so concurrent clients send different inputs). The connections come back for the next run.
pub async fn drive(
    conns: Vec<Conn>,
    workload: &Arc<Workload>,
    seconds: Duration,
) -> (Vec<Conn>, Run) {
    let clients = conns.len();
    let started = Instant::now();
    let end = started + seconds;
    let mut tasks = tokio::task::JoinSet::new();
    for (client, mut conn) in conns.into_iter().enumerate() {
        let workload = workload.clone();
        tasks.spawn(async move {
            let mut run = Run::default();
            let mut index = client;
            while Instant::now() < end {
                let sent = Instant::now();
                match conn.call(&workload, index % workload.len()).await {
                    Ok(_) => run.latencies.push(sent.elapsed()),
                    Err(error) => {
                        run.errors += 1;
                        run.first_error.get_or_insert(error);
                    }
                }
                index += clients;
            }
            (client, conn, run)
        });
    }
    let mut total = Run::default();
    let mut returned: Vec<(usize, Conn)> = Vec::with_capacity(clients);
    while let Some(joined) = tasks.join_next().await {
        let (client, conn, run) = joined.expect("client task panicked");
        total.errors += run.errors;
        total.first_error = total.first_error.or(run.first_error);
        total.latencies.extend(run.latencies);
        returned.push((client, conn));
    }
    total.elapsed = started.elapsed();
    total.requests = total.latencies.len();
    total.latencies.sort_unstable();
    returned.sort_by_key(|(client, _)| *client);
    (returned.into_iter().map(|(_, conn)| conn).collect(), total)
}
