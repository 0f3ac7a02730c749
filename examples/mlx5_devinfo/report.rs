//! `mlx5_devinfo --dc-selftest --report FILE`: what the self-test saw, as JSON a user attaches to
//! an issue. First what a pass does not prove (`scope` and `not_tried`: the self-test is a
//! loopback), then the run (command line, commit, time), the versions (kernel, libibverbs and
//! libmlx5 with the rdma-core release they come from, whether libibverbs exports
//! `_ibv_query_gid_ex`, sideway-ext), the `MLX5_*` variables libmlx5 reads, the device (name,
//! vendor and part ids, the port and the GID each side used, with its network device and MTU),
//! the DC capabilities and device attributes the self-test reads, the direct path's BlueFlame
//! facts, the sizes the DC initiators were granted, and each step: `ok`, `failed` with the
//! error, or `skipped` with the reason, plus for a fault step the error completion ([`Fault`]:
//! status, vendor syndrome, time).
//!
//! Every step of [`step::ALL`] is in the report exactly once: one the self-test never reached
//! (the device is not mlx5, or an earlier step stopped it) is `skipped` with why.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use sideway::ibverbs::device_context::DeviceContext;
use sideway_ext::ibverbs::source_gid::SourceGidEntry;
use sideway_ext::mlx5::dc::initiator::DcInitiator;
use sideway_ext::mlx5::dc_capabilities::DcCapabilities;
use sideway_ext::mlx5::send_wqe_sizes::SendWqeSizes;

use crate::fault::Fault;
use crate::port::{GidFacts, PortFacts};
use crate::run::Run;

/// The self-test's steps, by the names its lines and the report give them.
pub mod step {
    pub const DC_TARGET: &str = "DC target at RTR";
    pub const DC_INITIATOR: &str = "DC initiator at RTS";
    pub const WRITE: &str = "RDMA WRITE";
    pub const READ: &str = "RDMA READ";
    pub const FETCH_ADD: &str = "atomic fetch-and-add";
    pub const COMPARE_SWAP: &str = "atomic compare-and-swap";
    pub const SEND: &str = "SEND into the shared receive queue";
    pub const WRONG_KEY: &str = "wrong DC key: error, recover, write again";
    pub const DESTROYED_TARGET: &str = "destroyed DC target: error, recover, write again";
    pub const STREAMS: &str = "DCI streams";
    pub const DIRECT: &str = "direct path: WRITE and inline SEND through sideway-ext-dc-direct";
    /// Every step, in the order the self-test runs them.
    pub const ALL: [&str; 11] = [
        DC_TARGET,
        DC_INITIATOR,
        WRITE,
        READ,
        FETCH_ADD,
        COMPARE_SWAP,
        SEND,
        WRONG_KEY,
        DESTROYED_TARGET,
        STREAMS,
        DIRECT,
    ];
}

/// What a pass proves, first in the report.
const SCOPE: &str = "a loopback: one device, one port, one GID per side; the DC target and the DC initiator \
                     are on this host and address each other. A pass says DC works on this device with this \
                     host's kernel and libraries, not that two hosts reach each other (dc_pingpong between \
                     two hosts tries that)";

/// What the loopback does not try, whatever its outcome.
const NOT_TRIED: [&str; 7] = [
    "routing: the destination is this port's own GID; no IP route, router or second subnet is used",
    "ARP: the address handle resolves this host's own address, never a peer's MAC (RoCE)",
    "switch MTU: no switch forwards the packets, so none drops one larger than its MTU",
    "PFC and congestion control: no fabric between the two sides, no pause frames, no ECN marks",
    "a remote MTU: both sides have this port's MTU; a peer with another MTU is not tried",
    "another host's kernel, rdma-core, firmware or adapter",
    "ports and GIDs other than those in `device`",
];

/// Which side of the loopback.
pub enum Side {
    Target,
    Initiator,
}

