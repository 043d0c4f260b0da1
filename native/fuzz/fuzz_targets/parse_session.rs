#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sidecar_native_fuzz::parse_session::run(data));
