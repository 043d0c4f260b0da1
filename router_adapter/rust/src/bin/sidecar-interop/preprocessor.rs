//! Every unary RPC of `sidecar.v1.Preprocessor` and the health service, successes and one error
//! of each kind.

use std::time::Duration;

use prost::Message;
use sidecar_client::health::ServingStatus;
use sidecar_client::v1::{
    BlockHashing, DetokenizeRequest, RenderRequest, ScoreRequest, TokenIds, TokenizeRequest,
    TruncationSide,
};
use sidecar_client::{Client, Code};

use crate::record::{Case, Recorder};

pub const TEXTS: [&str; 3] = [
    "Hello world 你好",
    "",
    "A longer line with émojis 😀 and\nnewlines\t tabs, digits 12345.",
];

const CHAT: &str = r#"[{"role":"system","content":"You are terse."},{"role":"user","content":"What is the weather in Paris?"}]"#;
const TOOLS: &str = r#"[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]"#;

/// Runs the cases; returns the model name they used (the server's first model).
pub async fn run(rec: &mut Recorder, client: &Client) -> String {
    health(rec, client).await;
    let models = rec
        .unary(
            Case::ok("list models", "ListModels"),
            sidecar_client::v1::ListModelsRequest {},
            |_| client.list_models(),
        )
        .await;
    let model = models
        .and_then(|m| m.models.first().map(|m| m.name.clone()))
        .unwrap_or_else(|| "qwen3".into());
    let parsers = rec
        .unary(
            Case::ok("list parsers", "ListParsers"),
            sidecar_client::v1::ListParsersRequest {},
            |_| client.list_parsers(),
        )
        .await;
    if let Some(parsers) = parsers {
        let kinds = |kind: &str| parsers.parsers.iter().filter(|p| p.kind == kind).count();
        rec.check(
            "list parsers",
            kinds("tool") > 0 && kinds("reasoning") > 0 && !parsers.engines.is_empty(),
            || {
                format!(
                    "{} parsers, engines {:?}",
                    parsers.parsers.len(),
                    parsers.engines
                )
            },
        );
    }
    tokenize_and_back(rec, client, &model).await;
    render(rec, client, &model).await;
    errors(rec, client, &model).await;
    model
}

async fn health(rec: &mut Recorder, client: &Client) {
    for service in ["", "sidecar.v1.Preprocessor", "no.such.Service"] {
        let expected = if service.starts_with("no.") {
            Code::NotFound
        } else {
            Code::Ok
        };
        let case = Case::err(format!("health {service:?}"), "Check", expected);
        let request = sidecar_client::health::HealthCheckRequest {
            service: service.into(),
        };
        let response = rec.unary(case, request, |r| check(client, r.service)).await;
        if let Some(response) = response {
            rec.check(
                "health",
                response.status == ServingStatus::Serving as i32,
                || format!("status {}", response.status),
            );
        }
    }
}

async fn check(
    client: &Client,
    service: String,
) -> Result<sidecar_client::health::HealthCheckResponse, sidecar_client::Error> {
    let status = client.health(&service).await?;
    Ok(sidecar_client::health::HealthCheckResponse {
        status: status as i32,
    })
}

async fn tokenize_and_back(rec: &mut Recorder, client: &Client, model: &str) {
    let texts: Vec<String> = TEXTS.iter().map(|t| t.to_string()).collect();
    let request = TokenizeRequest {
        model: model.into(),
        texts: texts.clone(),
        return_offsets: true,
        return_tokens: true,
        ..Default::default()
    };
    let Some(response) = rec
        .unary(
            Case::ok("tokenize: batch with offsets and token strings", "Tokenize"),
            request,
            |r| client.tokenize(r),
        )
        .await
    else {
        return;
    };
    let hashing = BlockHashing {
        algorithm: "vllm_sha256".into(),
        block_size: 4,
        seed: Some("0".into()),
        ..Default::default()
    };
    let request = TokenizeRequest {
        model: model.into(),
        texts: vec![TEXTS[2].repeat(3)],
        block_hashing: Some(hashing),
        ..Default::default()
    };
    rec.unary(
        Case::ok("tokenize: vLLM block hashes", "Tokenize"),
        request,
        |r| client.tokenize(r),
    )
    .await;
    let request = TokenizeRequest {
        model: model.into(),
        texts: vec![TEXTS[2].into()],
        max_length: 5,
        truncation_side: TruncationSide::Left as i32,
        add_special_tokens: Some(false),
        ..Default::default()
    };
    rec.unary(
        Case::ok("tokenize: truncated from the left", "Tokenize"),
        request,
        |r| client.tokenize(r),
    )
    .await;

    let sequences = response
        .encodings
        .iter()
        .map(|e| TokenIds {
            token_ids: e.token_ids.clone(),
        })
        .collect();
    let request = DetokenizeRequest {
        model: model.into(),
        sequences,
        skip_special_tokens: None,
    };
    if let Some(decoded) = rec
        .unary(
            Case::ok("detokenize: the ids back", "Detokenize"),
            request,
            |r| client.detokenize(r),
        )
        .await
    {
        rec.check("detokenize round trip", decoded.texts == texts, || {
            format!("{:?} != {texts:?}", decoded.texts)
        });
        rec.check(
            "fingerprint",
            decoded.fingerprint == response.fingerprint && !decoded.fingerprint.is_empty(),
            || "differs".into(),
        );
    }
}

