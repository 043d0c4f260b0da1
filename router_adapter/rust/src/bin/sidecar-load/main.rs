//! Load generator: N concurrent clients for a fixed time against the sidecar, the floor server
//! (grpc.aio answering canned bytes) and vllm-rs, in interleaved rounds; one JSON line per run.
//!
//! ```text
//! sidecar-load SPEC.json > results.jsonl
//! ```
//! The spec (see `bench/rust_client.py`, which writes it and reads the results) lists the targets,
//! the workloads with their distinct inputs, `seconds`, `warmup_seconds`, `rounds` and `clients`.
//! Each round visits every workload, and for each every target (in an order that rotates per
//! round) at every client count, so slow drift of the machine spreads over all of them. Every
//! client sends one request at a time: on its own connection (unary gRPC, HTTP), or through one
//! `Client` shared by all clients of a target whose `mode` is `multiplex` (a pool of `streams`
//! Multiplex streams on one connection). Before timing, the token ids of
//! every target are compared with the first target's on the first inputs.

mod conn;
mod drive;
mod spec;

use std::collections::HashMap;
use std::process::ExitCode;

use conn::Conn;
use serde_json::json;
use spec::Spec;

type Pools = HashMap<String, Vec<Conn>>;

async fn pools(spec: &Spec) -> Result<Pools, String> {
    let most = spec.clients.iter().copied().max().unwrap_or(1);
    let mut pools = HashMap::new();
    for target in &spec.targets {
        pools.insert(target.name.clone(), Conn::open_many(target, most).await?);
    }
    Ok(pools)
}

/// Token ids of the first inputs from every target, against the first target's.
async fn agreement(spec: &Spec, pools: &mut Pools) -> Result<(), String> {
    for workload in &spec.workloads {
        for index in 0..workload.len().min(3) {
            let mut reference: Option<(String, Vec<u32>)> = None;
            for target in &spec.targets {
                let ids = pools.get_mut(&target.name).expect("pool")[0]
                    .ids(workload, index)
                    .await;
                let ids = ids.map_err(|e| format!("{} on {}: {e}", workload.name, target.name))?;
                match &reference {
                    None => reference = Some((target.name.clone(), ids)),
                    Some((name, expected)) => {
                        let same = *expected == ids;
                        println!(
                            "{}",
                            json!({"check": "ids", "workload": workload.name, "input": index, "target": target.name,
                                               "reference": name, "same": same, "tokens": ids.len()})
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

async fn run(spec: Spec) -> Result<(), String> {
    let mut pools = pools(&spec).await?;
    agreement(&spec, &mut pools).await?;
    for round in 0..spec.rounds {
        for workload in &spec.workloads {
            for offset in 0..spec.targets.len() {
                let target = &spec.targets[(round + offset) % spec.targets.len()];
                for &clients in &spec.clients {
                    let pool = pools.get_mut(&target.name).expect("pool");
                    let rest = pool.split_off(clients);
                    let (warm, _) = drive::drive(std::mem::take(pool), workload, spec.warmup).await;
                    let (mut used, run) = drive::drive(warm, workload, spec.seconds).await;
                    used.extend(rest);
                    *pool = used;
                    println!(
                        "{}",
                        json!({
                            "round": round, "workload": workload.name, "target": target.name, "clients": clients,
                            "requests": run.requests, "errors": run.errors, "first_error": run.first_error,
                            "seconds": run.elapsed.as_secs_f64(), "per_second": run.requests as f64 / run.elapsed.as_secs_f64(),
                            "p50_us": run.percentile(0.5).as_secs_f64() * 1e6, "p99_us": run.percentile(0.99).as_secs_f64() * 1e6,
                        })
                    );
                }
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: sidecar-load SPEC.json");
        return ExitCode::from(2);
    };
    let spec = std::fs::read(&path)
        .map_err(|e| format!("{path}: {e}"))
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| format!("{path}: {e}")))
        .and_then(|value| spec::parse(&value));
    let spec = match spec {
        Ok(spec) => spec,
        Err(message) => {
            eprintln!("sidecar-load: {message}");
            return ExitCode::from(2);
        }
    };
    // One thread for every client: the load generator never takes more than one of the cores the
    // servers under test need.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(spec)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sidecar-load: {message}");
            ExitCode::FAILURE
        }
    }
}
