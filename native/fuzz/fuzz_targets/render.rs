#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sidecar_native_fuzz::render::run(data));
