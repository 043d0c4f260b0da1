//! Runs one input through one target without libFuzzer, to debug a finding:
//! `cargo run --release --manifest-path native/fuzz/Cargo.toml --target-dir native/target
//!  --example run_one -- <target> <file>...`

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (target, files) = args
        .split_first()
        .expect("usage: run_one <target> <file>...");
    let run = sidecar_native_fuzz::TARGETS
        .iter()
        .find(|(n, _)| n == target)
        .unwrap_or_else(|| panic!("unknown target {target}"))
        .1;
    for file in files {
        let data = std::fs::read(file).expect("readable input");
        eprintln!("{file}: {} bytes", data.len());
        run(&data);
        eprintln!("{file}: ok");
    }
}
