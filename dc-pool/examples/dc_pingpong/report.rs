//! What the sides print: the banner, the results in perftest's layout, the report the client
//! sends the server, and errors with their sources.
use super::*;

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Report {
    Latency(LatencyReport),
    Bandwidth(BandwidthReport),
}

/// Latency of each request from its post to its completion, in microseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct LatencyReport {
    pub(crate) bytes: u32,
    pub(crate) iterations: u32,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) typical: f64,
    pub(crate) average: f64,
    pub(crate) stdev: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
}

/// Bandwidth over the run: from the first post to the last completion; the peak over the best
/// span of signalled windows (none past [`MAX_PEAK_WINDOWS`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct BandwidthReport {
    pub(crate) bytes: u32,
    pub(crate) iterations: u32,
    pub(crate) peak_bytes_per_second: Option<f64>,
    pub(crate) average_bytes_per_second: f64,
    pub(crate) messages_per_second: f64,
}

/// Requests completed per destination (target), and with a pool what it handed back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DestinationCounts {
    pub(crate) completed: Vec<u64>,
    pub(crate) pool: Option<PoolCounts>,
}

/// The pool's events other than completions.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct PoolCounts {
    /// Requests handed back for a retry (and posted again).
    pub(crate) retried: u64,
    /// Requests that failed.
    pub(crate) failed: u64,
    /// Targets reported ready (an initiator granted from the pool's line).
    pub(crate) ready: u64,
}

impl DestinationCounts {
    /// The report's line without its leading space, for messages.
    pub(crate) fn summary(&self) -> String {
        self.to_string().trim_start().to_string()
    }
}

impl fmt::Display for DestinationCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DESTINATION_LINE)?;
        for count in &self.completed {
            write!(f, " {count}")?;
        }
        if let Some(pool) = self.pool {
            write!(
                f,
                "; pool: Retry {}, Failed {}, Ready {}",
                pool.retried, pool.failed, pool.ready
            )?;
        }
        Ok(())
    }
}

/// Formats an error with its chain of sources.
pub(crate) fn report(err: &dyn Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(err) = source {
        text.push_str(": ");
        text.push_str(&err.to_string());
        source = err.source();
    }
    text
}

/// The client's settings, for its banner.
pub(crate) struct ClientSettings {
    pub(crate) tx_depth: u32,
    pub(crate) cq_mod: u32,
    pub(crate) inline: u32,
    /// log2 of the DCI streams per initiator (streams policy).
    pub(crate) streams_log: Option<u8>,
}

/// perftest's test banner and settings, for one side.
pub(crate) fn print_banner(parameters: &TestParameters, device: &str, port: &Port, client: Option<&ClientSettings>) {
    println!("{RESULT_LINE}");
    let test = if parameters.bw { "BW" } else { "Ping-pong Latency" };
    println!("                    DC {} {test} Test", parameters.mode.verb());
    println!(" Device          : {device:<16}Transport type : IB");
    println!(" Connection type : DC              Using SRQ      : ON");
    if parameters.targets > 1 {
        println!(" DC targets      : {} (on one SRQ)", parameters.targets);
    }
    if let Some(pool) = parameters.pool {
        println!(" DC initiators   : {} (pool, policy {})", pool.initiators, pool.policy);
    }
    if let Some(settings) = client {
        if let Some(log) = settings.streams_log {
            println!(" DCI streams     : {} per initiator", 1u32 << log);
        }
        if parameters.bw {
            let per_initiator = if parameters.pool.is_some() {
                " per DC initiator"
            } else {
                ""
            };
            println!(" TX depth        : {}{per_initiator}", settings.tx_depth);
            println!(" CQ Moderation   : {}", settings.cq_mod);
        }
        if parameters.mode != Mode::Read {
            println!(" Max inline data : {}[B]", settings.inline);
        }
    }
    println!(" Mtu             : {}[B]", mtu_bytes(port.mtu));
    println!(" Link type       : {}", if port.roce { "Ethernet" } else { "IB" });
    println!(" GID index       : {}", port.gid_index);
    println!(" Message size    : {}[B]", parameters.size);
    println!(" Iterations      : {}", parameters.iters);
    println!(" Data ex. method : TCP (JSON)");
    println!("{RESULT_LINE}");
}