/// The self-test's record: its lines are printed as its steps end, the report written at the end.
#[derive(Serialize)]
pub struct SelftestReport {
    program: &'static str,
    sideway_ext: &'static str,
    /// What a pass proves: a loopback.
    scope: &'static str,
    /// What the loopback does not try.
    not_tried: [&'static str; NOT_TRIED.len()],
    run: Run,
    /// Read when the report is written, once the libraries are loaded.
    versions: Option<Versions>,
    /// The `MLX5_*` environment variables in effect (libmlx5 reads them when a device is opened:
    /// `MLX5_SHUT_UP_BF`, `MLX5_QP_SIGNATURE`, …), read when the self-test starts.
    environment: BTreeMap<String, String>,
    device: Option<DeviceFacts>,
    capabilities: Option<Capabilities>,
    direct: DirectFacts,
    /// What each kind of DC initiator was granted, by the name of the step that built it.
    granted: Vec<Granted>,
    steps: Vec<Step>,
    /// Why the self-test stopped before its last step, if it did.
    stopped: Option<String>,
    /// `passed`, `failed`, `not mlx5`, or `not run` (no device to run on).
    outcome: &'static str,
}

#[derive(Serialize)]
struct Versions {
    /// `uname -r`.
    kernel: String,
    libibverbs: Library,
    libmlx5: Library,
    /// The rdma-core release libibverbs comes from, its major number (`55` of
    /// `libibverbs.so.1.14.55.0`): what decides which calls it has. `null` when the file name
    /// does not say.
    rdma_core: Option<u32>,
    libibverbs_exports: Exports,
}

/// Whether `libibverbs.so.1` exports the symbols the crate resolves by name (`dlsym`); `null`
/// when the library cannot be opened.
#[derive(Serialize)]
struct Exports {
    /// What `ibv_query_gid_ex` and `ibv_query_gid_table` call (rdma-core 32 and newer).
    #[serde(rename = "_ibv_query_gid_ex")]
    query_gid_ex: Option<bool>,
}

/// A library as this process mapped it (rdma-mummy-sys loads both with `dlopen`).
#[derive(Serialize)]
struct Library {
    /// The mapped file, symbolic links resolved; `null` when it is not loaded.
    file: Option<String>,
    /// The file's version suffix: `1.24.44.0` of `libmlx5.so.1.24.44.0`, or `unknown`.
    version: String,
    /// The rdma-core release the file comes from (its last two numbers: `44.0`), or `unknown`.
    rdma_core: String,
}

#[derive(Serialize, Default)]
struct DeviceFacts {
    name: String,
    /// `fw_ver` of `ibv_query_device`.
    firmware: Option<String>,
    vendor_id: Option<String>,
    vendor_part_id: Option<u32>,
    hardware_version: Option<u32>,
    max_qp_wr: Option<i32>,
    max_sge: Option<i32>,
    max_qp_rd_atom: Option<i32>,
    max_qp_init_rd_atom: Option<i32>,
    atomic_cap: Option<String>,
    /// Why `ibv_query_device` gave nothing.
    query_error: Option<String>,
    /// The port the self-test ran on (`null` when it could not be read: see `port_error`).
    port: Option<PortFacts>,
    port_error: Option<String>,
    /// The GID index the self-test addresses (given with `-g`, or picked) and its GID.
    gid_index: Option<u8>,
    gid: Option<String>,
    /// The source GID the DC target was brought up with (`null` before, or on InfiniBand
    /// without `-g`: the LID addresses it).
    target_gid: Option<GidFacts>,
    /// The source GID the DC initiator was brought up with (as the target's).
    initiator_gid: Option<GidFacts>,
}

#[derive(Serialize)]
struct Capabilities {
    is_mlx5: bool,
    dc_supported: bool,
    max_dc_rd_atom: Option<u64>,
    max_dc_init_rd_atom: Option<u64>,
    dci_streams_max_log_num_concurrent: Option<u8>,
    dci_streams_max_log_num_errored: Option<u8>,
    dc_odp: Option<String>,
    rc_max_qp_rd_atom: u32,
    rc_max_qp_init_rd_atom: u32,
    /// The HCA capability `max_wqe_sz_sq`: the largest send WQE, in bytes (`null`: unknown).
    max_wqe_sz_sq: Option<u32>,
    /// The HCA capability `max_wqe_sz_sq_dc`: the largest DC send WQE, in bytes (`null`: unknown).
    max_wqe_sz_sq_dc: Option<u32>,
    /// Whether the device reported both sizes (`QUERY_HCA_CAP`); `false`: they are the bound every
    /// device takes, as the library falls back to (`null`: not mlx5).
    wqe_sizes_reported: Option<bool>,
}

/// The direct path's doorbell (`sideway-ext-dc-direct`); `null` where unknown.
#[derive(Serialize, Default)]
struct DirectFacts {
    /// Whether the device has BlueFlame registers (`MLX5DV_CONTEXT_FLAGS_BLUEFLAME`, reported by
    /// rdma-core 58 and newer).
    blueflame: Option<bool>,
    /// The size in bytes of the register the direct DC initiator rings its doorbell through.
    register_size: Option<u32>,
}

/// The `MLX5_*` variables of `variables`, by name.
fn mlx5_variables(variables: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    variables.filter(|(name, _)| name.starts_with("MLX5_")).collect()
}

#[derive(Serialize)]
struct Granted {
    step: &'static str,
    qp_number: String,
    max_send_wr: u32,
    max_inline_data: u32,
    /// The deepest reads/atomics outstanding it takes (`max_rd_atomic`).
    max_read_atomic: u8,
    send_ops: String,
    dci_streams_log_num_concurrent: Option<u8>,
    dci_streams_log_num_errored: Option<u8>,
}

#[derive(Serialize)]
struct Step {
    name: &'static str,
    /// `ok`, `failed` or `skipped`.
    result: &'static str,
    /// What an `ok` step saw, why a step failed or was skipped.
    detail: String,
    /// A fault step's error completion.
    fault: Option<Fault>,
}

impl SelftestReport {
    /// An empty report: no device, no step yet; the run and the environment as they are now.
    pub fn new() -> Self {
        let environment = std::env::vars_os().map(|(name, value)| {
            (
                name.to_string_lossy().into_owned(),
                value.to_string_lossy().into_owned(),
            )
        });
        Self {
            program: "mlx5_devinfo --dc-selftest",
            sideway_ext: env!("CARGO_PKG_VERSION"),
            scope: SCOPE,
            not_tried: NOT_TRIED,
            run: Run::read(),
            versions: None,
            environment: mlx5_variables(environment),
            device: None,
            capabilities: None,
            direct: DirectFacts::default(),
            granted: Vec::new(),
            steps: Vec::new(),
            stopped: None,
            outcome: "failed",
        }
    }

