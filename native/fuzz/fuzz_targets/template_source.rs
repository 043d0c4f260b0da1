#![no_main]
libfuzzer_sys::fuzz_target!(
    init: sidecar_native_fuzz::warm_up("template_source"),
    |data: &[u8]| sidecar_native_fuzz::template_source::run(data)
);
