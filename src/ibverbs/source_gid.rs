//! Which local GID a global address is sent from. [`SourceGid`] names it: by default the port's
//! RoCE v2 GID, or a GID table index. The device context's `source_gid` resolves it against the
//! port's GID table into a [`SourceGidEntry`].
//!
//! Why RoCE v2: a RoCE port's GID table has each address once per RoCE version, and the provider
//! frames a packet by the type of its source GID (libmlx5 `mlx5_create_ah`,
//! `ibv_query_gid_type`): a RoCE v1 packet has no IP header, and no router forwards it.
//! [`SourceGid::Automatic`] picks as UCX does (`uct_ib_device_select_gid`): IPv4-mapped first,
//! then a global IPv6 address, the link-local one last.
//!
//! On InfiniBand [`SourceGid::Automatic`] is none (the LID is the address), except on a port that
//! requires a GRH (an InfiniBand virtual function), whose every address the kernel wants global
//! (`rdma_check_ah_attr`): there it is GID index 0, as in UCX (`uct_ib_iface_init`,
//! `uct_ib_grh_required`, `UCT_IB_MD_DEFAULT_GID_INDEX`). The software ConnectX holds it; no
//! InfiniBand virtual function has run it here.
//!
//! # Before rdma-core 32
//!
//! Without `_ibv_query_gid_ex` (rdma-core 32, `IBVERBS_1.11`) each slot is read as libibverbs'
//! own fallback reads it (`query_sysfs_gid_entry`): the GID with `ibv_query_gid`, its type and
//! network device from sysfs `gid_attrs/`; where that fails too, the error is
//! [`LibraryTooOld`](SourceGidErrorKind::LibraryTooOld). The fallback has run on SoftRoCE with
//! `_ibv_query_gid_ex` hidden from `dlsym` (a device test), not with rdma-core 28 itself nor on
//! a ConnectX.
use std::io;
use std::mem::MaybeUninit;
use std::net::Ipv6Addr;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_context, ibv_gid, ibv_gid_entry, IBV_LINK_LAYER_ETHERNET};
use sideway::ibverbs::address::{Gid, GidType};
use sideway::ibverbs::device_context::DeviceContext;

use super::address_handle::PortAddressing;

/// The local GID a global address is sent from; see the [module](self) docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceGid {
    /// The default: on RoCE the port's preferred RoCE v2 GID, on InfiniBand none (GID index 0 on
    /// a port that requires a GRH).
    #[default]
    Automatic,
    /// The GID at this index of the port's GID table (the `-g` of rdma-core's and perftest's
    /// tools, `UCX_IB_GID_INDEX`): on RoCE it must be a RoCE v2 GID. How a port with several
    /// addresses (multi-homed, VLANs) sends from the one on the peer's subnet.
    Index(u8),
}

/// A GID of the port's table that a [`SourceGid`] named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceGidEntry {
    index: u8,
    gid: Gid,
    gid_type: GidType,
    netdev_index: u32,
}

impl SourceGidEntry {
    /// The GID index: the source GID index of a global address.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The GID.
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// Its type (RoCE v2 on RoCE).
    pub fn gid_type(&self) -> GidType {
        self.gid_type
    }

    /// The interface index of its network device (0 on InfiniBand).
    pub fn netdev_index(&self) -> u32 {
        self.netdev_index
    }
}