    /// The line that says what a pass does not prove, for the end of the self-test's output.
    pub fn scope_line(&self) -> String {
        let not_tried: Vec<&str> = self
            .not_tried
            .iter()
            .filter_map(|item| item.split(':').next())
            .take(5)
            .collect();
        format!(
            "not tried: this is a loopback on one port and one GID, so a pass says nothing of {} \
             (the report's not_tried lists them; dc_pingpong between two hosts tries them)",
            not_tried.join(", ")
        )
    }

    /// The device `name` behind `ctx`, as `ibv_query_device` describes it.
    pub fn device(&mut self, ctx: &Arc<DeviceContext>, name: &str) {
        let mut facts = DeviceFacts {
            name: name.to_string(),
            ..DeviceFacts::default()
        };
        match ctx.query_device() {
            Ok(attr) => {
                facts.firmware = Some(attr.firmware_version());
                facts.vendor_id = Some(format!("{:#06x}", attr.vendor_id()));
                facts.vendor_part_id = Some(attr.vendor_part_id());
                facts.hardware_version = Some(attr.hardware_version());
                facts.max_qp_wr = Some(attr.max_qp_wr());
                facts.max_sge = Some(attr.max_sge());
                facts.max_qp_rd_atom = Some(attr.max_qp_rd_atom());
                facts.max_qp_init_rd_atom = Some(attr.max_qp_init_rd_atom());
                facts.atomic_cap = Some(format!("{:?}", attr.atomic_capability()));
            },
            Err(err) => facts.query_error = Some(crate::chain(&err)),
        }
        self.device = Some(facts);
    }

