//! Build-time code generation:
//! - the protobuf messages of `protos/sidecar/v1/*.proto` as Rust types (prost), included by
//!   `src/wire`, so the messages the core reads and writes follow the contract's field numbers;
//! - `include/sidecar_native.h` from the `ffi` module (cbindgen), so the header the Python loader
//!   reads can never disagree with the exports. The file is only rewritten when its content
//!   changes, which keeps the committed copy stable and lets CI detect drift with `git diff`.

use std::path::{Path, PathBuf};

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    compile_protos(&crate_dir);
    write_header(&crate_dir);
}

/// Generates `$OUT_DIR/sidecar.v1.rs` with protoc from the `protoc-bin-vendored` crate.
fn compile_protos(crate_dir: &Path) {
    let protos = crate_dir.join("../protos");
    let files = [
        protos.join("sidecar/v1/preprocessor.proto"),
        protos.join("sidecar/v1/kv_router.proto"),
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("protoc-bin-vendored has a protoc");
    prost_build::Config::new()
        .protoc_executable(protoc)
        .compile_protos(&files, &[protos])
        .expect("protos/sidecar/v1 compiles");
}

fn write_header(crate_dir: &Path) {
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is valid");
    let bindings = match cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
    {
        Ok(b) => b,
        Err(e) => {
            // A syntax error in the crate is reported better by rustc than by cbindgen.
            println!("cargo:warning=header not regenerated: {e}");
            return;
        }
    };
    let mut text = Vec::new();
    bindings.write(&mut text);
    let path = crate_dir.join("include").join("sidecar_native.h");
    if std::fs::read(&path).ok().as_deref() != Some(text.as_slice()) {
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("create include/");
        std::fs::write(&path, text).expect("write the header");
    }
}
