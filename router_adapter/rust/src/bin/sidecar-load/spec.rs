//! The benchmark description (JSON, written by `bench/rust_client.py`): targets, workloads with
//! their distinct inputs, durations, client counts, rounds.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use sidecar_client::v1::{RenderRequest, TokenizeRequest};

/// Where requests go and how.
#[derive(Debug, Clone)]
pub enum TargetKind {
    /// The sidecar contract through `sidecar_client` (the sidecar itself, or the floor server):
    /// unary calls, each client on its own connection; or (`multiplex`) every client sharing one
    /// `Client` whose calls travel on a pool of `streams` Multiplex streams.
    Grpc {
        address: String,
        multiplex: bool,
        streams: usize,
    },
    /// vllm-rs's OpenAI-style render endpoints over keep-alive HTTP/1.1 (the model it serves is
    /// the spec's `http_model`).
    Http { address: String },
}

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub kind: TargetKind,
}

/// One workload's requests, built once before timing, in every target's form.
#[derive(Debug)]
pub struct Workload {
    pub name: String,
    pub tokenize: Vec<TokenizeRequest>,
    pub render: Vec<RenderRequest>,
    /// (path, JSON body) per input, for HTTP targets.
    pub http: Vec<(&'static str, Bytes)>,
}

impl Workload {
    pub fn len(&self) -> usize {
        self.tokenize.len().max(self.render.len())
    }
}

#[derive(Debug)]
pub struct Spec {
    pub seconds: Duration,
    pub warmup: Duration,
    pub rounds: usize,
    pub clients: Vec<usize>,
    pub targets: Vec<Target>,
    pub workloads: Vec<Arc<Workload>>,
}

fn field<'a>(value: &'a Value, key: &str) -> Result<&'a Value, String> {
    value
        .get(key)
        .ok_or_else(|| format!("spec: missing {key:?}"))
}

fn text(value: &Value, key: &str) -> Result<String, String> {
    field(value, key)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("spec: {key:?} must be a string"))
}

pub fn parse(spec: &Value) -> Result<Spec, String> {
    let number = |key: &str| {
        field(spec, key)?
            .as_f64()
            .ok_or_else(|| format!("spec: {key:?} must be a number"))
    };
    let clients = field(spec, "clients")?
        .as_array()
        .ok_or("spec: clients must be a list")?;
    let targets = field(spec, "targets")?
        .as_array()
        .ok_or("spec: targets must be a list")?;
    let workloads = field(spec, "workloads")?
        .as_array()
        .ok_or("spec: workloads must be a list")?;
    let http_model = spec
        .get("http_model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Ok(Spec {
        seconds: Duration::from_secs_f64(number("seconds")?),
        warmup: Duration::from_secs_f64(number("warmup_seconds")?),
        rounds: number("rounds")? as usize,
        clients: clients
            .iter()
            .filter_map(Value::as_u64)
            .map(|n| n as usize)
            .collect(),
        targets: targets.iter().map(parse_target).collect::<Result<_, _>>()?,
        workloads: workloads
            .iter()
            .map(|w| parse_workload(w, http_model).map(Arc::new))
            .collect::<Result<_, _>>()?,
    })
}

fn parse_target(target: &Value) -> Result<Target, String> {
    let address = text(target, "address")?;
    let kind = match text(target, "kind")?.as_str() {
        "grpc" => TargetKind::Grpc {
            address,
            multiplex: target.get("mode").and_then(Value::as_str) == Some("multiplex"),
            streams: target.get("streams").and_then(Value::as_u64).unwrap_or(2) as usize,
        },
        "http" => TargetKind::Http { address },
        other => return Err(format!("spec: unknown target kind {other:?}")),
    };
    Ok(Target {
        name: text(target, "name")?,
        kind,
    })
}

fn parse_workload(workload: &Value, http_model: &str) -> Result<Workload, String> {
    let model = text(workload, "model")?;
    let inputs = field(workload, "inputs")?
        .as_array()
        .ok_or("spec: inputs must be a list")?;
    let mut out = Workload {
        name: text(workload, "name")?,
        tokenize: vec![],
        render: vec![],
        http: vec![],
    };
    match text(workload, "rpc")?.as_str() {
        "tokenize" => {
            for input in inputs {
                let prompt = input.as_str().ok_or("spec: tokenize inputs are strings")?;
                out.tokenize.push(TokenizeRequest {
                    model: model.clone(),
                    texts: vec![prompt.into()],
                    add_special_tokens: Some(false),
                    ..Default::default()
                });
                let body =
                    serde_json::json!({"model": http_model, "prompt": prompt, "max_tokens": 1});
                out.http
                    .push(("/v1/completions/render", Bytes::from(body.to_string())));
            }
        }
        "render" => {
            for input in inputs {
                let messages = field(input, "messages")?;
                let tools = input.get("tools").map(Value::to_string).unwrap_or_default();
                // bypass_cache: every request tokenizes its whole prompt, as vllm-rs does.
                out.render.push(RenderRequest {
                    model: model.clone(),
                    messages_json: messages.to_string(),
                    tools_json: tools,
                    bypass_cache: true,
                    ..Default::default()
                });
                let mut body = input.clone();
                body["model"] = Value::String(http_model.into());
                out.http
                    .push(("/v1/chat/completions/render", Bytes::from(body.to_string())));
            }
        }
        other => return Err(format!("spec: unknown rpc {other:?}")),
    }
    Ok(out)
}
