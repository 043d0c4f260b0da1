#![no_main]
libfuzzer_sys::fuzz_target!(
    init: sidecar_native_fuzz::warm_up("parse_wire"),
    |data: &[u8]| sidecar_native_fuzz::parse_wire::run(data)
);
