//! What a failed device list means. libibverbs answers `ibv_get_device_list` with `ENOSYS`
//! ("Function not implemented") when it cannot read `class/infiniband_verbs/abi_version` under
//! sysfs, which the kernel's `ib_uverbs` module provides, or when the kernel's verbs ABI
//! version there is one it does not take (rdma-core `libibverbs/init.c`, `check_abi_version`).
//! Which of these it is, the kernel's sysfs says: the devices it has (`class/infiniband`) and
//! whether `ib_uverbs` is there.
use std::path::PathBuf;

use sideway::ibverbs::device::{GetDeviceListError, GetDeviceListErrorKind};

/// What sysfs says of the host's RDMA devices, under the root libibverbs reads
/// (`SYSFS_PATH`, else `/sys`: libibverbs `ibv_get_sysfs_path`).
#[derive(Debug, Default)]
pub struct RdmaSysfs {
    /// The RDMA devices the kernel has (`class/infiniband`), sorted.
    devices: Vec<String>,
    /// `class/infiniband_verbs/abi_version`: `ib_uverbs` is loaded (`None`: it is not).
    verbs_abi_version: Option<String>,
}

impl RdmaSysfs {
    /// Reads it.
    pub fn read() -> Self {
        let root = std::env::var_os("SYSFS_PATH").map_or_else(|| PathBuf::from("/sys"), PathBuf::from);
        let mut devices: Vec<String> = std::fs::read_dir(root.join("class/infiniband"))
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok())
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        devices.sort_unstable();
        Self {
            devices,
            verbs_abi_version: std::fs::read_to_string(root.join("class/infiniband_verbs/abi_version"))
                .ok()
                .map(|version| version.trim().to_string()),
        }
    }
}

/// The message for a device list that failed with `err`: its causes, then what they mean.
pub fn list_error(err: &GetDeviceListError) -> String {
    let errno = match &err.0 {
        GetDeviceListErrorKind::Ibverbs(io) => io.raw_os_error(),
        _ => None,
    };
    let text = format!("cannot list RDMA devices: {}", crate::chain(err));
    match meaning(errno, &RdmaSysfs::read()) {
        Some(meaning) => format!("{text}. {meaning}"),
        None => text,
    }
}

/// What `ibv_get_device_list` failing with `errno` means on a host whose sysfs says `sysfs`;
/// `None` for an error other than `ENOSYS`.
pub fn meaning(errno: Option<i32>, sysfs: &RdmaSysfs) -> Option<String> {
    if errno != Some(libc::ENOSYS) {
        return None;
    }
    Some(match (&sysfs.verbs_abi_version, sysfs.devices.is_empty()) {
        (Some(version), _) => format!(
            "libibverbs does not take the kernel's verbs ABI version {version} \
             (class/infiniband_verbs/abi_version): this rdma-core is too old or too new for this kernel"
        ),
        (None, true) => "This host has no RDMA device: libibverbs answers ENOSYS when \
                         /sys/class/infiniband_verbs (the ib_uverbs module) is missing, and the kernel lists no \
                         RDMA device in /sys/class/infiniband (no RDMA adapter, or its driver, mlx5_ib for a \
                         ConnectX, is not loaded)"
            .to_string(),
        (None, false) => format!(
            "The ib_uverbs module is not loaded: the kernel has RDMA devices ({}) but no \
             /sys/class/infiniband_verbs, without which libibverbs answers ENOSYS; load it (modprobe ib_uverbs)",
            sysfs.devices.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::{meaning, RdmaSysfs};

    fn sysfs(devices: &[&str], verbs_abi_version: Option<&str>) -> RdmaSysfs {
        RdmaSysfs {
            devices: devices.iter().map(|name| name.to_string()).collect(),
            verbs_abi_version: verbs_abi_version.map(str::to_string),
        }
    }

    /// ENOSYS: no device at all, devices without ib_uverbs, or an ABI libibverbs refused; any
    /// other error is left as it is.
    #[test]
    fn enosys_from_the_device_list_says_what_is_missing() {
        let none = meaning(Some(libc::ENOSYS), &sysfs(&[], None)).expect("explained");
        assert!(none.starts_with("This host has no RDMA device"), "{none}");
        assert!(none.contains("ib_uverbs") && none.contains("mlx5_ib"), "{none}");
        let unloaded = meaning(Some(libc::ENOSYS), &sysfs(&["mlx5_0", "mlx5_1"], None)).expect("explained");
        assert!(unloaded.starts_with("The ib_uverbs module is not loaded"), "{unloaded}");
        assert!(
            unloaded.contains("(mlx5_0, mlx5_1)") && unloaded.contains("modprobe ib_uverbs"),
            "{unloaded}"
        );
        let abi = meaning(Some(libc::ENOSYS), &sysfs(&["mlx5_0"], Some("7"))).expect("explained");
        assert!(abi.contains("verbs ABI version 7"), "{abi}");
        for other in [None, Some(libc::EPERM), Some(libc::ENOMEM)] {
            assert_eq!(meaning(other, &sysfs(&[], None)), None, "{other:?}");
        }
    }
}
