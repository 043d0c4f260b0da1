#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sidecar_native_fuzz::json_args::run(data));
