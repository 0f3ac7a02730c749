//! Compiles libmlx5's `providers/mlx5/qp.c` and `cq.c`, unmodified, from rdma-core 55's source in
//! the crates.io package ibverbs-sys (unpacked by `cargo fetch`, never built), with `c/shim.c`
//! and the recording barriers and MMIO stores of `c/record/`. rdma-core's cmake configures the
//! tree (its `config.h`) and generates the kernel ABI headers (`make kern-abi`) in `OUT_DIR`.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const IBVERBS_SYS: &str = "ibverbs-sys-0.3.2+55.0";

fn main() {
    let source = rdma_core_source();
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let build = out.join("rdma-core");
    configure(&source, &build);

    let mlx5 = source.join("providers/mlx5");
    cc::Build::new()
        .files([mlx5.join("qp.c"), mlx5.join("cq.c"), "c/shim.c".into()])
        // The recording stand-ins first, so that they replace rdma-core's util/mmio.h and
        // util/udma_barrier.h.
        .include("c/record")
        .include("c")
        .include(build.join("include"))
        .include(&mlx5)
        .include(&source)
        .flag("-std=gnu11")
        .warnings(false)
        .opt_level(2)
        .compile("mlx5_oracle");

    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed=build.rs");
}

/// rdma-core's source tree, where `cargo fetch` unpacked ibverbs-sys.
fn rdma_core_source() -> PathBuf {
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let registry = cargo_home.join("registry/src");
    let found = std::fs::read_dir(&registry).ok().and_then(|indexes| {
        indexes
            .filter_map(Result::ok)
            .map(|index| index.path().join(IBVERBS_SYS).join("vendor/rdma-core"))
            .find(|tree| tree.join("providers/mlx5/qp.c").is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "rdma-core's source ({IBVERBS_SYS}) is not under {}: run `cargo fetch` (scripts/install-deps does)",
            registry.display()
        )
    })
}

/// Configures rdma-core in `build` (its `config.h`, the headers it publishes) and generates the
/// kernel ABI headers, once.
fn configure(source: &Path, build: &Path) {
    if build.join("include/kernel-abi/mlx5-abi.h").is_file() {
        return;
    }
    std::fs::create_dir_all(build).expect("create the rdma-core build directory");
    run(Command::new("cmake").arg("-S").arg(source).arg("-B").arg(build).args([
        "-DNO_MAN_PAGES=1",
        "-DNO_PYVERBS=1",
        "-DENABLE_RESOLVE_NEIGH=OFF",
        "-DENABLE_STATIC=OFF",
    ]));
    run(Command::new("cmake")
        .arg("--build")
        .arg(build)
        .args(["--target", "kern-abi"]));
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{command:?}: {error} (is cmake installed?)"));
    if !output.status.success() {
        panic!(
            "{command:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
