//! Generates `include/sidecar_native.h` from the `ffi` module, so the header the Python loader reads
//! can never disagree with the exports. The file is only rewritten when its content changes, which
//! keeps the committed copy stable and lets CI detect drift with `git diff`.

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is valid");
    let bindings = match cbindgen::Builder::new()
        .with_crate(&crate_dir)
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
