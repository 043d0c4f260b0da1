//! Unit tests of the index. The differential tests against the Python index (random operation
//! sequences, every payload encoding) live in tests/unit/router_adapter/test_native_index.py.

use std::path::Path;

use super::decode::{decode_batch, Encoding, Event};
use super::*;
use crate::hash::{Algorithm, HashSpec, MmItem};

/// A MessagePack writer for building payloads in tests.
#[derive(Clone, Debug)]
enum V {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'static str),
    Bin(Vec<u8>),
    Arr(Vec<V>),
    Map(Vec<(V, V)>),
}

fn encode(v: &V, out: &mut Vec<u8>) {
    match v {
        V::Nil => out.push(0xc0),
        V::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        V::Int(i) if *i >= 0 => {
            out.push(0xcf);
            out.extend_from_slice(&(*i as u64).to_be_bytes());
        }
        V::Int(i) => {
            out.push(0xd3);
            out.extend_from_slice(&(*i as i64).to_be_bytes());
        }
        V::Float(f) => {
            out.push(0xcb);
            out.extend_from_slice(&f.to_be_bytes());
        }
        V::Str(s) => {
            out.push(0xdb);
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        V::Bin(b) => {
            out.push(0xc6);
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        }
        V::Arr(items) => {
            out.push(0xdd);
            out.extend_from_slice(&(items.len() as u32).to_be_bytes());
            items.iter().for_each(|i| encode(i, out));
        }
        V::Map(pairs) => {
            out.push(0xdf);
            out.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
            for (k, v) in pairs {
                encode(k, out);
                encode(v, out);
            }
        }
    }
}

fn bytes(v: &V) -> Vec<u8> {
    let mut out = Vec::new();
    encode(v, &mut out);
    out
}

fn ints(values: impl IntoIterator<Item = u64>) -> V {
    V::Arr(values.into_iter().map(|v| V::Int(v as i128)).collect())
}

const BS: u32 = 4;

fn vllm_hashes(tokens: &[u32], salt: &str) -> Vec<u64> {
    let mut spec = HashSpec::new(Algorithm::VllmSha256, BS);
    spec.cache_salt = salt.to_owned();
    crate::hash::block_hashes(tokens, &spec).unwrap().values
}

/// A vLLM >= 0.24 batch storing blocks [start, end) of `tokens`.
fn stored(
    tokens: &[u32],
    start: usize,
    end: usize,
    medium: &'static str,
    salt: &'static str,
) -> Vec<u8> {
    let hashes = vllm_hashes(tokens, salt);
    let parent = if start == 0 {
        V::Nil
    } else {
        V::Int(hashes[start - 1] as i128)
    };
    let extra = if start == 0 && !salt.is_empty() {
        V::Arr(vec![V::Arr(vec![V::Str(salt)])])
    } else {
        V::Nil
    };
    let event = V::Map(vec![
        (V::Str("type"), V::Str("BlockStored")),
        (
            V::Str("block_hashes"),
            ints(hashes[start..end].iter().copied()),
        ),
        (V::Str("parent_block_hash"), parent),
        (
            V::Str("token_ids"),
            ints(tokens[start * 4..end * 4].iter().map(|&t| t as u64)),
        ),
        (V::Str("block_size"), V::Int(BS as i128)),
        (V::Str("medium"), V::Str(medium)),
        (V::Str("extra_keys"), extra),
    ]);
    bytes(&V::Arr(vec![V::Float(1.0), V::Arr(vec![event]), V::Int(0)]))
}

fn removed(hashes: &[u64], medium: &'static str) -> Vec<u8> {
    let event = V::Map(vec![
        (V::Str("type"), V::Str("BlockRemoved")),
        (V::Str("block_hashes"), ints(hashes.iter().copied())),
        (V::Str("medium"), V::Str(medium)),
    ]);
    bytes(&V::Arr(vec![V::Float(1.0), V::Arr(vec![event])]))
}

fn cleared() -> Vec<u8> {
    let event = V::Map(vec![(V::Str("type"), V::Str("AllBlocksCleared"))]);
    bytes(&V::Arr(vec![V::Float(1.0), V::Arr(vec![event])]))
}

fn content_index(max_blocks: u64) -> SharedIndex {
    SharedIndex::new(Options {
        block_size: Some(BS),
        max_blocks,
        ..Options::default()
    })
}

fn depths(index: &SharedIndex, tokens: &[u32], salt: &str) -> Vec<(String, u32)> {
    let table = index
        .score(
            tokens,
            &RequestFacts {
                cache_salt: salt,
                ..Default::default()
            },
        )
        .unwrap();
    table
        .workers
        .into_iter()
        .map(|w| (w.name, w.blocks))
        .collect()
}

fn tokens() -> Vec<u32> {
    (100..132).collect()
}

#[test]
fn recorded_engine_payloads_decode_to_the_expected_events() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/kv/events");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("msgpack") {
            continue;
        }
        let payload = std::fs::read(&path).unwrap();
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(path.with_extension("expected.json")).unwrap(),
        )
        .unwrap();
        let batch = decode_batch(&payload, Encoding::Engine).unwrap();
        let want = expected["events"].as_array().unwrap();
        assert_eq!(batch.events.len(), want.len(), "{path:?}");
        for (event, want) in batch.events.iter().zip(want) {
            check_event(event, want, &batch);
        }
        seen += 1;
    }
    assert!(seen >= 6);
}

