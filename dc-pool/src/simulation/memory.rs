//! Memory registrations of the simulated fabric: the regions of the program's memory its
//! initiators' scatter/gather entries name by lkey, and the regions of the targets' memory RDMA
//! WRITEs and READs name by rkey; and the checks a request meets against them, as a ConnectX
//! makes them.
use std::collections::BTreeMap;

use sideway::ibverbs::AccessFlags;

use super::Shared;

/// Whose memory a region is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    /// The program's (its initiators' buffers): what lkeys name.
    Local,
    /// The target of this index: what rkeys name.
    Target(usize),
}

/// A registered region.
#[derive(Debug, Clone)]
struct Region {
    node: Node,
    address: u64,
    length: u64,
    access: AccessFlags,
}

impl Region {
    /// Whether `[address, +length)` lies inside it.
    fn holds(&self, address: u64, length: u64) -> bool {
        let end = self.address.saturating_add(self.length);
        address >= self.address && address.checked_add(length).is_some_and(|last| last <= end)
    }
}

/// The first key the fabric gives a region; the next ones follow by one, never reused.
const FIRST_KEY: u32 = 0x1000;

/// Every region registered on the fabric, by key (a region's lkey and rkey are one key, as an
/// mlx5 memory key is both).
#[derive(Debug)]
pub(crate) struct Memory {
    regions: BTreeMap<u32, Region>,
    next_key: Option<u32>,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            regions: BTreeMap::new(),
            next_key: Some(FIRST_KEY),
        }
    }
}

impl Memory {
    /// Registers `[address, +length)` of `node` with `access`: its key. ibv_reg_mr(3): remote
    /// write or atomic access needs local write access.
    fn register(
        &mut self, node: Node, address: u64, length: usize, access: AccessFlags,
    ) -> Result<u32, RegisterMemoryErrorKind> {
        let needs_local_write = access.contains(AccessFlags::RemoteWrite) || access.contains(AccessFlags::RemoteAtomic);
        if needs_local_write && !access.contains(AccessFlags::LocalWrite) {
            return Err(RegisterMemoryErrorKind::RemoteWriteWithoutLocalWrite);
        }
        let length = u64::try_from(length).map_err(|_| RegisterMemoryErrorKind::InvalidRange)?;
        address
            .checked_add(length)
            .ok_or(RegisterMemoryErrorKind::InvalidRange)?;
        let key = self.next_key.ok_or(RegisterMemoryErrorKind::KeysExhausted)?;
        self.next_key = key.checked_add(1);
        self.regions.insert(
            key,
            Region {
                node,
                address,
                length,
                access,
            },
        );
        Ok(key)
    }

    fn deregister(&mut self, key: u32) {
        self.regions.remove(&key);
    }

    /// Whether a scatter/gather entry may be used: `lkey` is a region of the program's memory
    /// holding `[address, +length)`, writable locally when the request writes it (a READ's).
    pub(crate) fn local_access(&self, lkey: u32, address: u64, length: u32, write: bool) -> bool {
        self.regions.get(&lkey).is_some_and(|region| {
            region.node == Node::Local
                && region.holds(address, u64::from(length))
                && (!write || region.access.contains(AccessFlags::LocalWrite))
        })
    }

    /// Whether a request may reach `[address, +length)` of target `target` through `rkey` with
    /// `access` (remote write for a WRITE, remote read for a READ).
    pub(crate) fn remote_access(
        &self, target: usize, rkey: u32, address: u64, length: u64, access: AccessFlags,
    ) -> bool {
        self.regions.get(&rkey).is_some_and(|region| {
            region.node == Node::Target(target) && region.holds(address, length) && region.access.contains(access)
        })
    }
}

/// Error returned by [`SimulatedFabric::register_memory`](super::SimulatedFabric::register_memory)
/// and [`SimulatedTarget::register_memory`](super::SimulatedTarget::register_memory).
#[derive(Debug, thiserror::Error)]
#[error("failed to register simulated memory")]
#[non_exhaustive]
pub struct RegisterMemoryError(#[from] pub RegisterMemoryErrorKind);

/// Why a registration failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterMemoryErrorKind {
    /// Remote write or remote atomic access without local write access (ibv_reg_mr(3): "then
    /// IBV_ACCESS_LOCAL_WRITE must be set too"; `EINVAL`).
    #[error("remote write or atomic access requires local write access")]
    RemoteWriteWithoutLocalWrite,
    /// The range wraps around the address space, or lies outside the target's memory.
    #[error("the range is not memory the node has")]
    InvalidRange,
    /// Every memory key was given out.
    #[error("no memory key is left")]
    KeysExhausted,
}

/// A registered region of simulated memory, as an `ibv_mr` is one of a device's: its key (lkey
/// and rkey, one mlx5 memory key), its bounds and its access. Dropping it deregisters it
/// (`ibv_dereg_mr`): requests naming its key fail from then on.
pub struct SimulatedMemoryRegion {
    fabric: Shared,
    key: u32,
    address: u64,
    length: usize,
    access: AccessFlags,
}

impl std::fmt::Debug for SimulatedMemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedMemoryRegion")
            .field("key", &self.key)
            .field("address", &self.address)
            .field("length", &self.length)
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl SimulatedMemoryRegion {
    /// Registers `[address, +length)` of `node`'s memory on `fabric`.
    pub(crate) fn register(
        fabric: &Shared, node: Node, address: u64, length: usize, access: AccessFlags,
    ) -> Result<Self, RegisterMemoryError> {
        let key = fabric.borrow_mut().memory.register(node, address, length, access)?;
        Ok(Self {
            fabric: Shared::clone(fabric),
            key,
            address,
            length,
            access,
        })
    }

    /// Its local key: what a scatter/gather entry in it names (`setup_sge`).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// Its remote key: what an RDMA WRITE or READ to it names (`setup_write`, `setup_read`).
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The address of its first byte.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Its length in bytes.
    pub fn length(&self) -> usize {
        self.length
    }

    /// The access it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
}

impl Drop for SimulatedMemoryRegion {
    fn drop(&mut self) {
        // The fabric is borrowed only inside the simulation's own calls, none of which drops a
        // region, so the borrow succeeds (should it not, the region stays registered).
        if let Ok(mut fabric) = self.fabric.try_borrow_mut() {
            fabric.memory.deregister(self.key);
        }
    }
}
