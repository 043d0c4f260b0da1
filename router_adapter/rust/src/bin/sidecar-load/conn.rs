//! One benchmark client's connection: a `sidecar_client::Client` with its own channel, or a
//! keep-alive HTTP/1.1 connection to vllm-rs.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sidecar_client::Client;
use tokio::net::TcpStream;

use crate::spec::{Target, TargetKind, Workload};

pub enum Conn {
    Grpc(Client),
    Http {
        sender: SendRequest<Full<Bytes>>,
        host: String,
    },
}

impl Conn {
    /// `count` connections to `target`: unary gRPC and HTTP clients get one each; multiplexed
    /// gRPC clients share one `Client` (one connection, one pool of streams), as the tasks of a
    /// router would.
    pub async fn open_many(target: &Target, count: usize) -> Result<Vec<Conn>, String> {
        if let TargetKind::Grpc {
            address,
            multiplex: true,
            streams,
        } = &target.kind
        {
            let client = Client::builder(address.as_str())
                .timeout(None)
                .multiplex(true)
                .streams(*streams)
                .build()
                .map_err(|e| e.to_string())?;
            return Ok((0..count).map(|_| Conn::Grpc(client.clone())).collect());
        }
        let mut conns = Vec::with_capacity(count);
        for _ in 0..count {
            conns.push(Conn::open(target).await?);
        }
        Ok(conns)
    }

    async fn open(target: &Target) -> Result<Conn, String> {
        match &target.kind {
            TargetKind::Grpc { address, .. } => {
                // Own channel (own connection) per client, no deadline: the benchmark measures the call.
                let client = Client::builder(address.as_str())
                    .timeout(None)
                    .multiplex(false)
                    .build()
                    .map_err(|e| e.to_string())?;
                Ok(Conn::Grpc(client))
            }
            TargetKind::Http { address, .. } => {
                let stream = TcpStream::connect(address)
                    .await
                    .map_err(|e| format!("{address}: {e}"))?;
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                Ok(Conn::Http {
                    sender,
                    host: address.clone(),
                })
            }
        }
    }

    /// Sends input `index` of `workload` and reads the whole answer.
    pub async fn call(&mut self, workload: &Arc<Workload>, index: usize) -> Result<(), String> {
        match self {
            Conn::Grpc(client) => grpc_ids(client, workload, index).await.map(drop),
            Conn::Http { sender, host } => {
                let (path, body) = &workload.http[index];
                http_post(sender, host, path, body.clone()).await.map(drop)
            }
        }
    }

    /// The token ids of input `index` (to check every target computes the same thing).
    pub async fn ids(
        &mut self,
        workload: &Arc<Workload>,
        index: usize,
    ) -> Result<Vec<u32>, String> {
        match self {
            Conn::Grpc(client) => grpc_ids(client, workload, index).await,
            Conn::Http { sender, host } => {
                let (path, body) = &workload.http[index];
                let bytes = http_post(sender, host, path, body.clone()).await?;
                let value: serde_json::Value =
                    serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
                let item = if value.is_array() { &value[0] } else { &value };
                let ids = item["token_ids"]
                    .as_array()
                    .ok_or("no token_ids in the answer")?;
                Ok(ids
                    .iter()
                    .filter_map(|v| v.as_u64().map(|n| n as u32))
                    .collect())
            }
        }
    }
}

async fn grpc_ids(client: &Client, workload: &Workload, index: usize) -> Result<Vec<u32>, String> {
    if let Some(request) = workload.tokenize.get(index) {
        let response = client
            .tokenize(request.clone())
            .await
            .map_err(|e| e.to_string())?;
        return Ok(response
            .encodings
            .into_iter()
            .next()
            .map(|e| e.token_ids)
            .unwrap_or_default());
    }
    let response = client
        .render(workload.render[index].clone())
        .await
        .map_err(|e| e.to_string())?;
    Ok(response.token_ids)
}

async fn http_post(
    sender: &mut SendRequest<Full<Bytes>>,
    host: &str,
    path: &str,
    body: Bytes,
) -> Result<Bytes, String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = hyper::Request::post(path)
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ));
    }
    Ok(bytes)
}