fn check_event(event: &Event<'_>, want: &serde_json::Value, batch: &Batch<'_>) {
    let as_strings = |r: (usize, usize)| -> Vec<String> {
        batch.hashes[r.0..r.1].iter().map(u64::to_string).collect()
    };
    let want_hashes: Vec<String> = want["block_hashes"]
        .as_array()
        .map(|a| a.iter().map(|h| h.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    match event {
        Event::Stored(s) => {
            assert_eq!(want["type"], "BlockStored");
            assert_eq!(as_strings(s.hashes), want_hashes);
            assert_eq!(
                s.parent.map(|p| p.to_string()),
                want["parent_block_hash"].as_str().map(str::to_owned)
            );
            let tokens: Vec<u64> = batch.tokens[s.tokens.0..s.tokens.1]
                .iter()
                .map(|&t| t as u64)
                .collect();
            let want_tokens: Vec<u64> = want["token_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap())
                .collect();
            assert_eq!(tokens, want_tokens);
            assert_eq!(s.block_size, want["block_size"].as_i64().unwrap() as i128);
            assert_eq!(s.medium, want["medium"].as_str().unwrap());
            assert_eq!(s.lora_name, want["lora_name"].as_str().unwrap_or(""));
            assert_eq!(s.salt, want["cache_salt"].as_str().unwrap());
            assert_eq!(s.bigram, want["bigram"].as_bool().unwrap_or(false));
            // Each block's `[identifier, offset]` pairs (recordings without images name none).
            let mut want_mm = Vec::new();
            for (block, keys) in want["mm_keys"].as_array().into_iter().flatten().enumerate() {
                for pair in keys.as_array().unwrap() {
                    let (id, offset) = (pair[0].as_str().unwrap(), pair[1].as_i64().unwrap());
                    want_mm.push(MmKey::new(block as u32, id, offset as i128));
                }
            }
            assert_eq!(batch.mm[s.mm.0 as usize..s.mm.1 as usize], want_mm[..]);
            // vLLM >= 0.33 with lookahead hashing: each block's tokens after it (else none).
            let want_lookahead: Option<Vec<Vec<u32>>> =
                serde_json::from_value(want["lookahead_token_ids"].clone()).unwrap();
            let lookahead = s.lookahead.map(|la| {
                assert!(!la.ragged && la.wide_token.is_none());
                let flat = &batch.lookahead[la.start..la.start + la.lists * la.width];
                (0..la.lists)
                    .map(|i| flat[i * la.width..(i + 1) * la.width].to_vec())
                    .collect::<Vec<_>>()
            });
            assert_eq!(lookahead, want_lookahead);
        }
        Event::Removed(r) => {
            assert_eq!(want["type"], "BlockRemoved");
            assert_eq!(as_strings(r.hashes), want_hashes);
            assert_eq!(r.medium, want["medium"].as_str().unwrap());
        }
        Event::Cleared => assert_eq!(want["type"], "AllBlocksCleared"),
    }
}

#[test]
fn extra_keys_pairs_are_each_blocks_multimodal_keys() {
    // As `events.mm_keys_of`: block i's `[str, int]` pairs in order; bare strings (LoRA name,
    // salt, a legacy bare identifier), bytes, booleans, other lengths and nesting are not.
    let pair = |id: &'static str, offset: i128| V::Arr(vec![V::Str(id), V::Int(offset)]);
    let store = |extra: V| {
        V::Map(vec![
            (V::Str("type"), V::Str("BlockStored")),
            (V::Str("block_hashes"), ints([1, 2, 3])),
            (V::Str("token_ids"), ints(0..12)),
            (V::Str("block_size"), V::Int(4)),
            (V::Str("lora_name"), V::Str("ad")),
            (V::Str("extra_keys"), extra),
        ])
    };
    let first = store(V::Arr(vec![
        V::Arr(vec![
            V::Str("ad"),
            pair("x", 3),
            V::Str("salt"),
            pair("y", -2),
        ]),
        V::Nil,
        V::Arr(vec![V::Str("ad"), pair("x", u64::MAX as i128)]),
    ]));
    let ignored = store(V::Arr(vec![V::Arr(vec![
        V::Str("bare-id"),
        V::Bin(b"embeds".to_vec()),
        V::Arr(vec![V::Str("x"), V::Bool(true)]),
        V::Arr(vec![V::Str("x"), V::Int(1), V::Int(2)]),
        V::Arr(vec![V::Int(1), V::Str("x")]),
        V::Arr(vec![V::Str("x"), V::Float(1.0)]),
        V::Arr(vec![pair("x", 1)]),
    ])]));
    // A field given twice: the last one counts.
    let mut twice = store(V::Arr(vec![V::Arr(vec![pair("gone", 0)])]));
    if let V::Map(fields) = &mut twice {
        fields.push((
            V::Str("extra_keys"),
            V::Arr(vec![V::Nil, V::Arr(vec![pair("z", 0)])]),
        ));
    }
    let payload = bytes(&V::Arr(vec![
        V::Float(1.0),
        V::Arr(vec![first, ignored, twice]),
    ]));
    let batch = decode_batch(&payload, Encoding::Engine).unwrap();
    let keys: Vec<&[MmKey]> = batch
        .events
        .iter()
        .map(|e| match e {
            Event::Stored(s) => &batch.mm[s.mm.0 as usize..s.mm.1 as usize],
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        keys[0],
        [
            MmKey::new(0, "x", 3),
            MmKey::new(0, "y", -2),
            MmKey::new(2, "x", u64::MAX as i128)
        ]
    );
    assert!(keys[1].is_empty());
    assert_eq!(keys[2], [MmKey::new(1, "z", 0)]);
    assert_eq!(batch.mm.len(), 4);
    let Event::Stored(s) = &batch.events[0] else {
        unreachable!()
    };
    assert_eq!(s.salt, "salt");
}

#[test]
fn content_keys_tell_images_apart() {
    // Blocks 1 and 2 hold image x (stored) or y (requested): the text block before matches.
    let index = content_index(1000);
    let tokens = tokens();
    let hashes = vllm_hashes(&tokens, "");
    let pair = |offset: i128| V::Arr(vec![V::Arr(vec![V::Str("x"), V::Int(offset)])]);
    let event = V::Map(vec![
        (V::Str("type"), V::Str("BlockStored")),
        (V::Str("block_hashes"), ints(hashes[..4].iter().copied())),
        (
            V::Str("token_ids"),
            ints(tokens[..16].iter().map(|&t| t as u64)),
        ),
        (V::Str("block_size"), V::Int(BS as i128)),
        (
            V::Str("extra_keys"),
            V::Arr(vec![V::Nil, pair(0), pair(-4), V::Nil]),
        ),
    ]);
    let payload = bytes(&V::Arr(vec![V::Float(1.0), V::Arr(vec![event])]));
    index.apply("w", &payload, Encoding::Engine).unwrap();
    let item = |id: &str| MmItem {
        identifier: id.to_owned(),
        offset: 4,
        length: 8,
    };
    for (items, depth) in [(vec![item("x")], 4), (vec![item("y")], 1), (vec![], 1)] {
        let table = index
            .score(
                &tokens[..16],
                &RequestFacts {
                    mm_items: &items,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(table.workers[0].blocks, depth, "{items:?}");
    }
}

#[test]
fn malformed_payloads_are_refused() {
    let stored_map = |hashes: V| {
        V::Map(vec![
            (V::Str("type"), V::Str("BlockStored")),
            (V::Str("block_hashes"), hashes),
        ])
    };
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0xc1],
        bytes(&V::Map(vec![(V::Str("ts"), V::Int(1))])),
        bytes(&V::Arr(vec![V::Float(1.0), V::Str("x")])),
        bytes(&V::Arr(vec![V::Float(1.0)])),
        bytes(&V::Arr(vec![V::Nil, V::Arr(vec![])])),
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![V::Map(vec![(V::Str("type"), V::Int(3))])]),
        ])),
        // A store whose token ids mix ints and bigram pairs, or with a pair of three.
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![V::Map(vec![
                (V::Str("type"), V::Str("BlockStored")),
                (V::Str("block_hashes"), ints([1])),
                (V::Str("token_ids"), V::Arr(vec![ints([1, 2]), V::Int(2)])),
            ])]),
        ])),
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![V::Map(vec![
                (V::Str("type"), V::Str("BlockStored")),
                (V::Str("block_hashes"), ints([1])),
                (V::Str("token_ids"), V::Arr(vec![V::Int(2), ints([1, 2])])),
            ])]),
        ])),
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![V::Map(vec![
                (V::Str("type"), V::Str("BlockStored")),
                (V::Str("block_hashes"), ints([1])),
                (V::Str("token_ids"), V::Arr(vec![ints([1, 2, 3])])),
            ])]),
        ])),
        // An unknown class whose tag comes after a key that is not a string.
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![V::Map(vec![
                (V::Int(1), V::Int(2)),
                (V::Str("type"), V::Str("BlockFuture")),
            ])]),
        ])),
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![stored_map(V::Arr(vec![V::Str("s")]))]),
        ])),
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![stored_map(V::Arr(vec![V::Bin(b"short".to_vec())]))]),
        ])),
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![V::Arr(vec![V::Str("BlockRemoved")])]),
        ])),
        bytes(&V::Arr(vec![
            V::Float(1.0),
            V::Arr(vec![V::Map(vec![(V::Str("block_hashes"), ints([1]))])]),
        ])),
        [bytes(&V::Arr(vec![V::Float(1.0), V::Arr(vec![])])), vec![0]].concat(),
    ];
    for (i, payload) in cases.iter().enumerate() {
        let index = content_index(100);
        let err = index.apply("w", payload, Encoding::Engine).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "case {i}");
        assert_eq!(index.status().workers, 0, "case {i}: nothing applied");
    }
    // A deeply nested unknown field is refused, not a stack overflow.
    let mut deep = bytes(&V::Arr(vec![V::Float(1.0), V::Arr(vec![]), V::Nil])).to_vec();
    deep[0] = 0x94;
    deep.extend(std::iter::repeat_n(0x91u8, 100_000));
    deep.push(0x90);
    assert!(content_index(100)
        .apply("w", &deep, Encoding::Engine)
        .is_err());
}

