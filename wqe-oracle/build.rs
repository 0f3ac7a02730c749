//! Compiles libmlx5's `providers/mlx5/qp.c` and `cq.c`, unmodified, from rdma-core 55's source in
//! the crates.io package ibverbs-sys (unpacked by `cargo fetch`, never built), with `c/shim.c`,
//! twice:
//! - recorded: with the barriers and MMIO stores of `c/record/` in place of rdma-core's
//!   `util/udma_barrier.h` and `util/mmio.h`, for the tests that compare what libmlx5 does;
//! - plain: with rdma-core's own, for instruction counts; every global symbol of these objects
//!   renamed with a `plain_` prefix (found with `nm` in the recorded objects) so that both link
//!   into one binary.
//!
//! The tree is the one softmlx5's build script found and configured (its `config.h` and kernel ABI
//! headers), handed over as `DEP_SOFTMLX5_RDMA_CORE_SOURCE` and `DEP_SOFTMLX5_RDMA_CORE_BUILD`.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    // The rdma-core tree softmlx5's build script found and configured: one place does it.
    let dep = |key: &str| {
        PathBuf::from(env::var(format!("DEP_SOFTMLX5_{key}")).unwrap_or_else(|_| panic!("DEP_SOFTMLX5_{key}")))
    };
    let (source, build) = (dep("RDMA_CORE_SOURCE"), dep("RDMA_CORE_BUILD"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));

    let mlx5 = source.join("providers/mlx5");
    let files = [mlx5.join("qp.c"), mlx5.join("cq.c"), PathBuf::from("c/shim.c")];
    let compiler = |recorded: bool| {
        let mut compiler = cc::Build::new();
        compiler.files(&files);
        if recorded {
            // Before rdma-core's headers, so that these replace util/mmio.h and util/udma_barrier.h.
            compiler.include("c/record").define("ORACLE_RECORDED", None);
        }
        compiler.out_dir(out.join(if recorded { "recorded" } else { "plain" }));
        compiler
            .include("c")
            .include(build.join("include"))
            .include(&mlx5)
            .include(&source)
            .flag("-std=gnu11")
            .warnings(false)
            .opt_level(2);
        compiler
    };

    let recorded = compiler(true).compile_intermediates();
    let mut plain = compiler(false);
    for symbol in defined_globals(&recorded) {
        plain.define(&symbol, Some(format!("plain_{symbol}").as_str()));
    }
    // The recorder's two functions exist only in the recorded objects.
    let archive = |name: &str, objects: &[PathBuf]| {
        let mut build = cc::Build::new();
        build.objects(objects).compile(name);
    };
    archive("mlx5_oracle_recorded", &recorded);
    let plain = plain.compile_intermediates();
    archive("mlx5_oracle_plain", &plain);

    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed=build.rs");
}

/// The global symbols `objects` define (`nm --defined-only --extern-only`).
fn defined_globals(objects: &[PathBuf]) -> Vec<String> {
    let output = Command::new("nm")
        .args(["--defined-only", "--extern-only", "--format=posix"])
        .args(objects)
        .output()
        .unwrap_or_else(|error| panic!("nm: {error} (binutils)"));
    assert!(
        output.status.success(),
        "nm: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut symbols: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (name, kind) = (fields.next()?, fields.next()?);
            // Functions and data; the file headers `nm` prints for each object end with ':'.
            (!name.ends_with(':') && "TDBRC".contains(kind)).then(|| name.to_owned())
        })
        .filter(|name| !name.starts_with("oracle_barrier") && !name.starts_with("oracle_store"))
        .collect();
    symbols.sort();
    symbols.dedup();
    symbols
}
