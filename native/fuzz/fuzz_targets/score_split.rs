#![no_main]
libfuzzer_sys::fuzz_target!(
    init: sidecar_native_fuzz::warm_up("score_split"),
    |data: &[u8]| sidecar_native_fuzz::score_split::run(data)
);
