//! A C program using rdma-core's verbs and mlx5dv calls runs on the software device unchanged:
//! built against rdma-core's own headers and linked with the device's `libibverbs.so.1`, it
//! writes and sends over DC and checks both.
use std::path::Path;
use std::process::Command;

/// Builds `tests/c/NAME.c` against rdma-core's headers and the device's library, runs it on the
/// device, and returns its standard output after checking it exited 0.
fn run(name: &str) -> String {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let built = Command::new("cc")
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .arg(format!("-I{}", env!("SOFTMLX5_RDMA_CORE_INCLUDE")))
        .arg(softmlx5::library_dir().join("libibverbs.so.1"))
        .status()
        .expect("cc");
    assert!(built.success(), "cc {}", source.display());
    let run = softmlx5::command(&out).output().expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}\n{stdout}{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    stdout.into_owned()
}

#[test]
fn a_c_program_writes_and_sends_over_dc() {
    let stdout = run("dc_write");
    assert!(
        stdout.contains("softmlx5_0: DC write and send from C checked"),
        "{stdout}"
    );
}

/// The control path's rules, tried from C: each refused as the kernel or libmlx5 refuses it.
#[test]
fn the_kernels_and_libmlx5s_rules_hold_for_a_c_program() {
    let stdout = run("dc_rules");
    assert!(stdout.contains("\n0 rules broken\n"), "{stdout}");
    assert_eq!(
        stdout.lines().filter(|line| line.starts_with("ok ")).count(),
        23,
        "{stdout}"
    );
}
