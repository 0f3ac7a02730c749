//! Lists RDMA devices like `ibv_devinfo` (name, node GUID, firmware, ports, GIDs) and, for mlx5
//! devices, what `mlx5dv_query_device` reports plus the DC (Dynamically Connected transport)
//! summary. For any other device it says plainly that the device is not mlx5.
//!
//! ```sh
//! cargo run --features mlx5 --example mlx5_devinfo              # a table
//! cargo run --features mlx5 --example mlx5_devinfo -- --json    # the same as JSON
//! cargo run --features mlx5 --example mlx5_devinfo -- -d mlx5_0 # one device
//! cargo run --features mlx5 --example mlx5_devinfo -- --dc-selftest -d mlx5_0
//! cargo run --features mlx5 --example mlx5_devinfo -- --dc-selftest --report dc-report.json
//! cargo run --features mlx5 --example mlx5_devinfo -- --dc-selftest -i 2 -g 3 # port 2, GID 3
//! ```
//!
//! `--dc-selftest` runs DC end to end on one device, in loopback on one port (`-i`, default 1;
//! see `dc_selftest.rs`): a DC target and a DC initiator, RDMA WRITE and READ, both atomics, a
//! SEND into the target's shared receive queue, a wrong DC key and the recovery, DCI streams
//! where the device has them, and a WRITE and an inline SEND through the direct path
//! (`sideway-ext-dc-direct`), one line per check (`ok`, `FAILED` with the status, `skipped`
//! with why), then a line saying what a loopback does not try (routing, ARP, switch MTU, PFC, a
//! remote MTU). With `--report FILE` it also writes what it saw as JSON (`report.rs`: what was
//! not tried, the command line, commit and time, versions, the `MLX5_*` variables, the port
//! and each side's GID, capabilities, granted sizes, each step, each fault's completion), to
//! attach to an issue; the file is written whatever happens, also when no device can be
//! listed. `--json` prints the command line, commit and time too (`run.rs`).
//!
//! Exits with status 1 when no RDMA device can be listed (or the named one does not exist), and
//! with `--dc-selftest` also when the device is not mlx5; 2 when a self-test check failed.
//! Where the list fails, the message says what that means (`device_list.rs`): "Function not
//! implemented" is no RDMA device, or the kernel's `ib_uverbs` module not loaded.
use std::net::Ipv6Addr;

use clap::Parser;
use serde::Serialize;
use serde_json::{json, Map, Value};
use sideway::ibverbs::address::GidType;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use sideway_ext::mlx5::dc_capabilities::DcCapabilities;
use sideway_ext::mlx5::device_attributes::{
    Mlx5ContextFlags, Mlx5ContextMask, Mlx5DeviceAttributes, OdpTransportCapabilities,
};
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;

mod dc_selftest;
mod device_list;
mod fault;
mod port;
mod report;
mod run;

