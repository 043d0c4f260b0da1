//! Generates the client code from `protos/sidecar/v1/*.proto` (the contract the Python server is
//! generated from too) with protoc from the `protoc-bin-vendored` crate.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let protos = manifest.join("../../protos");
    let files = [
        protos.join("sidecar/v1/preprocessor.proto"),
        protos.join("sidecar/v1/kv_router.proto"),
        protos.join("sidecar/v1/admin.proto"),
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    // prost-build runs the protoc named by PROTOC.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_protos(&files, &[protos])?;
    Ok(())
}
