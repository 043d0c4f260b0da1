//! Health-aware reconnect: the server is stopped and started again at the same address (by the
//! test, asked through stdout and answered on stdin); calls fail with UNAVAILABLE while it is
//! down and succeed on a new, health-checked channel once it is back.

use std::io::BufRead;

use serde_json::json;
use sidecar_client::v1::TokenizeRequest;
use sidecar_client::{Client, Code};

use crate::record::{Case, Recorder};

fn ask(rec: &mut Recorder, event: &str) {
    rec.emit(&json!({"event": event}));
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
}

pub async fn run(rec: &mut Recorder, client: &Client, model: &str) {
    let request = || TokenizeRequest {
        model: model.into(),
        texts: vec!["after a restart".into()],
        ..Default::default()
    };
    rec.unary(
        Case::ok("reconnect: before the restart", "Tokenize"),
        request(),
        |r| client.tokenize(r),
    )
    .await;
    ask(rec, "stop-server");
    let case = Case::err("reconnect: server down", "Tokenize", Code::Unavailable).local_only();
    rec.unary(case, request(), |r| client.tokenize(r)).await;
    ask(rec, "start-server");
    let before = client.reconnects();
    rec.unary(
        Case::ok("reconnect: server back", "Tokenize"),
        request(),
        |r| client.tokenize(r),
    )
    .await;
    rec.check("reconnect", client.reconnects() > before, || {
        format!("reconnects {before} -> {}", client.reconnects())
    });
}
