#![no_main]
libfuzzer_sys::fuzz_target!(
    init: sidecar_native_fuzz::warm_up("render"),
    |data: &[u8]| sidecar_native_fuzz::render::run(data)
);
