//! `score_response` against the `ScoreResponse` prost generates: every field, empty ones
//! included, map entries of every medium, workers in the order given.

use std::collections::HashMap;

use prost::Message;

use super::pb;
use super::tests::Rng;
use super::{score_response, ScoreFields, WorkerRow};

/// One worker as the test builds it: name, blocks, blocks per medium.
type Worker = (String, u32, Vec<u32>);

fn expected(fields: &ScoreFields<'_>, workers: &[Worker]) -> pb::ScoreResponse {
    pb::ScoreResponse {
        workers: workers
            .iter()
            .map(|(name, blocks, by_medium)| pb::WorkerScore {
                worker: name.clone(),
                blocks: *blocks,
                tokens: blocks * fields.block_size,
                blocks_by_medium: fields
                    .media
                    .iter()
                    .cloned()
                    .zip(by_medium.iter().copied())
                    .collect::<HashMap<_, _>>(),
            })
            .collect(),
        block_hashes: fields.block_hashes.to_vec(),
        block_size: fields.block_size,
        mode: fields.mode.into(),
        block_hash_spec: fields
            .block_hash_spec
            .map(|b| pb::BlockHashSpec::decode(b).expect("a spec")),
        num_tokens: fields.num_tokens,
        fingerprint: fields.fingerprint.into(),
        warming: fields.warming,
    }
}

fn encoded(fields: &ScoreFields<'_>, workers: &[Worker]) -> pb::ScoreResponse {
    let rows = workers.iter().map(|(name, blocks, by_medium)| WorkerRow {
        name,
        blocks: *blocks,
        by_medium,
    });
    pb::ScoreResponse::decode(score_response(fields, rows).as_slice()).expect("decodes")
}

#[test]
fn every_field_decodes_as_prost_reads_it() {
    let mut rng = Rng(0x5C0E_5E5B);
    let spec = pb::BlockHashSpec {
        algorithm: "vllm_sha256".into(),
        block_size: 16,
        seed: "0".into(),
        event_value: "last8_be_unsigned".into(),
        vllm_extra_keys: "tagged".into(),
        vllm_lookahead: 1,
    }
    .encode_to_vec();
    for round in 0..300 {
        let media: Vec<String> = (0..rng.below(4)).map(|m| format!("M{m}")).collect();
        let keys: Vec<u64> = (0..rng.below(300))
            .map(|_| match rng.below(4) {
                0 => 0,
                1 => u64::MAX,
                2 => rng.below(1 << 14),
                _ => rng.next(),
            })
            .collect();
        let block_size = [0, 1, 16, 64][rng.below(4) as usize];
        let workers: Vec<Worker> = (0..[0, 1, 3, 70][rng.below(4) as usize])
            .map(|w| {
                let blocks = rng.below(keys.len() as u64 + 1) as u32;
                let by_medium = media
                    .iter()
                    .map(|_| rng.below(u64::from(blocks) + 1) as u32)
                    .collect();
                // An empty name, and long ones whose message needs a 2-byte length.
                let name = match w % 5 {
                    0 => String::new(),
                    1 => "w".repeat(200),
                    _ => format!("worker-{w}"),
                };
                (name, blocks, by_medium)
            })
            .collect();
        let fields = ScoreFields {
            block_size,
            block_hashes: &keys,
            mode: ["content", "engine", ""][round % 3],
            block_hash_spec: [None, Some(spec.as_slice()), Some(&[][..])][round % 3],
            num_tokens: rng.below(1 << 33) as u32,
            fingerprint: ["", "fp-1"][rng.below(2) as usize],
            warming: rng.below(2) == 1,
            media: &media,
        };
        assert_eq!(
            encoded(&fields, &workers),
            expected(&fields, &workers),
            "round {round}"
        );
    }
}

#[test]
fn an_empty_score_is_an_empty_message() {
    let fields = ScoreFields {
        block_size: 0,
        block_hashes: &[],
        mode: "",
        block_hash_spec: None,
        num_tokens: 0,
        fingerprint: "",
        warming: false,
        media: &[],
    };
    assert!(score_response(&fields, []).is_empty());
}