/// Error returned by resolving a [`SourceGid`] (the device context's `source_gid`).
#[derive(Debug, thiserror::Error)]
#[error("no usable source GID")]
#[non_exhaustive]
pub struct SourceGidError(#[from] pub SourceGidErrorKind);

/// The enum type for [`SourceGidError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceGidErrorKind {
    /// A RoCE port without a RoCE v2 GID.
    #[error("RoCE port {port} has no RoCE v2 GID: give its network device an IP address")]
    NoRoceV2Gid {
        /// The port.
        port: u8,
    },
    /// The index names an empty slot (or none at all).
    #[error("GID index {index} of port {port} is empty: pick a RoCE v2 GID")]
    EmptySlot {
        /// The port.
        port: u8,
        /// The index.
        index: u8,
    },
    /// On RoCE, a GID that is not RoCE v2.
    #[error("GID index {index} of port {port} is {}, not RoCE v2: its packets are not routed", gid_type_name(*.gid_type))]
    NotRoceV2 {
        /// The port.
        port: u8,
        /// The index.
        index: u8,
        /// Its type.
        gid_type: GidType,
    },
    /// The device has no such port.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port.
        port: u8,
        /// The library's error.
        source: io::Error,
    },
    /// libibverbs has no `_ibv_query_gid_ex` (rdma-core before 32), and the sysfs fallback failed.
    #[error(
        "cannot read GID index {index} of port {port}: libibverbs has no _ibv_query_gid_ex (rdma-core before 32) \
         and sysfs does not give the GID's type; rdma-core 32 or newer is needed"
    )]
    LibraryTooOld {
        /// The port.
        port: u8,
        /// The index.
        index: u8,
    },
    /// `ibv_query_gid_ex` failed.
    #[error("cannot read GID index {index} of port {port}")]
    QueryGid {
        /// The port.
        port: u8,
        /// The index.
        index: u8,
        /// The library's error.
        source: io::Error,
    },
}

fn gid_type_name(gid_type: GidType) -> &'static str {
    match gid_type {
        GidType::InfiniBand => "an InfiniBand GID",
        GidType::RoceV1 => "RoCE v1",
        GidType::RoceV2 => "RoCE v2",
    }
}

/// The type of a raw `ibv_gid_entry::gid_type` (an unknown one as RoCE v1: never picked).
fn gid_type(raw: u32) -> GidType {
    match raw {
        rdma_mummy_sys::IBV_GID_TYPE_IB => GidType::InfiniBand,
        rdma_mummy_sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
        _ => GidType::RoceV1,
    }
}

fn entry(raw: &ibv_gid_entry) -> SourceGidEntry {
    SourceGidEntry {
        index: raw.gid_index as u8,
        gid: Gid::from(raw.gid),
        gid_type: gid_type(raw.gid_type),
        netdev_index: raw.ndev_ifindex,
    }
}

/// Of `entries` (port, is RoCE v2, GID), the position of `port`'s most preferred RoCE v2 GID.
fn pick_roce_v2_gid(entries: impl Iterator<Item = (u32, bool, Gid)>, port: u8) -> Option<usize> {
    entries
        .enumerate()
        .filter(|(_, (on, roce_v2, gid))| *on == u32::from(port) && *roce_v2 && !gid.is_zero())
        .min_by_key(|(position, (_, _, gid))| (preference(*gid), *position))
        .map(|(position, _)| position)
}

/// How [`SourceGid::Automatic`] ranks a RoCE v2 GID, lowest first.
fn preference(gid: Gid) -> u8 {
    match Ipv6Addr::from(gid) {
        address if address.to_ipv4_mapped().is_some() => 0,
        address if address.is_unicast_link_local() => 2,
        _ => 1,
    }
}

impl PortAddressing {
    /// Whether every address from the port must be global (carry a GRH).
    fn requires_grh(self) -> bool {
        self != Self::InfiniBand
    }
}

impl SourceGid {
    /// The entry of local `port`'s GID table this names; `None` for
    /// [`Automatic`](Self::Automatic) on InfiniBand without a GRH required.
    pub(crate) fn find(&self, ctx: &DeviceContext, port: u8) -> Result<Option<SourceGidEntry>, SourceGidError> {
        // SAFETY: the context is open while ctx is.
        let context = unsafe { ctx.context() };
        // SAFETY: as above.
        let attr = unsafe { super::query_port(context, port) }
            .map_err(|source| SourceGidErrorKind::InvalidPort { port, source })?;
        let addressing = PortAddressing::of(&attr);
        let table = match self.reads_gid_table(addressing) {
            // SAFETY: as above, and libibverbs' ibv_query_gid_ex takes it.
            true => unsafe { read_gid_table(context, port, attr.gid_tbl_len, query_gid_entry) }?,
            false => Vec::new(),
        };
        Ok(self.resolve(port, addressing, &table)?)
    }

