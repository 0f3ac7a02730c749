//! What a report says of the run that made it: the command line, the commit of the checkout the
//! example was built from, and the time it started (UTC, RFC 3339).
//!
//! The commit is read when the program runs, with `git rev-parse HEAD` in the directory cargo
//! built the example from (an example has no build script to stamp it in): it is the commit of
//! that checkout now, which is the binary's only if the checkout did not move since the build.
//! `modified` says whether tracked files differed from it; outside a git checkout (a published
//! crate, no `git`) both are unknown.
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The run a report comes from.
#[derive(Serialize)]
pub struct Run {
    /// The program and its arguments, as given.
    command_line: Vec<String>,
    checkout: Checkout,
    /// When the run started, UTC (RFC 3339, to the second).
    time: String,
}

/// The checkout the example was built from, as `git` sees it when the program runs.
#[derive(Serialize)]
struct Checkout {
    directory: &'static str,
    /// `git rev-parse HEAD` there, or `unknown`.
    commit: String,
    /// Whether tracked files differ from that commit (`git status --porcelain
    /// --untracked-files=no`); `null` when `git` could not say.
    modified: Option<bool>,
}

impl Run {
    /// This run: its arguments, the checkout's commit, and now.
    pub fn read() -> Self {
        let seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let directory = env!("CARGO_MANIFEST_DIR");
        Self {
            command_line: std::env::args_os()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect(),
            checkout: Checkout {
                directory,
                commit: git(directory, &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into()),
                modified: git(directory, &["status", "--porcelain", "--untracked-files=no"])
                    .map(|changes| !changes.is_empty()),
            },
            time: rfc3339_utc(seconds),
        }
    }
}

/// What `git args` in `directory` printed (trimmed), if it ran and succeeded.
fn git(directory: &str, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(Path::new(directory))
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// `seconds` since the Unix epoch as an RFC 3339 UTC time: `2024-02-29T13:05:09Z`.
pub fn rfc3339_utc(seconds: u64) -> String {
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: (year, month, day). Counts in eras of
/// 400 years (146 097 days) from 0000-03-01, so that the leap day ends each year of the count.
fn civil_date(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::{rfc3339_utc, Run};

    #[test]
    fn seconds_since_the_epoch_become_an_rfc3339_utc_time() {
        for (seconds, time) in [
            (0, "1970-01-01T00:00:00Z"),
            (86_399, "1970-01-01T23:59:59Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (951_868_800, "2000-03-01T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
            (1_709_211_909, "2024-02-29T13:05:09Z"),
            (4_102_444_800, "2100-01-01T00:00:00Z"),
            (4_107_542_400, "2100-03-01T00:00:00Z"),
        ] {
            assert_eq!(rfc3339_utc(seconds), time, "{seconds}");
        }
    }

    /// The run has the command line, a commit that is 40 hex digits or `unknown`, and a time.
    #[test]
    fn a_run_records_the_command_line_the_commit_and_the_time() {
        let run = serde_json::to_value(Run::read()).expect("serialises");
        let first = run["command_line"][0].as_str().expect("the program");
        assert_eq!(first, std::env::args().next().expect("argv[0]"));
        let commit = run["checkout"]["commit"].as_str().expect("a commit");
        assert!(
            commit == "unknown" || (commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{commit}"
        );
        assert_eq!(run["checkout"]["directory"], env!("CARGO_MANIFEST_DIR"));
        let time = run["time"].as_str().expect("a time");
        assert!(
            time.len() == 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
            "{time}"
        );
    }
}
