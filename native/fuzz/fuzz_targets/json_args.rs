#![no_main]
libfuzzer_sys::fuzz_target!(
    init: sidecar_native_fuzz::warm_up("json_args"),
    |data: &[u8]| sidecar_native_fuzz::json_args::run(data)
);
