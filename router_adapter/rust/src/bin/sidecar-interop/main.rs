//! Interop driver: exercises every RPC of a running sidecar (Preprocessor, KvRouter, Admin, health)
//! through `sidecar_client` (what a Rust router would write), checks each outcome (and the
//! `x-request-id` the server echoes), and prints every request and response as JSON lines so
//! `tests/client/test_rust_client.py` can replay them with the Python client and compare.
//!
//! ```text
//! sidecar-interop --target unix:/tmp/s.sock [--kv-target HOST:PORT --kv-text TEXT] [--reconnect]
//! ```
//! `--target` must run with `--max-message-mb 1 --parse-max-requests 4` (the RESOURCE_EXHAUSTED
//! cases rely on them), with `--enable-admin` (the Admin cases) and without `--kv-events` (the
//! FAILED_PRECONDITION case of KvRouter);
//! `--kv-target` with `--kv-events` and events for `--kv-text` already applied. `--reconnect`
//! then asks on stdout for the server to be stopped and restarted (answered by a line on stdin)
//! and checks that calls fail with UNAVAILABLE while it is down and succeed once it is back.
//!
//! `sidecar-interop --fleet N --target unix:PATH` runs only the scenario of a server with
//! `--processes N` (see `fleet.rs`).

mod admin;
mod fleet;
mod kv;
mod parse;
mod preprocessor;
mod reconnect;
mod record;
mod request_id;

use std::process::ExitCode;

use record::Recorder;
use sidecar_client::Client;

#[derive(Debug, Default)]
struct Args {
    target: String,
    kv_target: Option<String>,
    kv_text: String,
    reconnect: bool,
    fleet: Option<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--target" => args.target = value()?,
            "--kv-target" => args.kv_target = Some(value()?),
            "--kv-text" => args.kv_text = value()?,
            "--reconnect" => args.reconnect = true,
            "--fleet" => args.fleet = Some(value()?.parse().map_err(|e| format!("--fleet: {e}"))?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.target.is_empty() {
        return Err("--target is required".into());
    }
    Ok(args)
}

async fn run(args: Args) -> Result<Recorder, sidecar_client::Error> {
    let mut recorder = Recorder {
        target: "main",
        carrier: "unary",
        ..Recorder::default()
    };
    if let Some(processes) = args.fleet {
        fleet::run(&mut recorder, &args.target, processes).await?;
        return Ok(recorder);
    }
    let client = Client::connect(&args.target).await?;
    let model = preprocessor::run(&mut recorder, &client).await;
    admin::run(&mut recorder, &client).await;
    request_id::run(&mut recorder, &client, &args.target, &model).await;
    multiplexed(&mut recorder, &args.target).await?;
    parse::run(&mut recorder, &client, &model).await?;
    if let Some(kv_target) = &args.kv_target {
        let kv_client = Client::connect(kv_target).await?;
        recorder.target = "kv";
        kv::run(&mut recorder, &kv_client, &model, &args.kv_text).await;
        recorder.target = "main";
    }
    if args.reconnect {
        reconnect::run(&mut recorder, &client, &model).await;
    }
    Ok(recorder)
}

/// The Tokenize, Detokenize and Render cases once more through a client that carries them on a
/// pool of Multiplex streams: the replay compares each with the unary answer. The client is
/// dropped at the end, so its streams close before a restart.
async fn multiplexed(rec: &mut Recorder, target: &str) -> Result<(), sidecar_client::Error> {
    let client = Client::builder(target).multiplex(true).streams(2).build()?;
    rec.carrier = "multiplex";
    let model = preprocessor::run(rec, &client).await;
    preprocessor::concurrent(rec, &client, &model).await;
    rec.carrier = "unary";
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("sidecar-interop: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(recorder) if recorder.failures.is_empty() => {
            eprintln!("sidecar-interop: {} cases passed", recorder.cases);
            ExitCode::SUCCESS
        }
        Ok(recorder) => {
            eprintln!(
                "sidecar-interop: {} of {} cases failed",
                recorder.failures.len(),
                recorder.cases
            );
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("sidecar-interop: {error}");
            ExitCode::FAILURE
        }
    }
}