#[test]
fn stores_in_spans_match_the_whole_request_and_removals_are_per_medium() {
    let index = content_index(1000);
    let t = tokens();
    index
        .apply("a", &stored(&t, 0, 3, "GPU", ""), Encoding::Engine)
        .unwrap();
    index
        .apply("a", &stored(&t, 3, 6, "GPU", ""), Encoding::Engine)
        .unwrap();
    index
        .apply("b", &stored(&t, 0, 2, "GPU", ""), Encoding::Engine)
        .unwrap();
    assert_eq!(
        depths(&index, &t, ""),
        vec![("a".into(), 6), ("b".into(), 2)]
    );
    index
        .apply("a", &stored(&t, 0, 6, "CPU", ""), Encoding::Engine)
        .unwrap();
    let hashes = vllm_hashes(&t, "");
    index
        .apply("a", &removed(&hashes[1..2], "GPU"), Encoding::Engine)
        .unwrap();
    let table = index.score(&t, &RequestFacts::default()).unwrap();
    assert_eq!(table.media, vec!["GPU", "CPU"]);
    assert_eq!(
        (table.workers[0].blocks, table.workers[0].by_medium.clone()),
        (6, vec![1, 6])
    );
    index
        .apply("a", &removed(&hashes[1..2], "CPU"), Encoding::Engine)
        .unwrap();
    assert_eq!(
        depths(&index, &t, ""),
        vec![("b".into(), 2), ("a".into(), 1)]
    );
    assert_eq!(index.status().blocks, 5 + 2);
    index.apply("a", &cleared(), Encoding::Engine).unwrap();
    assert!(index.drop_worker("b"));
    assert_eq!(depths(&index, &t, ""), vec![("a".into(), 0)]);
    assert_eq!((index.status().blocks, index.status().keys), (0, 0));
}

