//! Worked values from `shared/docs/kv-hashing.md` (computed there with each engine's own code), and
//! the rules every algorithm shares. Exhaustive parity against the engines lives in the Python
//! tests (tests/kv/test_hashing.py), which compare with vectors produced from the engines' wheels.

use super::*;

fn range(n: u32) -> Vec<u32> {
    (0..n).collect()
}

fn first_value(algorithm: Algorithm, seed: Option<&str>) -> u64 {
    let mut spec = HashSpec::new(algorithm, 16);
    spec.seed = seed.map(str::to_owned);
    block_hashes(&range(100), &spec).unwrap().values[0]
}

#[test]
fn vllm_first_block_matches_the_worked_values() {
    assert_eq!(
        first_value(Algorithm::VllmSha256, None),
        3262291359910021016
    );
    assert_eq!(
        first_value(Algorithm::VllmSha256, Some("0")),
        7982712666671721126
    );
    assert_eq!(
        first_value(Algorithm::VllmSha256Cbor, None),
        2233398808101521225
    );
    assert_eq!(
        first_value(Algorithm::VllmSha256Cbor, Some("0")),
        12687895063098490012
    );
    assert_eq!(
        first_value(Algorithm::VllmXxhash, Some("0")),
        12446601617588617037
    );
    assert_eq!(
        first_value(Algorithm::VllmXxhashCbor, Some("0")),
        4168120356241826254
    );
}

#[test]
fn sglang_and_dynamo_match_the_worked_values() {
    assert_eq!(
        first_value(Algorithm::SglangSha256, None) as i64,
        6738917275443968386
    );
    let spec = HashSpec::new(Algorithm::DynamoXxh3, 16);
    let values = block_hashes(&range(100), &spec).unwrap().values;
    assert_eq!(&values[..2], &[15310707395893867146, 15292316782987903195]);
}

#[test]
fn only_full_blocks_are_hashed() {
    for algorithm in Algorithm::ALL {
        let mut spec = HashSpec::new(algorithm, 16);
        spec.seed = Some("0".into());
        let all = block_hashes(&range(100), &spec).unwrap().values;
        assert_eq!(all.len(), 6, "{algorithm:?}");
        assert!(block_hashes(&range(15), &spec).unwrap().values.is_empty());
        // A prefix's hashes are the first hashes of the longer sequence (chaining looks back only).
        assert_eq!(block_hashes(&range(64), &spec).unwrap().values, all[..4]);
    }
}

#[test]
fn a_cancelled_call_stops_every_algorithm() {
    let flag = std::sync::atomic::AtomicU32::new(1);
    let cancel = Cancel::new(None, Some(&flag));
    for algorithm in Algorithm::ALL {
        let mut spec = HashSpec::new(algorithm, 16);
        spec.seed = Some("0".into());
        let err = block_hashes_cancellable(&range(64), &spec, &cancel).unwrap_err();
        assert_eq!(
            err.kind(),
            crate::error::ErrorKind::Cancelled,
            "{algorithm:?}"
        );
    }
}

#[test]
fn dynamo_hashes_in_checked_parts_equal_one_pass() {
    // Parts of HASH_CHECK_BLOCKS blocks, with multimodal items straddling part boundaries.
    let bs = 4;
    let tokens = range((HASH_CHECK_BLOCKS * 2 + 7) as u32 * bs);
    let mut spec = HashSpec::new(Algorithm::DynamoXxh3, bs);
    let boundary = (HASH_CHECK_BLOCKS * bs as usize) as u64;
    spec.mm_items = vec![
        MmItem {
            identifier: "a".into(),
            offset: boundary - 6,
            length: 12,
        },
        MmItem {
            identifier: "b".into(),
            offset: 2 * boundary - 1,
            length: 3,
        },
    ];
    let checked = block_hashes_cancellable(&tokens, &spec, &Cancel::default())
        .unwrap()
        .values;
    let mm = dynamo::block_mm_hashes(tokens.len() / bs as usize, bs as usize, &spec.mm_items);
    let seed = dynamo::block_seed(&spec.lora_name, &spec.namespace);
    assert_eq!(checked, local_block_hashes(&tokens, bs as usize, seed, &mm));
}

#[test]
fn unreproducible_and_malformed_specs_are_refused() {
    for algorithm in [Algorithm::VllmXxhash, Algorithm::VllmXxhashCbor] {
        let err = block_hashes(&range(32), &HashSpec::new(algorithm, 16)).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        assert!(err.message().contains("block_hashing.seed"));
    }
    let err = block_hashes(&range(32), &HashSpec::new(Algorithm::VllmSha256, 0)).unwrap_err();
    assert!(err.message().contains("block_size"));
    let mut spec = HashSpec::new(Algorithm::VllmSha256, 16);
    spec.mm_items = vec![
        MmItem {
            identifier: "b".into(),
            offset: 10,
            length: 4,
        },
        MmItem {
            identifier: "a".into(),
            offset: 2,
            length: 4,
        },
    ];
    assert!(block_hashes(&range(32), &spec)
        .unwrap_err()
        .message()
        .contains("mm_items[1]"));
}