/// RDMA devices with their mlx5 direct-verbs and DC capabilities.
#[derive(Parser)]
#[command(about)]
struct Args {
    /// Only this device (e.g. mlx5_0).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Run the DC self-test in loopback on one port of the device (`-d`, default: the first).
    #[arg(long)]
    dc_selftest: bool,
    /// The port of the self-test (from 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, requires = "dc_selftest")]
    port: u8,
    /// The local GID index of the self-test's addresses, the DC target's and the DC initiator's
    /// source GID (default: on RoCE the port's RoCE v2 GID, IPv4-mapped first; on InfiniBand
    /// none, the LID; given on InfiniBand, the addresses are global).
    #[arg(short = 'g', long = "gid-idx", requires = "dc_selftest")]
    gid_index: Option<u8>,
    /// Also write the self-test's report to this file, as JSON (to attach to an issue).
    #[arg(long, value_name = "FILE", requires = "dc_selftest")]
    report: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct Report {
    run: run::Run,
    devices: Vec<DeviceReport>,
}

#[derive(Serialize)]
struct DeviceReport {
    name: String,
    node_guid: String,
    /// Set when the device could not be opened or queried; the other fields are then partial.
    error: Option<String>,
    firmware: Option<String>,
    vendor_id: Option<u32>,
    vendor_part_id: Option<u32>,
    ports: Vec<PortReport>,
    gids: Vec<GidReport>,
    /// Whether `mlx5dv_query_device` answered.
    is_mlx5: bool,
    /// Why there is no mlx5 section, when there is none.
    mlx5_status: Option<String>,
    /// The mlx5 section: `null` for a device that is not mlx5.
    mlx5: Option<Map<String, Value>>,
    /// The DC section: `null` for a device that is not mlx5.
    dc: Option<Map<String, Value>>,
}

#[derive(Serialize)]
struct PortReport {
    port: u8,
    state: String,
    link_layer: String,
    active_mtu: String,
    max_mtu: String,
}

#[derive(Serialize)]
struct GidReport {
    port: u32,
    index: u32,
    gid: String,
    #[serde(rename = "type")]
    kind: &'static str,
}

fn main() {
    let args = Args::parse();
    if args.dc_selftest {
        let mut report = report::SelftestReport::new();
        let mut status = selftest(&args, &mut report);
        if let Some(path) = &args.report {
            match report.write(path) {
                Ok(()) => eprintln!("mlx5_devinfo: report written to {}", path.display()),
                Err(why) => {
                    eprintln!("mlx5_devinfo: {why}");
                    status = status.max(1);
                },
            }
        }
        std::process::exit(status);
    }
    let list = match DeviceList::new() {
        Ok(list) => list,
        Err(err) => {
            eprintln!("mlx5_devinfo: {}", device_list::list_error(&err));
            std::process::exit(1);
        },
    };
    let mut devices = Vec::new();
    for device in &list {
        if args.device.as_deref().is_some_and(|name| name != device.name()) {
            continue;
        }
        let mut report = DeviceReport {
            name: device.name(),
            node_guid: device.guid().to_string(),
            error: None,
            firmware: None,
            vendor_id: None,
            vendor_part_id: None,
            ports: Vec::new(),
            gids: Vec::new(),
            is_mlx5: false,
            mlx5_status: None,
            mlx5: None,
            dc: None,
        };
        match device.open() {
            Ok(ctx) => describe(&ctx, &mut report),
            Err(err) => report.error = Some(format!("cannot open: {}", chain(&err))),
        }
        devices.push(report);
    }
    if devices.is_empty() {
        match &args.device {
            Some(name) => eprintln!("mlx5_devinfo: no RDMA device named {name}"),
            None => eprintln!("mlx5_devinfo: no RDMA devices found"),
        }
        std::process::exit(1);
    }
    let report = Report {
        run: run::Run::read(),
        devices,
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(err) => {
                eprintln!("mlx5_devinfo: cannot print JSON: {}", chain(&err));
                std::process::exit(1);
            },
        }
    } else {
        print_table(&report);
    }
}

/// Runs the DC self-test on the chosen device, recording it in `report`: the exit status.
fn selftest(args: &Args, report: &mut report::SelftestReport) -> i32 {
    let fail = |report: &mut report::SelftestReport, why: String| {
        eprintln!("mlx5_devinfo: {why}");
        report.stop(&why);
        report.outcome("not run");
        1
    };
    let list = match DeviceList::new() {
        Ok(list) => list,
        Err(err) => return fail(report, device_list::list_error(&err)),
    };
    let Some(device) = list
        .iter()
        .find(|device| args.device.as_deref().is_none_or(|name| name == device.name()))
    else {
        return fail(
            report,
            match &args.device {
                Some(name) => format!("no RDMA device named {name}"),
                None => "no RDMA devices found".to_string(),
            },
        );
    };
    let name = device.name();
    let ctx = match device.open() {
        Ok(ctx) => ctx,
        Err(err) => return fail(report, format!("cannot open {name}: {}", chain(&err))),
    };
    let outcome = dc_selftest::run(&ctx, &name, args.port, args.gid_index, report);
    let (status, said) = match outcome {
        dc_selftest::Outcome::Passed => (0, "passed"),
        dc_selftest::Outcome::NotMlx5 => (1, "not mlx5"),
        dc_selftest::Outcome::Failed => (2, "failed"),
    };
    if !matches!(outcome, dc_selftest::Outcome::NotMlx5) {
        println!("{}", report.scope_line());
    }
    report.outcome(said);
    status
}