#[test]
fn long_removals_release_each_medium_once_across_groups() {
    // 200 blocks: longer than a group of releases (`EVICTION_GROUP`), with blocks not held, a
    // hash named twice, and keys that two workers share.
    let index = content_index(10_000);
    let t: Vec<u32> = (0..200 * BS).collect();
    let hashes = vllm_hashes(&t, "");
    for (worker, medium, end) in [("a", "GPU", 200), ("b", "GPU", 200), ("a", "CPU", 100)] {
        index
            .apply(worker, &stored(&t, 0, end, medium, ""), Encoding::Engine)
            .unwrap();
    }
    let mut gone: Vec<u64> = hashes[..150].to_vec();
    for (i, unknown) in [(0, 1u64), (40, 2), (64, 3), (65, 4), (149, 5)] {
        gone.insert(i, unknown);
    }
    gone.insert(100, hashes[70]);
    index
        .apply("a", &removed(&gone, "GPU"), Encoding::Engine)
        .unwrap();
    let status = index.status();
    assert_eq!(
        (status.stats.blocks_removed, status.stats.unknown_removals),
        (150, 6)
    );
    assert_eq!((status.blocks, status.keys), (150 + 200, 200));
    let table = index.score(&t, &RequestFacts::default()).unwrap();
    let a = table.workers.iter().find(|w| w.name == "a").unwrap();
    assert_eq!((a.blocks, a.by_medium.clone()), (100, vec![0, 100]));
    index
        .apply("a", &removed(&hashes[..100], "CPU"), Encoding::Engine)
        .unwrap();
    index
        .apply("b", &removed(&hashes, "GPU"), Encoding::Engine)
        .unwrap();
    assert_eq!(
        depths(&index, &t, ""),
        vec![("a".into(), 0), ("b".into(), 0)]
    );
    let status = index.status();
    assert_eq!((status.blocks, status.keys), (50, 50));
    assert_eq!(status.stats.blocks_removed, 150 + 100 + 200);
}

