//! The per-token cost of the parse pipeline without FFI or protobuf, for `make bench` (built with
//! the `testing` feature only).

use std::sync::Arc;
use std::time::Instant;

use crate::error::Result;
use crate::parse::{Delta, ParseModel, Session, SessionConfig};

/// Runs `ids` through a fresh session `iterations` times, `per_step` ids per feed, and returns the
/// mean nanoseconds per token (detokenize + stop strings + parse, session creation included).
pub fn ns_per_token(
    model: &Arc<ParseModel>,
    cfg: &SessionConfig,
    prompt: &[u32],
    ids: &[u32],
    per_step: usize,
    iterations: usize,
) -> Result<f64> {
    let per_step = per_step.max(1);
    let iterations = iterations.max(1);
    let mut delta = Delta::default();
    let started = Instant::now();
    for _ in 0..iterations {
        let mut session = Session::new(Arc::clone(model), cfg, prompt)?;
        let chunks: Vec<&[u32]> = ids.chunks(per_step).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            session.feed_into(chunk, i + 1 == chunks.len(), &mut delta)?;
            std::hint::black_box(&delta);
        }
    }
    let tokens = (ids.len().max(1) * iterations) as f64;
    Ok(started.elapsed().as_nanos() as f64 / tokens)
}
