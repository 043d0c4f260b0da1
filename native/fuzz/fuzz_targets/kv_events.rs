#![no_main]
libfuzzer_sys::fuzz_target!(
    init: sidecar_native_fuzz::warm_up("kv_events"),
    |data: &[u8]| sidecar_native_fuzz::kv_events::run(data)
);