    /// Whether resolving this needs the port's GID table (so that a library that cannot read it
    /// stops no bring-up that needs none of it).
    pub(crate) fn reads_gid_table(&self, addressing: PortAddressing) -> bool {
        addressing.requires_grh() || !matches!(self, SourceGid::Automatic)
    }

    /// The entry this names among `table`, the set slots of `port`'s GID table.
    pub(crate) fn resolve(
        &self, port: u8, addressing: PortAddressing, table: &[ibv_gid_entry],
    ) -> Result<Option<SourceGidEntry>, SourceGidErrorKind> {
        let roce = addressing.is_roce();
        match self {
            SourceGid::Automatic if !addressing.requires_grh() => Ok(None),
            SourceGid::Automatic if !roce => SourceGid::Index(0).resolve(port, addressing, table),
            SourceGid::Automatic => {
                let candidates = table.iter().map(|e| {
                    let v2 = e.gid_type == rdma_mummy_sys::IBV_GID_TYPE_ROCE_V2;
                    (e.port_num, v2, Gid::from(e.gid))
                });
                let position = pick_roce_v2_gid(candidates, port).ok_or(SourceGidErrorKind::NoRoceV2Gid { port })?;
                Ok(Some(entry(&table[position])))
            },
            SourceGid::Index(index) => {
                let found = table
                    .iter()
                    .find(|e| e.port_num == u32::from(port) && e.gid_index == u32::from(*index))
                    .map(entry)
                    .filter(|found| !found.gid.is_zero())
                    .ok_or(SourceGidErrorKind::EmptySlot { port, index: *index })?;
                if roce && found.gid_type != GidType::RoceV2 {
                    return Err(SourceGidErrorKind::NotRoceV2 {
                        port,
                        index: *index,
                        gid_type: found.gid_type,
                    });
                }
                Ok(Some(found))
            },
        }
    }
}

/// `ibv_query_gid_ex` without flags, or its sysfs fallback: an errno value (`ENODATA`: an
/// empty slot; `EOPNOTSUPP`: neither could read it).
///
/// # Safety
///
/// As `ibv_query_gid_ex`: an open context and a writable entry.
pub(crate) unsafe fn query_gid_entry(
    context: *mut ibv_context, port: u8, index: u32, entry: *mut ibv_gid_entry,
) -> i32 {
    match rdma_mummy_sys::ibv_query_gid_ex(context, port.into(), index, entry, 0) {
        libc::EOPNOTSUPP => query_gid_entry_without_ex(context, port, index, entry),
        ret => ret,
    }
}