#[test]
fn salt_separates_tenants_and_continuations_inherit_it() {
    let index = content_index(1000);
    let t = tokens();
    index
        .apply("plain", &stored(&t, 0, 4, "GPU", ""), Encoding::Engine)
        .unwrap();
    index
        .apply("salted", &stored(&t, 0, 2, "GPU", "t1"), Encoding::Engine)
        .unwrap();
    index
        .apply("salted", &stored(&t, 2, 4, "GPU", "t1"), Encoding::Engine)
        .unwrap();
    assert_eq!(
        depths(&index, &t, ""),
        vec![("plain".into(), 4), ("salted".into(), 0)]
    );
    assert_eq!(
        depths(&index, &t, "t1"),
        vec![("salted".into(), 4), ("plain".into(), 0)]
    );
}

#[test]
fn eviction_keeps_the_bound_and_drops_the_oldest_of_the_largest() {
    let index = content_index(100);
    for i in 0..60u32 {
        let seq: Vec<u32> = (0..4 * BS).map(|t| i * 1000 + t).collect();
        let worker = if i % 3 == 0 { "small" } else { "big" };
        index
            .apply(worker, &stored(&seq, 0, 4, "GPU", ""), Encoding::Engine)
            .unwrap();
    }
    let status = index.status();
    assert!(status.blocks <= 100);
    assert_eq!(status.stats.evicted_blocks, 240 - status.blocks);
    let newest: Vec<u32> = (0..4 * BS).map(|t| 59 * 1000 + t).collect();
    assert_eq!(depths(&index, &newest, "")[0], ("big".into(), 4));
}

#[test]
fn engine_mode_keys_on_published_hashes() {
    let mut spec = HashSpec::new(Algorithm::VllmSha256, BS);
    spec.seed = Some("0".into());
    let json = r#"{"algorithm": "vllm_sha256", "block_size": 4, "seed": "0"}"#;
    let options = Options::from_json(&format!(r#"{{"engine_spec": {json}}}"#)).unwrap();
    assert_eq!(options.engine_spec.as_ref(), Some(&spec));
    let index = SharedIndex::new(options);
    let t = tokens();
    let hashes = crate::hash::block_hashes(&t, &spec).unwrap().values;
    let event = V::Arr(vec![
        V::Str("BlockStored"),
        ints(hashes[..5].iter().copied()),
        V::Nil,
        V::Arr(vec![]),
        V::Int(4),
    ]);
    index
        .apply(
            "a",
            &bytes(&V::Arr(vec![V::Float(0.0), V::Arr(vec![event])])),
            Encoding::Engine,
        )
        .unwrap();
    let table = index.score(&t, &RequestFacts::default()).unwrap();
    assert_eq!(table.keys, hashes);
    assert_eq!(table.workers[0].blocks, 5);
}

/// A deterministic pseudo-random generator for the tests below.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn random_index(rng: &mut Lcg, operations: usize) -> (SharedIndex, Vec<Vec<u32>>) {
    let index = content_index(400);
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|p| {
            (0..8 * BS)
                .map(|t| if t < 8 { t } else { p * 100 + t })
                .collect()
        })
        .collect();
    let media = ["GPU", "CPU"];
    for _ in 0..operations {
        let worker = ["w0", "w1", "w2", "w3"][rng.next(4) as usize];
        let prompt = &prompts[rng.next(8) as usize];
        let start = rng.next(6) as usize;
        let payload = match rng.next(10) {
            0 => cleared(),
            1 => {
                index.drop_worker(worker);
                continue;
            }
            2 | 3 => removed(
                &vllm_hashes(prompt, "")[start..start + 1],
                media[rng.next(2) as usize],
            ),
            _ => stored(prompt, start, start + 2, media[rng.next(2) as usize], ""),
        };
        index.apply(worker, &payload, Encoding::Engine).unwrap();
    }
    (index, prompts)
}