    /// The port the self-test runs on, as read (or why it could not be).
    pub fn port(&mut self, port: Result<PortFacts, String>) {
        if let Some(facts) = &mut self.device {
            match port {
                Ok(port) => facts.port = Some(port),
                Err(why) => facts.port_error = Some(why),
            }
        }
    }

    /// The local GID the self-test addresses.
    pub fn address(&mut self, gid_index: u8, gid: String) {
        if let Some(facts) = &mut self.device {
            facts.gid_index = Some(gid_index);
            facts.gid = Some(gid);
        }
    }

    /// The source GID `side` was brought up with on port `port` of the device, if any; its line.
    pub fn side_gid(&mut self, side: Side, port: u8, entry: Option<SourceGidEntry>) -> String {
        let Some(facts) = &mut self.device else {
            return String::new();
        };
        let gid = entry.map(|entry| GidFacts::read(&facts.name, port, &entry));
        let line = gid
            .as_ref()
            .map_or_else(|| "no source GID (InfiniBand: the LID)".to_string(), GidFacts::line);
        match side {
            Side::Target => facts.target_gid = gid,
            Side::Initiator => facts.initiator_gid = gid,
        }
        line
    }

    /// Whether the device has BlueFlame, where known.
    pub fn blueflame(&mut self, exists: Option<bool>) {
        self.direct.blueflame = exists;
    }

    /// The size of the register the direct DC initiator rings, where known.
    pub fn direct_register_size(&mut self, size: Option<u32>) {
        self.direct.register_size = size;
    }

    /// The DC capabilities the self-test decides by.
    pub fn capabilities(&mut self, dc: &DcCapabilities, sizes: Option<SendWqeSizes>) {
        self.capabilities = Some(Capabilities {
            is_mlx5: dc.is_mlx5(),
            dc_supported: dc.is_supported(),
            max_dc_rd_atom: dc.max_dc_rd_atom(),
            max_dc_init_rd_atom: dc.max_dc_init_rd_atom(),
            dci_streams_max_log_num_concurrent: dc.dci_streams().map(|c| c.max_log_num_concurrent),
            dci_streams_max_log_num_errored: dc.dci_streams().map(|c| c.max_log_num_errored),
            dc_odp: dc.dc_odp().map(|odp| format!("{odp:?}")),
            rc_max_qp_rd_atom: dc.rc_max_qp_rd_atom(),
            rc_max_qp_init_rd_atom: dc.rc_max_qp_init_rd_atom(),
            max_wqe_sz_sq: sizes.map(|sizes| sizes.max_wqe_sz_sq()),
            max_wqe_sz_sq_dc: sizes.map(|sizes| sizes.max_wqe_sz_sq_dc()),
            wqe_sizes_reported: sizes.map(|sizes| sizes.is_reported()),
        });
    }

    /// What `dci`, built by the step `step`, was granted.
    pub fn granted(&mut self, step: &'static str, dci: &DcInitiator) {
        self.granted.push(Granted {
            step,
            qp_number: format!("{:#x}", dci.qp_number()),
            max_send_wr: dci.max_send_wr(),
            max_inline_data: dci.max_inline_data(),
            max_read_atomic: dci.max_read_atomic(),
            send_ops: format!("{:?}", dci.send_ops_flags()),
            dci_streams_log_num_concurrent: dci.streams().map(|s| s.log_num_concurrent),
            dci_streams_log_num_errored: dci.streams().map(|s| s.log_num_errored),
        });
    }