/// Fills the report from the opened device; failures are recorded, never fatal.
fn describe(ctx: &std::sync::Arc<DeviceContext>, report: &mut DeviceReport) {
    match ctx.query_device() {
        Ok(attr) => {
            report.firmware = Some(attr.firmware_version());
            report.vendor_id = Some(attr.vendor_id());
            report.vendor_part_id = Some(attr.vendor_part_id());
            for port in 1..=attr.phys_port_cnt() {
                match ctx.query_port(port) {
                    Ok(p) => report.ports.push(PortReport {
                        port,
                        state: format!("{:?}", p.port_state()),
                        link_layer: format!("{:?}", p.link_layer()),
                        active_mtu: mtu(format!("{:?}", p.active_mtu())),
                        max_mtu: mtu(format!("{:?}", p.max_mtu())),
                    }),
                    Err(err) => report.error = Some(format!("query_port({port}): {}", chain(&err))),
                }
            }
        },
        Err(err) => report.error = Some(format!("query_device: {}", chain(&err))),
    }
    for entry in ctx.query_gid_table().unwrap_or_default() {
        let gid = entry.gid();
        let ipv4 = Ipv6Addr::from(gid)
            .to_ipv4_mapped()
            .map(|ip| format!(" ({ip})"))
            .unwrap_or_default();
        report.gids.push(GidReport {
            port: entry.port_num(),
            index: entry.gid_index(),
            gid: format!("{gid}{ipv4}"),
            kind: gid_type_name(entry.gid_type()),
        });
    }

    let mlx5 = Mlx5DeviceContext::new(ctx.clone());
    match mlx5.query_device() {
        Ok(attr) => {
            report.is_mlx5 = true;
            report.mlx5 = Some(mlx5_section(&attr));
        },
        Err(err) if err.is_not_supported() => {
            report.mlx5_status = Some("not an mlx5 device (mlx5dv_query_device: not supported)".into());
        },
        Err(err) => report.mlx5_status = Some(format!("mlx5dv_query_device failed: {}", err.0)),
    }
    if report.is_mlx5 {
        match mlx5.query_dc_capabilities() {
            Ok(dc) => report.dc = Some(dc_section(&dc)),
            Err(err) => report.error = Some(format!("DC capabilities: {}", err.0)),
        }
    }
}

/// An error with its sources: "failed to get device list: Function not implemented (os error 38)".
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// `IB`, `RoCE v1` or `RoCE v2`.
fn gid_type_name(gid_type: GidType) -> &'static str {
    match gid_type {
        GidType::InfiniBand => "IB",
        GidType::RoceV1 => "RoCE v1",
        GidType::RoceV2 => "RoCE v2",
    }
}

/// "Mtu1024" → "1024".
fn mtu(debug: String) -> String {
    debug.trim_start_matches("Mtu").to_string()
}

/// The names of the set flags of a bitmask-enum type.
fn names<T: Copy + PartialEq + 'static>(
    flags: impl Iterator<Item = &'static (&'static str, T)>, has: impl Fn(T) -> bool,
) -> Value {
    flags.filter(|(_, f)| has(*f)).map(|(name, _)| json!(name)).collect()
}

