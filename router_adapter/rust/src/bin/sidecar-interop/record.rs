//! One JSON line per case on stdout (request and response as protobuf bytes in hex, or the error
//! status), and the driver's own checks; the pytest replays every request with the Python client
//! and compares.

use std::future::Future;
use std::io::Write;
use std::time::Duration;

use prost::Message;
use serde_json::{json, Value};
use sidecar_client::{code_name, Code, Error};

/// What a case calls and what it must get.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub method: &'static str,
    pub expected: Code,
    pub timeout: Option<Duration>,
    /// False where the Python client cannot see the same thing (a server that is down).
    pub compare: bool,
}

impl Case {
    pub fn ok(name: impl Into<String>, method: &'static str) -> Case {
        Case {
            name: name.into(),
            method,
            expected: Code::Ok,
            timeout: None,
            compare: true,
        }
    }

    pub fn err(name: impl Into<String>, method: &'static str, expected: Code) -> Case {
        Case {
            expected,
            ..Case::ok(name, method)
        }
    }

    pub fn timeout(self, timeout: Duration) -> Case {
        Case {
            timeout: Some(timeout),
            ..self
        }
    }

    pub fn local_only(self) -> Case {
        Case {
            compare: false,
            ..self
        }
    }
}

/// Collects failures; every case is printed whether it passed or not.
#[derive(Debug, Default)]
pub struct Recorder {
    pub failures: Vec<String>,
    pub cases: usize,
    /// Which server the calls go to ("main" or "kv"), so the replay uses the same one.
    pub target: &'static str,
    /// How the client carried the calls ("unary", or "multiplex" for a pool of Multiplex streams).
    pub carrier: &'static str,
}

impl Recorder {
    pub fn emit(&mut self, record: &Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{record}");
        let _ = out.flush();
    }

    pub fn check(&mut self, case: &str, ok: bool, why: impl FnOnce() -> String) {
        if !ok {
            let why = why();
            eprintln!("FAIL {case}: {why}");
            self.failures.push(format!("{case}: {why}"));
        }
    }

    /// Runs one unary call, records it, checks its code; the response when it succeeded.
    pub async fn unary<Q, R, F, Fut>(&mut self, case: Case, request: Q, call: F) -> Option<R>
    where
        Q: Message,
        R: Message,
        F: FnOnce(Q) -> Fut,
        Fut: Future<Output = Result<R, Error>>,
    {
        let bytes = request.encode_to_vec();
        let outcome = call(request).await;
        self.record(case, &bytes, outcome)
    }

    /// Records a finished call (its request's bytes and its outcome), checks its code; the
    /// response when it succeeded.
    pub fn record<R: Message>(
        &mut self,
        case: Case,
        request: &[u8],
        outcome: Result<R, Error>,
    ) -> Option<R> {
        self.record_with(case, request, outcome, json!({}))
    }

    /// [`record`](Self::record) with more fields in the record (`extra`, an object).
    pub fn record_with<R: Message>(
        &mut self,
        case: Case,
        request: &[u8],
        outcome: Result<R, Error>,
        extra: Value,
    ) -> Option<R> {
        let mut record = json!({
            "case": case.name, "target": self.target, "carrier": self.carrier, "method": case.method,
            "request": hex(request), "expected": code_name(case.expected), "compare": case.compare,
            "timeout_ms": case.timeout.map(|t| t.as_secs_f64() * 1e3),
        });
        if let (Value::Object(record), Value::Object(extra)) = (&mut record, extra) {
            record.extend(extra);
        }
        match &outcome {
            Ok(response) => record["response"] = json!(hex(&response.encode_to_vec())),
            Err(error) => record["error"] = error_json(error),
        }
        let got = outcome.as_ref().map_or_else(Error::code, |_| Code::Ok);
        self.cases += 1;
        self.check(&case.name, got == case.expected, || {
            format!(
                "expected {}, got {}",
                code_name(case.expected),
                outcome
                    .as_ref()
                    .err()
                    .map_or("OK".to_string(), |e| e.to_string())
            )
        });
        self.emit(&record);
        outcome.ok()
    }
}

pub fn error_json(error: &Error) -> Value {
    json!({"code": code_name(error.code()), "message": error.message()})
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[(byte >> 4) as usize] as char);
        out.push(DIGITS[(byte & 15) as usize] as char);
    }
    out
}
