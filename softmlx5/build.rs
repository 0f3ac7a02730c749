//! Builds the software ConnectX, the one place of this workspace that compiles libmlx5: `c/*.c`
//! with libmlx5's own `providers/mlx5/qp.c`, `cq.c` and
//! `srq.c`, unmodified, from rdma-core 55's source in the crates.io package ibverbs-sys (unpacked
//! by `cargo fetch`, never built), linked into one shared object under both names the programs
//! open, `OUT_DIR/lib/libibverbs.so.1` and `libmlx5.so.1` (a symbolic link: glibc loads it once).
//! Only the verbs entries are exported (`-fvisibility=hidden`, `SOFT_EXPORT`). Also the archives the
//! `oracle` module links (`compile_oracle`).
//!
//! rdma-core's cmake configures the tree (its `config.h`) and generates the kernel ABI headers
//! (`make kern-abi`) in `OUT_DIR`; `cargo:rdma_core_source` and `cargo:rdma_core_build` hand both
//! to the packages that depend on this one (`DEP_SOFTMLX5_*`).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const IBVERBS_SYS: &str = "ibverbs-sys-0.3.2+55.0";
const DEVICE_FILES: [&str; 10] = [
    "completion.c",
    "control.c",
    "devices.c",
    "engine.c",
    "fabric.c",
    "memory.c",
    "provider.c",
    "queue_pair.c",
    "shared_receive_queue.c",
    "sysfs.c",
];

fn main() {
    let source = rdma_core_source();
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let build = out.join("rdma-core");
    configure(&source, &build);
    println!("cargo:rdma_core_source={}", source.display());
    println!("cargo:rdma_core_build={}", build.display());

    let mlx5 = source.join("providers/mlx5");
    let mut compiler = cc::Build::new();
    compiler
        .files(["qp.c", "cq.c", "srq.c"].map(|file| mlx5.join(file)))
        .files(DEVICE_FILES.map(|file| Path::new("c").join(file)))
        .include("c")
        .include("include")
        .include(build.join("include"))
        .include(&mlx5)
        .include(&source)
        .flag("-std=gnu11")
        .flag("-fvisibility=hidden")
        .pic(true)
        .warnings(false)
        .opt_level(2)
        .debug(true)
        .out_dir(out.join("objects"));
    let objects = compiler.compile_intermediates();

    let lib = out.join("lib");
    std::fs::create_dir_all(&lib).expect("create OUT_DIR/lib");
    let library = lib.join("libibverbs.so.1");
    let mut link = compiler.get_compiler().to_command();
    link.arg("-shared")
        .arg("-o")
        .arg(&library)
        .arg("-Wl,-soname,libibverbs.so.1")
        .arg("-Wl,-z,defs")
        .args(&objects)
        .arg("-lpthread");
    run(&mut link);
    let alias = lib.join("libmlx5.so.1");
    let _ = std::fs::remove_file(&alias);
    std::os::unix::fs::symlink("libibverbs.so.1", &alias).expect("link libmlx5.so.1");
    compile_oracle(&source, &build, &out);
    println!("cargo:rustc-env=SOFTMLX5_LIBRARY_DIR={}", lib.display());
    // rdma-core's published headers, for C programs built against the device (tests/c_program.rs).
    println!(
        "cargo:rustc-env=SOFTMLX5_RDMA_CORE_INCLUDE={}",
        build.join("include").display()
    );
    println!("cargo:library_dir={}", lib.display());
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed=include");
    println!("cargo:rerun-if-changed=build.rs");
}

/// libmlx5's `qp.c` and `cq.c` again, with `c/oracle/shim.c`, as archives the `oracle` module
/// links (a program takes their objects only when it calls the oracle), twice:
/// - recorded: with the barriers and MMIO stores of `c/oracle/record/` in place of rdma-core's
///   `util/udma_barrier.h` and `util/mmio.h`, for the tests that compare what libmlx5 does;
/// - plain: with rdma-core's own, for instruction counts; every global symbol of these objects
///   renamed with a `plain_` prefix (found with `nm` in the recorded objects) so that both link
///   into one binary.
fn compile_oracle(source: &Path, build: &Path, out: &Path) {
    let mlx5 = source.join("providers/mlx5");
    let files = [mlx5.join("qp.c"), mlx5.join("cq.c"), PathBuf::from("c/oracle/shim.c")];
    let compiler = |recorded: bool| {
        let mut compiler = cc::Build::new();
        compiler.files(&files);
        if recorded {
            // Before rdma-core's headers, so that these replace util/mmio.h and util/udma_barrier.h.
            compiler.include("c/oracle/record").define("ORACLE_RECORDED", None);
        }
        compiler.out_dir(out.join(if recorded { "oracle-recorded" } else { "oracle-plain" }));
        compiler
            .include("c/oracle")
            .include(build.join("include"))
            .include(&mlx5)
            .include(source)
            .flag("-std=gnu11")
            .warnings(false)
            .opt_level(2)
            .cargo_metadata(false);
        compiler
    };
    let recorded = compiler(true).compile_intermediates();
    let mut plain = compiler(false);
    for symbol in defined_globals(&recorded) {
        plain.define(&symbol, Some(format!("plain_{symbol}").as_str()));
    }
    std::fs::create_dir_all(out.join("oracle")).expect("create OUT_DIR/oracle");
    let archive = |name: &str, objects: &[PathBuf]| {
        cc::Build::new()
            .objects(objects)
            .out_dir(out.join("oracle"))
            .cargo_metadata(false)
            .compile(name);
    };
    archive("mlx5_oracle_recorded", &recorded);
    archive("mlx5_oracle_plain", &plain.compile_intermediates());
    println!("cargo:rustc-link-search=native={}", out.join("oracle").display());
    println!("cargo:rustc-link-lib=static=mlx5_oracle_recorded");
    println!("cargo:rustc-link-lib=static=mlx5_oracle_plain");
}

/// The global symbols `objects` define (`nm --defined-only --extern-only`), but the recorder's
/// own (which exist only in the recorded objects).
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
