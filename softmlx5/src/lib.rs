//! A software ConnectX for DC: a replacement `libibverbs.so.1` and `libmlx5.so.1` that programs
//! load instead of rdma-core's when [`library_dir`] is first on `LD_LIBRARY_PATH`. See README.md.
use std::path::Path;
use std::process::Command;

/// The directory holding the software device's `libibverbs.so.1` and `libmlx5.so.1`.
pub fn library_dir() -> &'static Path {
    Path::new(env!("SOFTMLX5_LIBRARY_DIR"))
}

/// `program` set up to run on the software device: [`library_dir`] first on its
/// `LD_LIBRARY_PATH`.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    let mut path = library_dir().as_os_str().to_owned();
    if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH").filter(|rest| !rest.is_empty()) {
        path.push(":");
        path.push(rest);
    }
    command.env("LD_LIBRARY_PATH", path);
    command
}