    /// Prints and records a step's end: `ok` with what it saw, or `FAILED` with why.
    pub fn check(&mut self, name: &'static str, result: Result<String, String>) {
        self.check_fault(name, result, None);
    }

    /// As [`check`](Self::check), for a fault step with the error completion it got, if any.
    pub fn check_fault(&mut self, name: &'static str, result: Result<String, String>, fault: Option<Fault>) {
        let fault_line = fault.as_ref().map(|f| format!(" [{f}]")).unwrap_or_default();
        let (result, detail) = match result {
            Ok(detail) => {
                match detail.is_empty() {
                    true => println!("ok       {name}{fault_line}"),
                    false => println!("ok       {name}: {detail}{fault_line}"),
                }
                ("ok", detail)
            },
            Err(why) => {
                println!("FAILED   {name}: {why}{fault_line}");
                ("failed", why)
            },
        };
        self.steps.push(Step {
            name,
            result,
            detail,
            fault,
        });
    }

    /// Prints and records a skipped step with why.
    pub fn skip(&mut self, name: &'static str, why: &str) {
        println!("skipped  {name}: {why}");
        self.steps.push(Step {
            name,
            result: "skipped",
            detail: why.to_string(),
            fault: None,
        });
    }

    /// Whether a step failed.
    pub fn failed(&self) -> bool {
        self.steps.iter().any(|step| step.result == "failed")
    }

    /// Records why the self-test stops here: the steps not yet run are skipped with this reason
    /// (in the report only: they print no line).
    pub fn stop(&mut self, why: &str) {
        self.stopped = Some(why.to_string());
        self.skip_the_rest(why);
    }

    /// Records the steps not yet in the report as skipped, `not run: {why}`.
    fn skip_the_rest(&mut self, why: &str) {
        for name in step::ALL {
            if !self.steps.iter().any(|step| step.name == name) {
                self.steps.push(Step {
                    name,
                    result: "skipped",
                    detail: format!("not run: {why}"),
                    fault: None,
                });
            }
        }
    }

    /// The outcome the exit status says: `passed`, `failed`, `not mlx5` or `not run`.
    pub fn outcome(&mut self, outcome: &'static str) {
        self.outcome = outcome;
    }