/// [`query_gid_entry`] without `_ibv_query_gid_ex`.
///
/// # Safety
///
/// As [`query_gid_entry`].
unsafe fn query_gid_entry_without_ex(
    context: *mut ibv_context, port: u8, index: u32, entry: *mut ibv_gid_entry,
) -> i32 {
    let (Ok(signed_index), Some(open)) = (i32::try_from(index), NonNull::new(context)) else {
        return libc::EINVAL;
    };
    let mut gid = MaybeUninit::<ibv_gid>::zeroed();
    // SAFETY: the caller's open context; gid is writable.
    if rdma_mummy_sys::ibv_query_gid(context, port, signed_index, gid.as_mut_ptr()) != 0 {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: the call filled it (and it was zeroed before).
    let gid = Gid::from(gid.assume_init());
    // SAFETY: the caller's open context.
    let roce = match super::query_port(open, port) {
        Ok(attr) => attr.link_layer == IBV_LINK_LAYER_ETHERNET,
        Err(err) => return err.raw_os_error().unwrap_or(libc::EINVAL),
    };
    // SAFETY: the caller's open context.
    let folder = gid_attributes_folder(context, port);
    let read = |attribute: &str| {
        let path = folder.as_ref()?.join(attribute).join(index.to_string());
        std::fs::read_to_string(path).ok()
    };
    let gid_type = read("types");
    let netdev = read("ndevs").and_then(|name| netdev_index(name.trim())).unwrap_or(0);
    match entry_without_query_gid_ex(port, index, gid, roce, gid_type.as_deref().map(str::trim), netdev) {
        Ok(found) => {
            // SAFETY: the caller's writable entry.
            entry.write(found);
            0
        },
        Err(errno) => errno,
    }
}

/// The sysfs folder of `port`'s GID attributes, `<ibdev_path>/ports/<port>/gid_attrs`.
///
/// # Safety
///
/// `context` must be an open device context.
unsafe fn gid_attributes_folder(context: *mut ibv_context, port: u8) -> Option<PathBuf> {
    // SAFETY: an open context's device lives as long as it does.
    let device = (*context).device.as_ref()?;
    let path: Vec<u8> = device
        .ibdev_path
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    let path = PathBuf::from(std::ffi::OsString::from_vec(path));
    Some(path.join("ports").join(port.to_string()).join("gid_attrs"))
}

/// Slot `index` of `port`'s GID table as libibverbs' `query_sysfs_gid_entry` puts it together:
/// `gid` from `ibv_query_gid` (zero: `ENODATA`), on RoCE of the type `gid_type`, the text of
/// sysfs `gid_attrs/types/<index>` (`query_sysfs_gid_type`), else `EOPNOTSUPP`.
fn entry_without_query_gid_ex(
    port: u8, index: u32, gid: Gid, roce: bool, gid_type: Option<&str>, netdev_index: u32,
) -> Result<ibv_gid_entry, i32> {
    if gid.is_zero() {
        return Err(libc::ENODATA);
    }
    let gid_type = match (roce, gid_type) {
        (false, _) => rdma_mummy_sys::IBV_GID_TYPE_IB,
        (true, Some("IB/RoCE v1")) => rdma_mummy_sys::IBV_GID_TYPE_ROCE_V1,
        (true, Some("RoCE v2")) => rdma_mummy_sys::IBV_GID_TYPE_ROCE_V2,
        (true, _) => return Err(libc::EOPNOTSUPP),
    };
    Ok(ibv_gid_entry {
        gid: gid.into(),
        gid_index: index,
        port_num: port.into(),
        gid_type,
        ndev_ifindex: netdev_index,
    })
}

/// The error of a slot whose reading answered `errno`.
fn query_gid_error(port: u8, index: u8, errno: i32) -> SourceGidErrorKind {
    match errno {
        libc::EOPNOTSUPP => SourceGidErrorKind::LibraryTooOld { port, index },
        _ => SourceGidErrorKind::QueryGid {
            port,
            index,
            source: io::Error::from_raw_os_error(errno),
        },
    }
}

/// The set slots of `port`'s GID table, read with `query_gid_entry` up to `gid_tbl_len` (a
/// source GID index is a `u8`: slots beyond 255 are not read).
///
/// # Safety
///
/// `context` must be a context `query_gid_entry` takes: an open device context for
/// [`query_gid_entry`].
pub(crate) unsafe fn read_gid_table(
    context: NonNull<ibv_context>, port: u8, gid_tbl_len: i32,
    query_gid_entry: unsafe fn(*mut ibv_context, u8, u32, *mut ibv_gid_entry) -> i32,
) -> Result<Vec<ibv_gid_entry>, SourceGidError> {
    let mut table = Vec::new();
    for index in 0..gid_tbl_len.clamp(0, 256) as u16 {
        let mut entry = MaybeUninit::<ibv_gid_entry>::zeroed();
        // SAFETY: the caller's context; entry is writable.
        match query_gid_entry(context.as_ptr(), port, index.into(), entry.as_mut_ptr()) {
            // SAFETY: the call filled it (and it was zeroed before).
            0 => table.push(entry.assume_init()),
            libc::ENODATA => {},
            errno => return Err(query_gid_error(port, index as u8, errno.abs()).into()),
        }
    }
    Ok(table)
}

/// The interface index of network device `name` (`if_nametoindex`), `None` when there is none.
fn netdev_index(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;

    fn gid(text: &str) -> Gid {
        Gid::from(text.parse::<Ipv6Addr>().unwrap())
    }

    #[test]
    fn the_roce_v2_gid_is_ipv4_mapped_first_then_global_then_link_local() {
        let table = [
            (1, false, gid("fe80::1")),          // RoCE v1 link-local
            (1, true, gid("fe80::1")),           // RoCE v2 link-local
            (1, false, gid("::ffff:192.0.2.7")), // RoCE v1, IPv4-mapped
            (2, true, gid("::ffff:192.0.2.8")),  // another port
            (1, true, gid("2001:db8::7")),       // RoCE v2, global IPv6
            (1, true, gid("::ffff:192.0.2.7")),  // the one
        ];
        assert_eq!(pick_roce_v2_gid(table.iter().copied(), 1), Some(5));
        assert_eq!(pick_roce_v2_gid(table.iter().copied(), 2), Some(3));
        // Without an IPv4-mapped one (an IPv6-only network): the global IPv6 GID, though the
        // link-local one comes first in the table.
        assert_eq!(pick_roce_v2_gid(table[..5].iter().copied(), 1), Some(4));
        // Link-local only as the last resort.
        assert_eq!(pick_roce_v2_gid(table[..4].iter().copied(), 1), Some(1));
        // A zero GID (an empty slot) is never picked; no RoCE v2 GID is None.
        let empty = [(1, true, gid("::")), (1, false, gid("fe80::1"))];
        assert_eq!(pick_roce_v2_gid(empty.iter().copied(), 1), None);
        assert_eq!(pick_roce_v2_gid(table.iter().copied(), 3), None);
    }

    /// A mlx5-like RoCE table: each address as RoCE v1 then v2; two devices.
    fn table() -> Vec<ibv_gid_entry> {
        let raw = |index: u32, text: &str, gid_type: u32, ndev_ifindex: u32| ibv_gid_entry {
            gid: gid(text).into(),
            gid_index: index,
            port_num: 1,
            gid_type,
            ndev_ifindex,
        };
        let (v1, v2) = (
            rdma_mummy_sys::IBV_GID_TYPE_ROCE_V1,
            rdma_mummy_sys::IBV_GID_TYPE_ROCE_V2,
        );
        vec![
            raw(0, "fe80::1", v1, 4),
            raw(1, "fe80::1", v2, 4),
            raw(2, "::ffff:192.0.2.7", v1, 4),
            raw(3, "::ffff:192.0.2.7", v2, 4),
            raw(4, "::ffff:198.51.100.7", v1, 5),
            raw(5, "::ffff:198.51.100.7", v2, 5),
            raw(7, "2001:db8::7", v2, 5),
        ]
    }

    fn addressing(roce: bool) -> PortAddressing {
        match roce {
            true => PortAddressing::Roce,
            false => PortAddressing::InfiniBand,
        }
    }

    fn resolve(selection: SourceGid, roce: bool) -> Result<Option<u8>, SourceGidErrorKind> {
        selection
            .resolve(1, addressing(roce), &table())
            .map(|found| found.map(|entry| entry.index()))
    }

    #[test]
    fn automatic_is_the_ipv4_mapped_roce_v2_gid_on_roce_and_none_on_infiniband() {
        assert_eq!(resolve(SourceGid::Automatic, true).unwrap(), Some(3));
        assert_eq!(resolve(SourceGid::Automatic, false).unwrap(), None);
        let v1_only = &table()[..1];
        let err = SourceGid::Automatic
            .resolve(1, PortAddressing::Roce, v1_only)
            .unwrap_err();
        assert!(matches!(err, SourceGidErrorKind::NoRoceV2Gid { port: 1 }), "{err:?}");
    }

    #[test]
    fn automatic_on_a_port_without_ipv4_is_its_global_gid_and_link_local_last() {
        let ipv6_only: Vec<ibv_gid_entry> = table()
            .into_iter()
            .filter(|e| Ipv6Addr::from(Gid::from(e.gid)).to_ipv4_mapped().is_none())
            .collect();
        let found = SourceGid::Automatic.resolve(1, PortAddressing::Roce, &ipv6_only);
        assert_eq!(found.unwrap().map(|entry| entry.index()), Some(7), "2001:db8::7");
        let link_local_only = &ipv6_only[..2];
        let found = SourceGid::Automatic.resolve(1, PortAddressing::Roce, link_local_only);
        assert_eq!(found.unwrap().map(|entry| entry.index()), Some(1), "fe80::1 as RoCE v2");
    }

    #[test]
    fn automatic_on_an_infiniband_port_that_requires_a_grh_is_gid_index_0() {
        let infiniband = |index: u32, text: &str| ibv_gid_entry {
            gid: gid(text).into(),
            gid_index: index,
            port_num: 1,
            gid_type: rdma_mummy_sys::IBV_GID_TYPE_IB,
            ndev_ifindex: 0,
        };
        let table = [infiniband(0, "fe80::2:c903:1"), infiniband(1, "fec0::2:c903:1")];
        let grh_required = PortAddressing::InfiniBandGrhRequired;
        let found = SourceGid::Automatic
            .resolve(1, grh_required, &table)
            .unwrap()
            .expect("a global address on a port that requires a GRH");
        assert_eq!(
            (found.index(), found.gid(), found.gid_type()),
            (0, gid("fe80::2:c903:1"), GidType::InfiniBand)
        );
        // Without a GRH required the LID is the address; index 0 empty is named.
        let none = SourceGid::Automatic.resolve(1, PortAddressing::InfiniBand, &table);
        assert_eq!(none.unwrap(), None);
        let err = SourceGid::Automatic.resolve(1, grh_required, &table[1..]).unwrap_err();
        assert!(
            matches!(err, SourceGidErrorKind::EmptySlot { port: 1, index: 0 }),
            "{err:?}"
        );
    }

    #[test]
    fn an_index_on_roce_must_be_a_set_roce_v2_slot() {
        assert_eq!(resolve(SourceGid::Index(5), true).unwrap(), Some(5));
        let err = resolve(SourceGid::Index(2), true).unwrap_err();
        assert!(
            matches!(
                err,
                SourceGidErrorKind::NotRoceV2 {
                    port: 1,
                    index: 2,
                    gid_type: GidType::RoceV1
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "GID index 2 of port 1 is RoCE v1, not RoCE v2: its packets are not routed"
        );
        let err = resolve(SourceGid::Index(6), true).unwrap_err();
        assert!(
            matches!(err, SourceGidErrorKind::EmptySlot { port: 1, index: 6 }),
            "{err:?}"
        );
        // On InfiniBand any set slot is a source GID.
        assert_eq!(resolve(SourceGid::Index(2), false).unwrap(), Some(2));
    }

    #[test]
    fn an_unknown_gid_type_is_never_picked_and_never_panics() {
        let mut table = table();
        for entry in &mut table {
            entry.gid_type = 9;
        }
        let err = SourceGid::Automatic
            .resolve(1, PortAddressing::Roce, &table)
            .unwrap_err();
        assert!(matches!(err, SourceGidErrorKind::NoRoceV2Gid { .. }), "{err:?}");
        let err = SourceGid::Index(3)
            .resolve(1, PortAddressing::Roce, &table)
            .unwrap_err();
        assert!(matches!(err, SourceGidErrorKind::NotRoceV2 { .. }), "{err:?}");
    }

    #[test]
    fn without_query_gid_ex_a_slot_is_the_gid_with_the_sysfs_type_and_netdev() {
        let v2 = entry_without_query_gid_ex(1, 3, gid("::ffff:192.0.2.7"), true, Some("RoCE v2"), 4).unwrap();
        assert_eq!(
            (
                v2.port_num,
                v2.gid_index,
                Gid::from(v2.gid),
                v2.gid_type,
                v2.ndev_ifindex
            ),
            (1, 3, gid("::ffff:192.0.2.7"), rdma_mummy_sys::IBV_GID_TYPE_ROCE_V2, 4)
        );
        assert_eq!(entry(&v2).gid_type(), GidType::RoceV2);
        let v1 = entry_without_query_gid_ex(1, 2, gid("::ffff:192.0.2.7"), true, Some("IB/RoCE v1"), 4).unwrap();
        assert_eq!(entry(&v1).gid_type(), GidType::RoceV1);
        // On InfiniBand the type file says "IB/RoCE v1" or cannot be read: an InfiniBand GID.
        for text in [Some("IB/RoCE v1"), None] {
            let ib = entry_without_query_gid_ex(1, 0, gid("fe80::1"), false, text, 0).unwrap();
            assert_eq!(entry(&ib).gid_type(), GidType::InfiniBand);
        }
        // An empty slot reads as zeros; on RoCE a type nothing tells is no entry of a guessed type.
        let empty = entry_without_query_gid_ex(1, 5, gid("::"), true, None, 0).map(|e| entry(&e));
        assert_eq!(empty, Err(libc::ENODATA));
        for text in [None, Some("RoCE v3")] {
            let found = entry_without_query_gid_ex(1, 3, gid("::ffff:192.0.2.7"), true, text, 4).map(|e| entry(&e));
            assert_eq!(found, Err(libc::EOPNOTSUPP), "{text:?}");
        }
    }

    /// A table reader that answers `EOPNOTSUPP` from index 1 on, as [`query_gid_entry`] does where
    /// neither `_ibv_query_gid_ex` nor sysfs reads the slot.
    ///
    /// # Safety
    ///
    /// `entry` must be writable.
    unsafe fn unreadable_after_0(_: *mut ibv_context, port: u8, index: u32, entry: *mut ibv_gid_entry) -> i32 {
        match index {
            0 => {
                (*entry).gid = gid("fe80::1").into();
                (*entry).port_num = port.into();
                0
            },
            _ => libc::EOPNOTSUPP,
        }
    }

    #[test]
    fn a_slot_neither_the_library_nor_sysfs_reads_names_the_library_version() {
        // SAFETY: the reader takes any context.
        let Err(err) = (unsafe { read_gid_table(NonNull::dangling(), 1, 4, unreadable_after_0) }) else {
            panic!("index 1 cannot be read");
        };
        assert!(
            matches!(err.0, SourceGidErrorKind::LibraryTooOld { port: 1, index: 1 }),
            "{err:?}"
        );
        assert_eq!(
            err.0.to_string(),
            "cannot read GID index 1 of port 1: libibverbs has no _ibv_query_gid_ex (rdma-core before 32) and \
             sysfs does not give the GID's type; rdma-core 32 or newer is needed"
        );
        let other = query_gid_error(1, 2, libc::EINVAL);
        assert!(
            matches!(&other, SourceGidErrorKind::QueryGid { port: 1, index: 2, source } if source.raw_os_error() == Some(libc::EINVAL)),
            "{other:?}"
        );
    }

    #[test]
    fn only_automatic_on_infiniband_reads_no_gid_table() {
        assert!(!SourceGid::Automatic.reads_gid_table(PortAddressing::InfiniBand));
        assert!(SourceGid::Automatic.reads_gid_table(PortAddressing::Roce));
        assert!(SourceGid::Automatic.reads_gid_table(PortAddressing::InfiniBandGrhRequired));
        let named = SourceGid::Index(0);
        assert!(named.reads_gid_table(addressing(false)) && named.reads_gid_table(addressing(true)));
    }

    #[test]
    fn netdev_index_finds_the_loopback_device_and_no_unknown_one() {
        assert!(netdev_index("lo").is_some());
        assert_eq!(netdev_index("no-such-device0"), None);
        assert_eq!(netdev_index("nul\0inside"), None);
    }
}
