//! The port and the GIDs the self-test ran on, as its report records them: the port's state,
//! link layer, active MTU and whether it requires a GRH; for each side's source GID its index,
//! type, network device and that device's MTU (where a RoCE packet's size is bounded first).
use std::net::Ipv6Addr;
use std::sync::Arc;

use serde::Serialize;
use sideway::ibverbs::device_context::DeviceContext;
use sideway_ext::ibverbs::source_gid::SourceGidEntry;

use crate::chain;

/// `IBV_QPF_GRH_REQUIRED` of `ibv_port_attr.flags` (rdma-core `verbs.h`): every packet of the
/// port needs a GRH, as an InfiniBand virtual function's does.
const IBV_QPF_GRH_REQUIRED: u8 = 1 << 0;

/// A port as `ibv_query_port` describes it.
#[derive(Serialize)]
pub struct PortFacts {
    number: u8,
    /// `Active`, `Down`, … (`IBV_PORT_*`).
    state: String,
    link_layer: String,
    active_mtu: String,
    /// `ibv_port_attr.flags & IBV_QPF_GRH_REQUIRED`.
    grh_required: bool,
}

impl PortFacts {
    /// Port `number` of `ctx`.
    pub fn read(ctx: &Arc<DeviceContext>, number: u8) -> Result<Self, String> {
        let port = ctx
            .query_port(number)
            .map_err(|e| format!("query port {number}: {}", chain(&e)))?;
        let mut attr = std::mem::MaybeUninit::<rdma_mummy_sys::ibv_port_attr>::zeroed();
        // SAFETY: the context is open while ctx is, and attr is writable; sideway's query_port
        // keeps no flags, so the port is read again here.
        let ret = unsafe { rdma_mummy_sys::ibv_query_port(ctx.context().as_ptr(), number, attr.as_mut_ptr()) };
        if ret != 0 {
            return Err(format!(
                "query port {number}: {}",
                std::io::Error::from_raw_os_error(ret)
            ));
        }
        // SAFETY: zeroed, then filled by ibv_query_port.
        let flags = unsafe { attr.assume_init() }.flags;
        Ok(Self {
            number,
            state: format!("{:?}", port.port_state()),
            link_layer: format!("{:?}", port.link_layer()),
            active_mtu: crate::mtu(format!("{:?}", port.active_mtu())),
            grh_required: flags & IBV_QPF_GRH_REQUIRED != 0,
        })
    }

    /// `port 1: Active, Ethernet, active MTU 4096, GRH not required`.
    pub fn line(&self) -> String {
        format!(
            "port {}: {}, {}, active MTU {}, GRH {}",
            self.number,
            self.state,
            self.link_layer,
            self.active_mtu,
            if self.grh_required { "required" } else { "not required" }
        )
    }
}

/// A source GID one side of the loopback used.
#[derive(Serialize)]
pub struct GidFacts {
    index: u8,
    gid: String,
    #[serde(rename = "type")]
    kind: &'static str,
    /// Its network device (`gid_attrs/ndevs/<index>` of the port in sysfs); `null` on InfiniBand.
    netdev: Option<String>,
    /// That device's MTU (`/sys/class/net/<netdev>/mtu`).
    netdev_mtu: Option<u32>,
}

impl GidFacts {
    /// `entry` of port `port` of device `device`, with its network device read from sysfs.
    pub fn read(device: &str, port: u8, entry: &SourceGidEntry) -> Self {
        let sysfs = |path: String| std::fs::read_to_string(path).ok().map(|text| text.trim().to_string());
        let netdev = sysfs(format!(
            "/sys/class/infiniband/{device}/ports/{port}/gid_attrs/ndevs/{}",
            entry.index()
        ))
        .filter(|name| !name.is_empty());
        let netdev_mtu = netdev
            .as_ref()
            .and_then(|name| sysfs(format!("/sys/class/net/{name}/mtu")))
            .and_then(|mtu| mtu.parse().ok());
        Self {
            index: entry.index(),
            gid: Ipv6Addr::from(entry.gid()).to_string(),
            kind: crate::gid_type_name(entry.gid_type()),
            netdev,
            netdev_mtu,
        }
    }

    /// `GID index 3 (::ffff:10.0.0.1, RoCE v2, eth0 MTU 1500)`.
    pub fn line(&self) -> String {
        let netdev = match (&self.netdev, self.netdev_mtu) {
            (Some(name), Some(mtu)) => format!(", {name} MTU {mtu}"),
            (Some(name), None) => format!(", {name}"),
            (None, _) => String::new(),
        };
        format!("GID index {} ({}, {}{netdev})", self.index, self.gid, self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::{GidFacts, PortFacts};

    /// The lines name the port's state, MTU and GRH rule, and each GID's index, type, network
    /// device and its MTU, as far as they are known.
    #[test]
    fn the_port_and_gid_lines_say_what_was_read() {
        let port = PortFacts {
            number: 2,
            state: "Active".into(),
            link_layer: "InfiniBand".into(),
            active_mtu: "4096".into(),
            grh_required: true,
        };
        assert_eq!(port.line(), "port 2: Active, InfiniBand, active MTU 4096, GRH required");
        let mut gid = GidFacts {
            index: 3,
            gid: "::ffff:10.0.0.1".into(),
            kind: "RoCE v2",
            netdev: Some("eth0".into()),
            netdev_mtu: Some(9000),
        };
        assert_eq!(gid.line(), "GID index 3 (::ffff:10.0.0.1, RoCE v2, eth0 MTU 9000)");
        gid.netdev_mtu = None;
        assert_eq!(gid.line(), "GID index 3 (::ffff:10.0.0.1, RoCE v2, eth0)");
        gid.netdev = None;
        assert_eq!(gid.line(), "GID index 3 (::ffff:10.0.0.1, RoCE v2)");
        let json = serde_json::to_value(&gid).expect("serialises");
        assert_eq!(
            json,
            serde_json::json!({"index": 3, "gid": "::ffff:10.0.0.1", "type": "RoCE v2", "netdev": null, "netdev_mtu": null})
        );
    }
}