#[test]
fn snapshot_round_trip_gives_the_same_answers() {
    let mut rng = Lcg(42);
    let (index, prompts) = random_index(&mut rng, 3000);
    let snapshot = index.snapshot();
    let copy = content_index(400);
    copy.restore(&snapshot).unwrap();
    assert_eq!(copy.status().blocks, index.status().blocks);
    assert_eq!(copy.status().keys, index.status().keys);
    assert_eq!(copy.status().stats, index.status().stats);
    assert_eq!(copy.snapshot(), snapshot);
    for prompt in &prompts {
        assert_eq!(
            copy.score(prompt, &RequestFacts::default()).unwrap(),
            index.score(prompt, &RequestFacts::default()).unwrap()
        );
    }
    // The same operations continue identically on both (recency and eviction order kept).
    let mut a = Lcg(7);
    let mut b = Lcg(7);
    for _ in 0..500 {
        for (idx, rng) in [(&index, &mut a), (&copy, &mut b)] {
            let prompt = &prompts[rng.next(8) as usize];
            let start = rng.next(6) as usize;
            idx.apply(
                ["w0", "w4"][rng.next(2) as usize],
                &stored(prompt, start, start + 2, "GPU", ""),
                Encoding::Engine,
            )
            .unwrap();
        }
    }
    assert_eq!(copy.snapshot(), index.snapshot());
    // Corruption and mismatched configurations are refused without changing anything.
    let mut corrupt = snapshot.clone();
    corrupt[40] ^= 1;
    assert!(copy.restore(&corrupt).is_err());
    assert!(copy.restore(&snapshot[..snapshot.len() - 1]).is_err());
    let other = SharedIndex::new(Options {
        block_size: Some(8),
        ..Options::default()
    });
    assert_eq!(
        other.restore(&snapshot).unwrap_err().kind(),
        crate::ErrorKind::FailedPrecondition
    );
    assert_eq!(copy.snapshot(), index.snapshot());
}

#[test]
fn scoring_while_applying_from_other_threads() {
    let mut rng = Lcg(3);
    let (index, prompts) = random_index(&mut rng, 200);
    std::thread::scope(|s| {
        for t in 0..3 {
            let (index, prompts) = (&index, &prompts);
            s.spawn(move || {
                for i in 0..2000 {
                    let table = index
                        .score(&prompts[(i + t) % 8], &RequestFacts::default())
                        .unwrap();
                    assert!(table.workers.windows(2).all(|w| w[0].blocks >= w[1].blocks));
                }
            });
        }
        let mut rng = Lcg(9);
        for _ in 0..2000 {
            let prompt = &prompts[rng.next(8) as usize];
            let start = rng.next(6) as usize;
            index
                .apply(
                    "w9",
                    &stored(prompt, start, start + 2, "GPU", ""),
                    Encoding::Engine,
                )
                .unwrap();
        }
    });
}

#[test]
fn many_workers_share_keys_beyond_one_bitset_word() {
    let index = content_index(100_000);
    let t = tokens();
    for w in 0..150 {
        let depth = 1 + w % 8;
        index
            .apply(
                &format!("w{w:03}"),
                &stored(&t, 0, depth, "GPU", ""),
                Encoding::Engine,
            )
            .unwrap();
    }
    let scores = depths(&index, &t, "");
    assert_eq!(scores.len(), 150);
    for (name, blocks) in &scores {
        let w: usize = name[1..].parse().unwrap();
        assert_eq!(*blocks as usize, 1 + w % 8);
    }
    for w in (0..150).step_by(2) {
        index.drop_worker(&format!("w{w:03}"));
    }
    assert!(depths(&index, &t, "")
        .iter()
        .all(|(n, b)| *b as usize == 1 + n[1..].parse::<usize>().unwrap() % 8));
    assert_eq!(index.status().keys, 8);
}