async fn render(rec: &mut Recorder, client: &Client, model: &str) {
    let hashing = BlockHashing {
        algorithm: "sglang_sha256".into(),
        block_size: 8,
        ..Default::default()
    };
    let request = RenderRequest {
        model: model.into(),
        messages_json: CHAT.into(),
        tools_json: TOOLS.into(),
        return_text: true,
        return_offsets: true,
        block_hashing: Some(hashing),
        ..Default::default()
    };
    if let Some(response) = rec
        .unary(
            Case::ok("render: chat with tools, text, offsets, hashes", "Render"),
            request,
            |r| client.render(r),
        )
        .await
    {
        rec.check(
            "render text",
            response.text.contains("get_weather") && !response.token_ids.is_empty(),
            || response.text.clone(),
        );
    }
    let prefill =
        r#"[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello, I am"}]"#;
    let request = RenderRequest {
        model: model.into(),
        messages_json: prefill.into(),
        continue_final_message: true,
        return_text: true,
        chat_template_kwargs_json: r#"{"enable_thinking": false}"#.into(),
        ..Default::default()
    };
    if let Some(response) = rec
        .unary(
            Case::ok("render: continue the final message", "Render"),
            request,
            |r| client.render(r),
        )
        .await
    {
        rec.check(
            "continue_final_message",
            response.text.ends_with("Hello, I am"),
            || response.text.clone(),
        );
    }
}

async fn errors(rec: &mut Recorder, client: &Client, model: &str) {
    let tokenize = |texts: Vec<String>| TokenizeRequest {
        model: model.into(),
        texts,
        ..Default::default()
    };
    let request = TokenizeRequest {
        model: "no-such-model".into(),
        ..tokenize(vec!["x".into()])
    };
    rec.unary(
        Case::err("tokenize: unknown model", "Tokenize", Code::NotFound),
        request,
        |r| client.tokenize(r),
    )
    .await;
    let request = TokenizeRequest {
        block_hashing: Some(BlockHashing {
            algorithm: "md5".into(),
            block_size: 16,
            ..Default::default()
        }),
        ..tokenize(vec!["x".into()])
    };
    rec.unary(
        Case::err(
            "tokenize: unknown hash algorithm",
            "Tokenize",
            Code::InvalidArgument,
        ),
        request,
        |r| client.tokenize(r),
    )
    .await;
    let request = DetokenizeRequest {
        model: model.into(),
        sequences: vec![TokenIds {
            token_ids: vec![9707, u32::MAX],
        }],
        skip_special_tokens: None,
    };
    rec.unary(
        Case::err(
            "detokenize: id outside the vocabulary",
            "Detokenize",
            Code::InvalidArgument,
        ),
        request,
        |r| client.detokenize(r),
    )
    .await;
    let render = |messages: &str| RenderRequest {
        model: model.into(),
        messages_json: messages.into(),
        ..Default::default()
    };
    rec.unary(
        Case::err("render: messages not JSON", "Render", Code::InvalidArgument),
        render("[{"),
        |r| client.render(r),
    )
    .await;
    let request = RenderRequest {
        add_generation_prompt: Some(true),
        continue_final_message: true,
        ..render(CHAT)
    };
    rec.unary(
        Case::err(
            "render: generation prompt and continue",
            "Render",
            Code::InvalidArgument,
        ),
        request,
        |r| client.render(r),
    )
    .await;
    let request = RenderRequest {
        chat_template: Some("{{ messages[0].content }}".into()),
        ..render(CHAT)
    };
    rec.unary(
        Case::err(
            "render: request template not allowed",
            "Render",
            Code::FailedPrecondition,
        ),
        request,
        |r| client.render(r),
    )
    .await;
    let request = RenderRequest {
        chat_template: Some("no_such_template".into()),
        ..render(CHAT)
    };
    rec.unary(
        Case::err("render: unknown template name", "Render", Code::NotFound),
        request,
        |r| client.render(r),
    )
    .await;
    // The server runs with --max-message-mb 1.
    let request = tokenize(vec!["word ".repeat(300_000)]);
    rec.unary(
        Case::err(
            "tokenize: message over the server's limit",
            "Tokenize",
            Code::ResourceExhausted,
        ),
        request,
        |r| client.tokenize(r),
    )
    .await;
    let tiny = Duration::from_millis(1);
    let request = tokenize(vec!["many words ".repeat(80_000)]);
    let case = Case::err(
        "tokenize: 1 ms deadline",
        "Tokenize",
        Code::DeadlineExceeded,
    )
    .timeout(tiny);
    rec.unary(case, request, |r| async move {
        client.with_timeout(tiny).tokenize(r).await
    })
    .await;
    let request = ScoreRequest {
        model: model.into(),
        input: Some(sidecar_client::v1::score_request::Input::Text(
            "Hello".into(),
        )),
        ..Default::default()
    };
    rec.unary(
        Case::err(
            "score: server without --kv-events",
            "Score",
            Code::FailedPrecondition,
        ),
        request,
        |r| client.score(r),
    )
    .await;
}