#[test]
fn lookahead_is_refused_where_no_engine_hashes_it() {
    let refused = |spec: &HashSpec| {
        block_hashes(&range(32), spec)
            .unwrap_err()
            .message()
            .to_owned()
    };
    for algorithm in [Algorithm::SglangSha256, Algorithm::DynamoXxh3] {
        let mut spec = HashSpec::new(algorithm, 16);
        spec.lookahead = 1;
        assert!(refused(&spec).starts_with("block_hashing.vllm_lookahead: only vLLM"));
    }
    let mut spec = HashSpec::new(Algorithm::VllmSha256, 16);
    spec.lookahead = 1;
    spec.extra_keys = ExtraKeyLayout::Legacy;
    assert!(refused(&spec).contains("legacy extra-key layout"));
    spec.extra_keys = ExtraKeyLayout::Tagged;
    spec.lookahead = MAX_LOOKAHEAD + 1;
    assert!(refused(&spec).starts_with("block_hashing.vllm_lookahead: 257 is more than 256"));
    spec.lookahead = MAX_LOOKAHEAD;
    assert!(block_hashes(&range(300), &spec).is_ok());
}

#[test]
fn vllm_lookahead_matches_vllm_033() {
    // vLLM 0.33.0's own `get_request_block_hasher(16, sha256, 1)` (no PYTHONHASHSEED) on
    // 1000..1050: 3 full blocks followed by a token, and 2 tokens left over.
    let mut spec = HashSpec::new(Algorithm::VllmSha256, 16);
    spec.lookahead = 1;
    let tokens: Vec<u32> = (1000..1050).collect();
    assert_eq!(
        block_hashes(&tokens, &spec).unwrap().values,
        [
            7873546650229310708,
            5501495429211893581,
            16531834048226911516
        ]
    );
    // A block is hashed only once `lookahead` tokens follow it.
    assert_eq!(block_hashes(&tokens[..48], &spec).unwrap().values.len(), 2);
    spec.lookahead = 3;
    assert_eq!(block_hashes(&tokens[..50], &spec).unwrap().values.len(), 2);
    assert_eq!(block_hashes(&tokens[..2], &spec).unwrap().values.len(), 0);
}

#[test]
fn the_effective_seed_is_reported() {
    let spec = HashSpec::new(Algorithm::VllmSha256Cbor, 16);
    assert_eq!(
        block_hashes(&range(16), &spec).unwrap().seed,
        "vllm-none-hash"
    );
}

#[test]
fn salt_and_lora_change_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let mut plain = HashSpec::new(algorithm, 4);
        plain.seed = Some("s".into());
        if algorithm == Algorithm::SglangSha256 {
            plain.sglang_event_format = SglangEventFormat::Dynamo;
        }
        let base = block_hashes(&range(8), &plain).unwrap().values;
        let mut salted = plain.clone();
        // Dynamo's local hash ignores the salt; its tenant separation is the namespace.
        if algorithm == Algorithm::DynamoXxh3 {
            salted.namespace = "tenant".into();
        } else {
            salted.cache_salt = "tenant".into();
        }
        let salted = block_hashes(&range(8), &salted).unwrap().values;
        assert_ne!(base[0], salted[0], "{algorithm:?}");
        if algorithm != Algorithm::DynamoXxh3 {
            // The salt reaches later blocks through the chain.
            assert_ne!(base[1], salted[1], "{algorithm:?}");
        }
    }
}

#[test]
fn pickle_small_shapes() {
    // Bytes CPython writes for pickle.dumps("0", protocol=5) and ((b"", (1, 300), None)).
    assert_eq!(
        pickle_dumps(&Value::Str("0")),
        b"\x80\x05\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x010\x94."
    );
    let v = Value::Tuple(vec![
        Value::Bytes(b""),
        Value::Tokens(&[1, 300]),
        Value::None,
    ]);
    assert_eq!(
        pickle_dumps(&v),
        b"\x80\x05\x95\x0e\x00\x00\x00\x00\x00\x00\x00C\x00\x94K\x01M,\x01\x86\x94N\x87\x94."
    );
}

#[test]
fn cbor_small_shapes() {
    let v = Value::Tuple(vec![
        Value::Bytes(b"\x01"),
        Value::Tokens(&[0, 24, 65536]),
        Value::Int(-25),
    ]);
    assert_eq!(
        cbor_encode(&v),
        b"\x83\x41\x01\x83\x00\x18\x18\x1a\x00\x01\x00\x00\x38\x18"
    );
}

/// Minimum over runs of `f` (robust to other processes sharing the machine).
fn min_time(mut f: impl FnMut()) -> std::time::Duration {
    (0..30)
        .map(|_| {
            let start = std::time::Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
#[ignore = "timing probe, run by hand: cargo test --release hash -- --ignored --nocapture --test-threads 1"]
fn timing_probe() {
    use sha2::{Digest, Sha256};
    let tokens: Vec<u32> = (0..32768u32)
        .map(|i| i.wrapping_mul(2654435761) % 151_000)
        .collect();
    for algorithm in Algorithm::ALL {
        let mut spec = HashSpec::new(algorithm, 16);
        spec.seed = Some("0".into());
        eprintln!(
            "{algorithm:?}: {:?}",
            min_time(|| drop(std::hint::black_box(block_hashes(&tokens, &spec).unwrap())))
        );
    }
    let parent = [7u8; 32];
    let mut buf = Vec::with_capacity(256);
    let t = min_time(|| {
        for block in tokens.chunks_exact(16) {
            buf.clear();
            pickle::dumps_block_into(&parent, block, &Value::None, &mut buf);
            std::hint::black_box(&buf);
        }
    });
    eprintln!("pickle encode x2048: {t:?}");
    let t = min_time(|| {
        for block in tokens.chunks_exact(16) {
            buf.clear();
            cbor::encode_block_into(&parent, block, &Value::None, &mut buf);
            std::hint::black_box(&buf);
        }
    });
    eprintln!("cbor encode x2048: {t:?}");
    let t = min_time(|| {
        for _ in 0..2048 {
            std::hint::black_box(Sha256::digest(std::hint::black_box(&buf)));
        }
    });
    eprintln!("sha256 of {} bytes x2048: {t:?}", buf.len());
}
