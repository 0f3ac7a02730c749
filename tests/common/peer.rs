//! Example programs run as peers by the ping-pong tests: a child process whose output two
//! threads collect, waited for up to a deadline and killed past it (or when dropped, e.g. by a
//! failed assertion), and what it printed and how it ended.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A peer, or a pair of peers, must be done within this.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// `target/<profile>/examples/<name>`, found from the test binary's own path
/// (`target/<profile>/deps/<test>-…`). With `build_features`, run under cargo (`CARGO` is set),
/// it first builds the example with those features and the test's own, since `cargo test --test
/// <test>` does not build examples whose required features it lacks; the test's own features
/// keep the library as the tests built it (under `cargo test --all-features`, which built the
/// example already, cargo has nothing to do). Without `build_features`, the example must be built
/// already (`cargo test` builds the examples it can with the tests, and `scripts/device-suite`
/// builds them all for the VM).
pub fn example_binary(name: &str, build_features: Option<&str>) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    if let (Some(features), Ok(cargo)) = (build_features, std::env::var("CARGO")) {
        let target_dir = profile_dir.parent().expect("target/<profile>");
        let mut command = Command::new(cargo);
        command
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "--example",
                name,
                "--features",
                &with_own_features(features),
                "--target-dir",
            ])
            .arg(target_dir);
        match profile_dir.file_name().and_then(|profile| profile.to_str()) {
            Some("debug") | None => {},
            Some(profile) => {
                command.args(["--profile", profile]);
            },
        }
        let output = command.output().expect("run cargo build");
        assert!(
            output.status.success(),
            "cargo build --example {name} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the examples (cargo test --all-features builds them)",
        path.display()
    );
    path
}

/// `features` and the features this test binary was built with, comma-separated.
fn with_own_features(features: &str) -> String {
    let own = [
        ("mlx5", cfg!(feature = "mlx5")),
        ("serde", cfg!(feature = "serde")),
        ("tokio", cfg!(feature = "tokio")),
    ];
    let mut all: Vec<&str> = features.split(',').collect();
    all.extend(own.iter().filter(|(_, on)| *on).map(|(name, _)| *name));
    all.sort_unstable();
    all.dedup();
    all.join(",")
}

/// Owned copies of `args`, as [`Peer::spawn`] takes them.
pub fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Whether some socket listens on TCP `port` (IPv4 or IPv6), from /proc/net/tcp{,6}. Probing
/// with a connection would not do: a ping-pong server accepts exactly one client.
pub fn listening(port: u16) -> bool {
    let port = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|table| {
            table.lines().skip(1).any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // local_address is field 1, st (0A = LISTEN) field 3.
                fields.len() > 3 && fields[1].ends_with(&port) && fields[3] == "0A"
            })
        })
    })
}

/// A running peer whose output two threads collect; killed if dropped while running (a failed
/// assertion, a timeout).
pub struct Peer {
    role: &'static str,
    program: PathBuf,
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

/// What a peer printed and how it ended (`None`: killed at the time limit).
pub struct Finished {
    pub role: &'static str,
    pub program: PathBuf,
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match self.status {
            Some(status) => status.to_string(),
            None => "killed at the time limit".to_string(),
        };
        write!(
            f,
            "--- {} ({}): {status}\n--- stdout:\n{}--- stderr:\n{}",
            self.role,
            self.program.display(),
            self.stdout,
            self.stderr
        )
    }
}

impl Finished {
    /// Exited by itself with status 0.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Exited by itself with status 1 (the examples' failure status, not clap's 2).
    pub fn failed_cleanly(&self) -> bool {
        self.status.is_some_and(|s| s.code() == Some(1))
    }
}

fn collect(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

impl Peer {
    /// Starts `program` with `args`, its standard input closed.
    pub fn spawn(role: &'static str, program: &Path, args: &[String]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let stdout = child.stdout.take().map(collect);
        let stderr = child.stderr.take().map(collect);
        Self {
            role,
            program: program.to_path_buf(),
            child,
            stdout,
            stderr,
        }
    }

    /// Runs `program` with `args` to its end, at most [`TIMEOUT`].
    pub fn run(role: &'static str, program: &Path, args: &[String]) -> Finished {
        Self::spawn(role, program, args).finish(Instant::now() + TIMEOUT)
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits until the peer exits or `deadline` passes, then kills it if it still runs.
    pub fn finish(mut self, deadline: Instant) -> Finished {
        let mut status = None;
        loop {
            if let Ok(Some(exit)) = self.child.try_wait() {
                status = Some(exit);
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let join =
            |handle: Option<JoinHandle<String>>| handle.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        Finished {
            role: self.role,
            program: self.program.clone(),
            status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `server`, then, once it listens on `port`, `client`, both until `TIMEOUT` from now;
/// returns both outcomes (server first). A server that exits or times out before it listens is
/// a panic with its output.
pub fn run_pair(
    server: &Path, server_args: &[String], client: &Path, client_args: &[String], port: u16,
) -> (Finished, Finished) {
    let deadline = Instant::now() + TIMEOUT;
    let mut server_peer = Peer::spawn("server", server, server_args);
    while !listening(port) {
        if server_peer.exited() || Instant::now() >= deadline {
            panic!(
                "the server never listened on port {port}\n{}",
                server_peer.finish(deadline)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = Peer::spawn("client", client, client_args).finish(deadline);
    let server = server_peer.finish(deadline);
    (server, client)
}
