#![no_main]
libfuzzer_sys::fuzz_target!(
    init: sidecar_native_fuzz::warm_up("detok"),
    |data: &[u8]| sidecar_native_fuzz::detok::run(data)
);