/// QP numbers as one line's text: "QPN 0x…" for one, else the first few and how many.
pub(crate) fn qp_numbers_text(numbers: &[u32]) -> String {
    match numbers {
        [one] => format!("QPN {one:#08x}"),
        _ => {
            let listed: Vec<String> = numbers.iter().take(LISTED).map(|n| format!("{n:#08x}")).collect();
            let more = if numbers.len() > LISTED { ", …" } else { "" };
            format!("QPNs {}{more} ({} DC initiators)", listed.join(", "), numbers.len())
        },
    }
}

pub(crate) fn latency_report(parameters: &TestParameters, samples: &mut [f64]) -> LatencyReport {
    samples.sort_by(f64::total_cmp);
    let count = samples.len().max(1) as f64;
    let average = samples.iter().sum::<f64>() / count;
    let variance = samples.iter().map(|s| (s - average).powi(2)).sum::<f64>() / count;
    let percentile = |p: f64| {
        let index = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len().max(1)) - 1;
        samples.get(index).copied().unwrap_or(0.0)
    };
    LatencyReport {
        bytes: parameters.size,
        iterations: parameters.iters,
        min: samples.first().copied().unwrap_or(0.0),
        max: samples.last().copied().unwrap_or(0.0),
        typical: percentile(0.5),
        average,
        stdev: variance.sqrt(),
        p99: percentile(0.99),
        p999: percentile(0.999),
    }
}

/// The bandwidth figures from the windows of `cq_mod` requests: `posted_at[w]` is when the
/// first request of window `w` was posted, `completed_at[w]` when `min((w + 1)·cq_mod, iters)`
/// requests had completed. The peak is the best rate over the spans from a window's first post
/// to a later window's completion; the average runs from the first post to the last completion.
pub(crate) fn bandwidth_report(
    parameters: &TestParameters, cq_mod: u64, posted_at: &[Instant], completed_at: &[Instant],
) -> BandwidthReport {
    let iters = u64::from(parameters.iters);
    let elapsed = completed_at
        .last()
        .zip(posted_at.first())
        .map(|(end, start)| end.duration_since(*start).as_secs_f64())
        .unwrap_or_default()
        .max(f64::MIN_POSITIVE);
    let bytes = parameters.size as f64;
    let peak = (posted_at.len() <= MAX_PEAK_WINDOWS).then(|| {
        let mut best = 0.0f64;
        for (first, start) in posted_at.iter().enumerate() {
            for (last, end) in completed_at.iter().enumerate().skip(first) {
                let messages = (((last as u64 + 1) * cq_mod).min(iters) - first as u64 * cq_mod) as f64;
                let seconds = end.duration_since(*start).as_secs_f64();
                if seconds > 0.0 {
                    best = best.max(messages * bytes / seconds);
                }
            }
        }
        best
    });
    BandwidthReport {
        bytes: parameters.size,
        iterations: parameters.iters,
        peak_bytes_per_second: peak,
        average_bytes_per_second: iters as f64 * bytes / elapsed,
        messages_per_second: iters as f64 / elapsed,
    }
}

pub(crate) fn print_report(report: &Report, destinations: Option<&DestinationCounts>, gbits: bool) {
    match report {
        Report::Bandwidth(bw) => {
            // MiB = 2^20 bytes; Gb = 10^9 bits (perftest's --report_gbits).
            let (unit, scale) = if gbits {
                ("Gb/sec", 8.0 / 1e9)
            } else {
                ("MiB/sec", 1.0 / f64::from(1u32 << 20))
            };
            println!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]");
            println!(
                " {:<10} {:<14} {:<19.2} {:<21.2} {:.6}",
                bw.bytes,
                bw.iterations,
                bw.peak_bytes_per_second.unwrap_or(0.0) * scale,
                bw.average_bytes_per_second * scale,
                bw.messages_per_second / 1e6
            );
        },
        Report::Latency(lat) => {
            println!(
                " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   \
                 99% percentile[usec]   99.9% percentile[usec]"
            );
            println!(
                " {:<6} {:<11}    {:<11.2}    {:<11.2}  {:<15.2}    {:<11.2}    {:<13.2}   {:<20.2}   {:.2}",
                lat.bytes, lat.iterations, lat.min, lat.max, lat.typical, lat.average, lat.stdev, lat.p99, lat.p999
            );
            println!(" (each request from its post to its completion)");
        },
    }
    if let Some(destinations) = destinations {
        println!("{destinations}");
    }
    println!("{RESULT_LINE}");
}