    /// Writes the report as JSON to `path`, with the versions read now.
    pub fn write(&mut self, path: &Path) -> Result<(), String> {
        self.skip_the_rest("the self-test ended before it");
        self.versions = Some(Versions::read());
        let text = serde_json::to_string_pretty(self).map_err(|e| format!("cannot make the JSON: {e}"))?;
        std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

impl Versions {
    fn read() -> Self {
        // SAFETY: libibverbs' initialisers take no arguments, and rdma-mummy-sys has them run
        // when it loads the library itself; opening it again only counts a reference.
        let opened =
            unsafe { libloading::os::unix::Library::open(Some("libibverbs.so.1"), libloading::os::unix::RTLD_LAZY) }
                .ok();
        // SAFETY: the symbol is only looked up, never called.
        let query_gid_ex = opened
            .as_ref()
            .map(|library| unsafe { library.get::<unsafe extern "C" fn()>(b"_ibv_query_gid_ex\0") }.is_ok());
        // Read while libibverbs is open, so that it is mapped.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let libibverbs = Library::find(&maps, "libibverbs.so.");
        Self {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|release| release.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            rdma_core: libibverbs.release(),
            libibverbs,
            libmlx5: Library::find(&maps, "libmlx5.so."),
            libibverbs_exports: Exports { query_gid_ex },
        }
    }
}

impl Library {
    /// The library whose file name starts with `prefix` among the mapped files of `maps`
    /// (`/proc/self/maps`: the path is the sixth field).
    fn find(maps: &str, prefix: &str) -> Self {
        let file = maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|path| path.rsplit('/').next().is_some_and(|name| name.starts_with(prefix)));
        let version = file
            .and_then(|path| path.rsplit('/').next())
            .and_then(|name| name.strip_prefix(prefix))
            .filter(|version| !version.is_empty() && version.split('.').all(|n| n.parse::<u32>().is_ok()));
        let numbers: Vec<&str> = version.map(|v| v.split('.').collect()).unwrap_or_default();
        Self {
            file: file.map(str::to_string),
            version: version.unwrap_or("unknown").to_string(),
            // rdma-core names its libraries <soname>.<ABI minor>.<release major>.<release minor>.
            rdma_core: match numbers[..] {
                [_, _, major, minor] => format!("{major}.{minor}"),
                _ => "unknown".into(),
            },
        }
    }

    /// The rdma-core release's major number (`55` of version `1.14.55.0`), if the file name
    /// says.
    fn release(&self) -> Option<u32> {
        match self.version.split('.').collect::<Vec<_>>()[..] {
            [_, _, major, _] => major.parse().ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sideway_ext::ibverbs::work_completion::WorkCompletion;

    use super::{mlx5_variables, step, Capabilities, Library, SelftestReport};
    use crate::fault::Fault;

    /// The topics of `not_tried` the first lines name: what a loopback never reaches.
    const LOOPBACK_MISSES: [&str; 5] = ["routing", "ARP", "switch MTU", "PFC", "a remote MTU"];

    /// Before any device: what a loopback does not try comes first, named in full in the report
    /// and in the closing line; the run, the environment and the direct path's facts are there,
    /// the facts not read yet `null`.
    #[test]
    fn a_report_says_first_what_a_loopback_does_not_try() {
        let report = SelftestReport::new();
        let text = serde_json::to_string_pretty(&report).expect("serialises");
        let json: serde_json::Value = serde_json::from_str(&text).expect("parses");
        let position = |key: &str| text.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("no {key}"));
        assert!(position("scope") < position("versions") && position("not_tried") < position("steps"));
        assert!(
            json["scope"].as_str().expect("a scope").starts_with("a loopback"),
            "{json}"
        );
        let not_tried: Vec<&str> = json["not_tried"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|item| item.as_str().expect("a string"))
            .collect();
        let line = report.scope_line();
        for topic in LOOPBACK_MISSES {
            assert!(not_tried.iter().any(|item| item.starts_with(topic)), "{topic}");
            assert!(line.contains(topic), "{topic}: {line}");
        }
        assert!(
            json["run"]["command_line"].is_array() && json["run"]["time"].is_string(),
            "{json}"
        );
        assert!(json["environment"].is_object(), "{json}");
        assert_eq!(
            json["direct"],
            serde_json::json!({"blueflame": null, "register_size": null})
        );
    }

    /// The capabilities carry the WQE size limits and whether the device reported them.
    #[test]
    fn the_capabilities_carry_the_wqe_size_limits() {
        let capabilities = Capabilities {
            is_mlx5: true,
            dc_supported: true,
            max_dc_rd_atom: Some(16),
            max_dc_init_rd_atom: Some(16),
            dci_streams_max_log_num_concurrent: None,
            dci_streams_max_log_num_errored: None,
            dc_odp: None,
            rc_max_qp_rd_atom: 16,
            rc_max_qp_init_rd_atom: 16,
            max_wqe_sz_sq: Some(1024),
            max_wqe_sz_sq_dc: Some(512),
            wqe_sizes_reported: Some(true),
        };
        let json = serde_json::to_value(&capabilities).expect("serialises");
        assert_eq!(json["max_wqe_sz_sq"], 1024, "{json}");
        assert_eq!(json["max_wqe_sz_sq_dc"], 512);
        assert_eq!(json["wqe_sizes_reported"], true);
    }

    /// Only the `MLX5_` variables, by name, with their values (set to empty counts).
    #[test]
    fn only_the_mlx5_variables_are_recorded() {
        let variables = [
            ("MLX5_SHUT_UP_BF", "1"),
            ("PATH", "/usr/bin"),
            ("MLX5_QP_SIGNATURE", ""),
            ("XMLX5_NOT", "1"),
            ("mlx5_lower", "1"),
        ]
        .map(|(name, value)| (name.to_string(), value.to_string()));
        let recorded = mlx5_variables(variables.into_iter());
        assert_eq!(
            recorded.into_iter().collect::<Vec<_>>(),
            [
                ("MLX5_QP_SIGNATURE".to_string(), String::new()),
                ("MLX5_SHUT_UP_BF".to_string(), "1".to_string())
            ]
        );
    }

    /// Every step once, in order: those not reached skipped with the reason, none `ok` unless
    /// it ran; a fault step carries its completion's facts.
    #[test]
    fn a_stopped_self_test_reports_every_step_and_only_what_ran_as_ok() {
        let mut report = SelftestReport::new();
        report.check(step::DC_TARGET, Ok("DCT number 0x1".into()));
        report.check_fault(
            step::WRONG_KEY,
            Err("recover: refused".into()),
            Some(Fault::new(&WorkCompletion::default(), Duration::from_micros(1500))),
        );
        report.stop("the DC initiator could not be made");
        report.outcome("failed");
        let json = serde_json::to_value(&report).expect("serialises");
        let steps = json["steps"].as_array().expect("steps");
        let mut names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().expect("name")).collect();
        names.sort_unstable();
        let mut all = step::ALL.to_vec();
        all.sort_unstable();
        assert_eq!(names, all, "each step once");
        for step in steps {
            let expected = match step["name"].as_str() {
                Some(step::DC_TARGET) => "ok",
                Some(step::WRONG_KEY) => "failed",
                _ => "skipped",
            };
            assert_eq!(step["result"], expected, "{step}");
            if expected == "skipped" {
                assert_eq!(step["detail"], "not run: the DC initiator could not be made", "{step}");
            }
        }
        let fault = &steps
            .iter()
            .find(|s| s["name"] == step::WRONG_KEY)
            .expect("the fault step")["fault"];
        assert_eq!(fault["status"], "Success");
        assert_eq!(
            (fault["vendor_err"].as_u64(), fault["elapsed_us"].as_u64()),
            (Some(0), Some(1500))
        );
        assert_eq!(
            (&json["stopped"], &json["outcome"]),
            (
                &serde_json::json!("the DC initiator could not be made"),
                &serde_json::json!("failed")
            )
        );
        assert!(report.failed());
    }

    #[test]
    fn a_librarys_file_name_gives_its_rdma_core_release() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.44.0\n\
                    7f02-7f03 r--p 00000000 08:01 124 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.1\n\
                    7f04-7f05 rw-p 00000000 00:00 0\n";
        let mlx5 = Library::find(maps, "libmlx5.so.");
        assert_eq!(
            mlx5.file.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.44.0")
        );
        assert_eq!((mlx5.version.as_str(), mlx5.rdma_core.as_str()), ("1.24.44.0", "44.0"));
        let verbs = Library::find(maps, "libibverbs.so.");
        assert_eq!(
            (verbs.version.as_str(), verbs.rdma_core.as_str()),
            ("1.14.50.1", "50.1")
        );
        assert_eq!((verbs.release(), mlx5.release()), (Some(50), Some(44)));
        let newest = Library::find(
            "7f00-7f01 r-xp 0 08:01 1 /usr/lib64/libibverbs.so.1.14.55.0\n",
            "libibverbs.so.",
        );
        assert_eq!(newest.release(), Some(55));
        // A build that names the file by its soname alone says nothing of its release.
        let bare = Library::find("7f00-7f01 r-xp 0 08:01 1 /opt/lib/libmlx5.so.1\n", "libmlx5.so.");
        assert_eq!((bare.version.as_str(), bare.rdma_core.as_str()), ("1", "unknown"));
        assert_eq!(bare.release(), None);
        let missing = Library::find(maps, "libefa.so.");
        assert_eq!((missing.file, missing.version.as_str()), (None, "unknown"));
    }
}