fn mlx5_section(attr: &Mlx5DeviceAttributes) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("version".into(), json!(attr.version()));
    m.insert(
        "flags".into(),
        names(Mlx5ContextFlags::flags(), |f| attr.flags().contains(f)),
    );
    m.insert(
        "comp_mask".into(),
        names(Mlx5ContextMask::flags(), |f| attr.comp_mask().contains(f)),
    );
    let mut opt = |key: &str, value: Option<Value>| {
        m.insert(key.into(), value.unwrap_or(Value::Null));
    };
    opt("max_dynamic_bfregs", attr.max_dynamic_bfregs().map(|v| json!(v)));
    opt(
        "dc_odp",
        attr.dc_odp_caps()
            .map(|o| names(OdpTransportCapabilities::flags(), |f| o.contains(f))),
    );
    opt("num_lag_ports", attr.num_lag_ports().map(|v| json!(v)));
    opt(
        "dci_streams",
        attr.dci_streams_caps().map(|c| {
            json!({"max_log_num_concurrent": c.max_log_num_concurrent, "max_log_num_errored": c.max_log_num_errored})
        }),
    );
    opt("max_dc_rd_atom", attr.max_dc_rd_atom().map(|v| json!(v)));
    opt("max_dc_init_rd_atom", attr.max_dc_init_rd_atom().map(|v| json!(v)));
    m
}

fn dc_section(dc: &DcCapabilities) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("supported".into(), json!(dc.is_supported()));
    m.insert("max_dc_rd_atom".into(), json!(dc.max_dc_rd_atom()));
    m.insert("max_dc_init_rd_atom".into(), json!(dc.max_dc_init_rd_atom()));
    m.insert(
        "dci_streams".into(),
        dc.dci_streams()
            .map(|c| json!({"max_log_num_concurrent": c.max_log_num_concurrent, "max_log_num_errored": c.max_log_num_errored}))
            .unwrap_or(Value::Null),
    );
    m.insert(
        "dc_odp".into(),
        dc.dc_odp()
            .map(|o| names(OdpTransportCapabilities::flags(), |f| o.contains(f)))
            .unwrap_or(Value::Null),
    );
    m.insert("rc_max_qp_rd_atom".into(), json!(dc.rc_max_qp_rd_atom()));
    m.insert("rc_max_qp_init_rd_atom".into(), json!(dc.rc_max_qp_init_rd_atom()));
    m
}

fn print_table(report: &Report) {
    for (i, d) in report.devices.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("hca_id: {}", d.name);
        println!("    {:<24}{}", "node_guid:", d.node_guid);
        if let Some(fw) = &d.firmware {
            println!("    {:<24}{fw}", "fw_ver:");
        }
        if let (Some(vendor), Some(part)) = (d.vendor_id, d.vendor_part_id) {
            println!("    {:<24}{vendor:#x}", "vendor_id:");
            println!("    {:<24}{part}", "vendor_part_id:");
        }
        if let Some(err) = &d.error {
            println!("    {:<24}{err}", "error:");
        }
        for p in &d.ports {
            println!("    port {}:", p.port);
            println!("        {:<20}{}", "state:", p.state);
            println!("        {:<20}{}", "link_layer:", p.link_layer);
            println!("        {:<20}{}", "max_mtu:", p.max_mtu);
            println!("        {:<20}{}", "active_mtu:", p.active_mtu);
            for g in d.gids.iter().filter(|g| g.port == u32::from(p.port)) {
                println!("        {:<20}{}, {}", format!("GID[{:>3}]:", g.index), g.gid, g.kind);
            }
        }
        match (&d.mlx5, &d.mlx5_status) {
            (Some(mlx5), _) => {
                println!("    mlx5:");
                print_map(mlx5);
                if let Some(dc) = &d.dc {
                    println!("    DC:");
                    print_map(dc);
                }
            },
            (None, Some(status)) => println!("{}: {status}", d.name),
            (None, None) => {},
        }
    }
}

fn print_map(map: &Map<String, Value>) {
    for (key, value) in map {
        let shown = match value {
            Value::Null => "not reported".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        println!("        {:<30}{shown}", format!("{key}:"));
    }
}