/// `n` blocks of [`BS`] tokens from `first` on, published plain or as SGLang's bigram pages
/// (`[t_i, t_i+1]`, the last pair's second element the next page's first token).
fn sglang_store(hashes: &[u64], parent: Option<u64>, first: u32, bigram: bool) -> V {
    let n = hashes.len() as u32 * BS;
    let tokens = if bigram {
        V::Arr(
            (first..first + n)
                .map(|t| ints([t as u64, t as u64 + 1]))
                .collect(),
        )
    } else {
        ints((first..first + n).map(|t| t as u64))
    };
    V::Map(vec![
        (V::Str("type"), V::Str("BlockStored")),
        (V::Str("block_hashes"), ints(hashes.iter().copied())),
        (
            V::Str("parent_block_hash"),
            parent.map_or(V::Nil, |p| V::Int(p as i128)),
        ),
        (V::Str("token_ids"), tokens),
        (V::Str("block_size"), V::Int(BS as i128)),
        (V::Str("lora_id"), V::Nil),
        (V::Str("medium"), V::Str("GPU")),
    ])
}

fn batch_of(events: Vec<V>) -> Vec<u8> {
    bytes(&V::Arr(vec![V::Float(1.0), V::Arr(events), V::Int(0)]))
}

#[test]
fn bigram_stores_decode_to_the_first_elements_and_key_like_plain_ones() {
    let payload = batch_of(vec![
        sglang_store(&[11, 12], None, 100, true),
        sglang_store(&[13], Some(12), 108, true),
    ]);
    let batch = decode_batch(&payload, Encoding::Engine).unwrap();
    let Event::Stored(s) = &batch.events[0] else {
        panic!("a store")
    };
    assert!(s.bigram);
    assert_eq!(
        batch.tokens[s.tokens.0..s.tokens.1],
        (100..108).collect::<Vec<u32>>()[..]
    );
    // Content mode: the same keys as the plain store of the same sequence.
    let bigram = content_index(100);
    bigram.apply("w", &payload, Encoding::Engine).unwrap();
    let plain = content_index(100);
    let plain_payload = batch_of(vec![
        sglang_store(&[11, 12], None, 100, false),
        sglang_store(&[13], Some(12), 108, false),
    ]);
    plain.apply("w", &plain_payload, Encoding::Engine).unwrap();
    let request: Vec<u32> = (100..113).collect();
    assert_eq!(depths(&bigram, &request, ""), vec![("w".into(), 3)]);
    assert_eq!(depths(&plain, &request, ""), depths(&bigram, &request, ""));
    assert_eq!(bigram.status().stats, plain.status().stats);
    // Engine mode: the engine hashed the pairs, which no spec reproduces; skipped, not refused.
    let json = r#"{"algorithm": "sglang_sha256", "block_size": 4}"#;
    let options = Options::from_json(&format!(r#"{{"engine_spec": {json}}}"#)).unwrap();
    let engine = SharedIndex::new(options);
    engine.apply("w", &payload, Encoding::Engine).unwrap();
    let status = engine.status();
    assert_eq!((status.blocks, status.stats.skipped_events), (0, 2));
}

#[test]
fn events_of_unknown_classes_are_skipped_and_counted() {
    let index = content_index(100);
    index
        .apply(
            "w",
            &batch_of(vec![sglang_store(&[11, 12], None, 100, false)]),
            Encoding::Engine,
        )
        .unwrap();
    let payload = batch_of(vec![
        V::Map(vec![
            (V::Str("type"), V::Str("BlockFuture")),
            (
                V::Str("payload"),
                V::Map(vec![(V::Int(1), V::Bin(vec![1]))]),
            ),
        ]),
        V::Arr(vec![V::Str("BlockNewer"), V::Int(1), V::Arr(vec![V::Nil])]),
        V::Map(vec![
            (V::Str("type"), V::Str("BlockRemoved")),
            (V::Str("block_hashes"), ints([12])),
        ]),
    ]);
    let batch = decode_batch(&payload, Encoding::Engine).unwrap();
    assert_eq!((batch.events.len(), batch.unknown), (1, 2));
    index.apply("w", &payload, Encoding::Engine).unwrap();
    let status = index.status();
    assert_eq!(status.stats.events, 4);
    assert_eq!(status.stats.skipped_events, 2);
    assert_eq!(status.stats.blocks_removed, 1);
    assert_eq!(
        depths(&index, &(100..108).collect::<Vec<_>>(), ""),
        vec![("w".into(), 1)]
    );
    // An unknown event must still be well-formed: cut short (within its last value), refused.
    let unknown = bytes(&V::Arr(vec![
        V::Float(1.0),
        V::Arr(vec![V::Arr(vec![V::Str("BlockNewer"), V::Bin(vec![1, 2])])]),
    ]));
    assert_eq!(decode_batch(&unknown, Encoding::Engine).unwrap().unknown, 1);
    let cut = &unknown[..unknown.len() - 1];
    assert!(decode_batch(cut, Encoding::Engine).is_err());
}

#[test]
fn a_held_block_stored_in_another_medium_keys_the_blocks_after_it_with_their_images() {
    // Image x over tokens 4..12 (blocks 1 and 2). Blocks 0 and 1 on GPU, then block 0 evicted: an
    // offload of blocks 1..4 names block 0 as parent. Block 1 keeps its key; blocks 2 and 3 are
    // keyed after it, block 2 with its image key (block 1 of the event).
    let index = content_index(1000);
    let tokens = tokens();
    let hashes = vllm_hashes(&tokens, "");
    let pair = |offset: i128| V::Arr(vec![V::Arr(vec![V::Str("x"), V::Int(offset)])]);
    let store = |start: usize, end: usize, medium: &'static str, extra: Vec<V>| {
        let parent = if start == 0 {
            V::Nil
        } else {
            V::Int(hashes[start - 1] as i128)
        };
        let event = V::Map(vec![
            (V::Str("type"), V::Str("BlockStored")),
            (
                V::Str("block_hashes"),
                ints(hashes[start..end].iter().copied()),
            ),
            (V::Str("parent_block_hash"), parent),
            (
                V::Str("token_ids"),
                ints(tokens[start * 4..end * 4].iter().map(|&t| t as u64)),
            ),
            (V::Str("block_size"), V::Int(BS as i128)),
            (V::Str("medium"), V::Str(medium)),
            (V::Str("extra_keys"), V::Arr(extra)),
        ]);
        bytes(&V::Arr(vec![V::Float(1.0), V::Arr(vec![event])]))
    };
    let apply = |payload: &[u8]| index.apply("w", payload, Encoding::Engine).unwrap();
    apply(&store(0, 2, "GPU", vec![V::Nil, pair(0)]));
    apply(&removed(&hashes[..1], "GPU"));
    apply(&store(1, 4, "CPU", vec![pair(0), pair(-4), V::Nil]));
    assert_eq!(index.status().stats.orphan_blocks, 0);
    apply(&store(0, 1, "GPU", vec![V::Nil]));
    let image = [MmItem {
        identifier: "x".to_owned(),
        offset: 4,
        length: 8,
    }];
    let table = index
        .score(
            &tokens[..16],
            &RequestFacts {
                mm_items: &image,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(table.workers[0].blocks, 4);
}

#[test]
fn tables_double_until_the_index_is_large_then_grow_compactly() {
    use super::core::COMPACT_FROM;
    use super::table::Growth;
    let index = content_index(u64::MAX);
    let mut rng = Lcg(5);
    let store = |index: &SharedIndex, worker: &str, rng: &mut Lcg| {
        let prompt: Vec<u32> = (0..8 * BS).map(|_| rng.next(150_000) as u32).collect();
        index
            .apply(worker, &stored(&prompt, 0, 8, "GPU", ""), Encoding::Engine)
            .unwrap();
    };
    let mut n = 0;
    while index.status().blocks + 8 < COMPACT_FROM {
        store(&index, ["w0", "w1", "w2"][n % 3], &mut rng);
        n += 1;
    }
    assert_eq!(index.read().growth(), Growth::Doubling);
    let small = index.snapshot();
    store(&index, "w0", &mut rng);
    store(&index, "w1", &mut rng);
    assert_eq!(index.read().growth(), Growth::Compact);
    // Workers that come later, and a worker's table emptied by a clear, grow compactly too
    // (`growth` checks every table).
    store(&index, "w9", &mut rng);
    let large = index.snapshot();
    index.apply("w0", &cleared(), Encoding::Engine).unwrap();
    assert!(index.status().blocks < COMPACT_FROM);
    assert_eq!(index.read().growth(), Growth::Compact);
    // A restore grows as the restored index's size says.
    let copy = content_index(u64::MAX);
    copy.restore(&large).unwrap();
    assert_eq!(copy.read().growth(), Growth::Compact);
    copy.restore(&small).unwrap();
    assert_eq!(copy.read().growth(), Growth::Doubling);
}
