//! Lists the RDMA devices with their ports and GID tables, through sideway's API.
//!
//! `cargo run --example list_devices`; on a host without RDMA devices (or without the kernel
//! support), it says so and exits with status 1.
use std::net::Ipv6Addr;

use sideway::ibverbs::address::GidType;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};

fn main() {
    let list = match DeviceList::new() {
        Ok(list) => list,
        Err(err) => {
            // The whole chain: the library's cause is in `source()`.
            let mut line = format!("no RDMA devices: {err}");
            let mut cause = std::error::Error::source(&err);
            while let Some(source) = cause {
                line = format!("{line}: {source}");
                cause = source.source();
            }
            eprintln!("{line}");
            std::process::exit(1);
        },
    };
    if list.is_empty() {
        eprintln!("no RDMA devices found");
        std::process::exit(1);
    }
    for device in &list {
        let ctx = match device.open() {
            Ok(ctx) => ctx,
            Err(err) => {
                println!("{}: cannot open: {err}", device.name());
                continue;
            },
        };
        let attr = ctx.query_device().expect("query_device");
        println!(
            "{}: node GUID {}, firmware {:?}, {} port(s)",
            device.name(),
            device.guid(),
            attr.firmware_version(),
            attr.phys_port_cnt()
        );
        for port_num in 1..=attr.phys_port_cnt() {
            let port = ctx.query_port(port_num).expect("query_port");
            println!(
                "  port {port_num}: {:?}, {:?}, active MTU {:?}",
                port.port_state(),
                port.link_layer(),
                port.active_mtu()
            );
        }
        for entry in ctx.query_gid_table().unwrap_or_default() {
            let kind = match entry.gid_type() {
                GidType::InfiniBand => "IB",
                GidType::RoceV1 => "RoCE v1",
                GidType::RoceV2 => "RoCE v2",
            };
            let gid = entry.gid();
            let ipv4 = Ipv6Addr::from(gid)
                .to_ipv4_mapped()
                .map(|ip| format!(" ({ip})"))
                .unwrap_or_default();
            println!(
                "  port {} GID[{}]: {gid}, {kind}{ipv4}",
                entry.port_num(),
                entry.gid_index()
            );
        }
    }
}