/// Many calls in flight at once, every seventh for a model the server does not host: on a
/// multiplexed client they share stream messages, are answered out of order, and each error is
/// its call's own.
pub async fn concurrent(rec: &mut Recorder, client: &Client, model: &str) {
    let model_for = |i: usize| {
        if i % 7 == 3 {
            "no-such-model".to_string()
        } else {
            model.to_string()
        }
    };
    let tokenize: Vec<TokenizeRequest> = (0..40)
        .map(|i| TokenizeRequest {
            model: model_for(i),
            texts: vec![format!("Call {i}: {}", TEXTS[i % TEXTS.len()])],
            ..Default::default()
        })
        .collect();
    let render: Vec<RenderRequest> = (0..16)
        .map(|i| RenderRequest {
            model: model_for(i),
            messages_json: format!(r#"[{{"role":"user","content":"Question number {i}?"}}]"#),
            ..Default::default()
        })
        .collect();
    let tokenized = gather(client, tokenize, |c, r| async move { c.tokenize(r).await });
    let rendered = gather(client, render, |c, r| async move { c.render(r).await });
    let (tokenized, rendered) = (tokenized.await, rendered.await);
    for (i, (request, outcome)) in tokenized.into_iter().enumerate() {
        let case = Case::err(format!("concurrent tokenize {i}"), "Tokenize", expected(i));
        rec.record(case, &request.encode_to_vec(), outcome);
    }
    for (i, (request, outcome)) in rendered.into_iter().enumerate() {
        let case = Case::err(format!("concurrent render {i}"), "Render", expected(i));
        rec.record(case, &request.encode_to_vec(), outcome);
    }
}

fn expected(i: usize) -> Code {
    if i % 7 == 3 {
        Code::NotFound
    } else {
        Code::Ok
    }
}

/// Runs every request as its own task at once; the outcomes in request order.
async fn gather<Q, R, F, Fut>(
    client: &Client,
    requests: Vec<Q>,
    call: F,
) -> Vec<(Q, Result<R, sidecar_client::Error>)>
where
    Q: Clone + Send + 'static,
    R: Send + 'static,
    F: Fn(Client, Q) -> Fut,
    Fut: std::future::Future<Output = Result<R, sidecar_client::Error>> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for (i, request) in requests.iter().enumerate() {
        let call = call(client.clone(), request.clone());
        tasks.spawn(async move { (i, call.await) });
    }
    let mut outcomes: Vec<Option<Result<R, sidecar_client::Error>>> =
        requests.iter().map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        let (i, outcome) = joined.expect("a call task panicked");
        outcomes[i] = Some(outcome);
    }
    requests
        .into_iter()
        .zip(outcomes.into_iter().map(|o| o.expect("every task joined")))
        .collect()
}
