//! A server with `--processes N` (`--fleet N`, target `unix:PATH` of its `PATH.0 .. PATH.{N-1}`):
//! the client finds every process socket; unary and multiplexed calls succeed before, while and
//! after one process is killed (the test kills it when asked, and the parent restarts it), and
//! the restarted process gets calls again (the test reads that from the server's log).

use std::time::Duration;

use serde_json::json;
use sidecar_client::v1::TokenizeRequest;
use sidecar_client::Client;

use crate::record::{Case, Recorder};

/// Calls per client per phase.
const CALLS: usize = 24;

fn ask(rec: &mut Recorder, event: &str) {
    rec.emit(&json!({"event": event}));
    let mut answer = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut answer);
}

async fn phase(rec: &mut Recorder, clients: &[(&'static str, &Client)], model: &str, name: &str) {
    for i in 0..CALLS {
        for (carrier, client) in clients {
            rec.carrier = carrier;
            let request = TokenizeRequest {
                model: model.into(),
                texts: vec![format!("{name} call {i}: one process per core")],
                ..Default::default()
            };
            let case = Case::ok(format!("fleet {name} {carrier} {i}"), "Tokenize");
            rec.unary(case, request, |r| client.tokenize(r)).await;
        }
        // Spread over time, so a skipped process gets its background health checks.
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    rec.carrier = "unary";
}

pub async fn run(
    rec: &mut Recorder,
    target: &str,
    processes: usize,
) -> Result<(), sidecar_client::Error> {
    let unary = Client::connect(target).await?;
    let multiplexed = Client::builder(target)
        .multiplex(true)
        .streams(1)
        .connect()
        .await?;
    rec.check(
        "fleet: one channel per process",
        unary.processes() == processes,
        || {
            format!(
                "found {} processes, expected {processes}",
                unary.processes()
            )
        },
    );
    rec.check(
        "fleet: one pool per process",
        multiplexed.processes() == processes,
        || {
            format!(
                "found {} processes, expected {processes}",
                multiplexed.processes()
            )
        },
    );
    let model = unary.list_models().await?.models[0].name.clone();
    let clients = [("unary", &unary), ("multiplex", &multiplexed)];
    phase(rec, &clients, &model, "before").await;
    ask(rec, "kill-process");
    phase(rec, &clients, &model, "one-down").await;
    ask(rec, "wait-restarted");
    phase(rec, &clients, &model, "after").await;
    Ok(())
}
