//! The simulated pool tests' targets: each with the region of its memory their requests write to
//! registered.
use sideway::ibverbs::AccessFlags;

use crate::simulation::{SimulatedMemoryRegion, SimulatedTarget};

/// A target and the region of its memory (its first 8 bytes) the requests write to.
pub(super) struct Remote {
    target: SimulatedTarget,
    pub(super) region: SimulatedMemoryRegion,
}

impl Remote {
    pub(super) fn new(target: SimulatedTarget) -> Self {
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        let region = target.register_memory(0..8, access).expect("a region");
        Self { target, region }
    }
}

impl std::ops::Deref for Remote {
    type Target = SimulatedTarget;

    fn deref(&self) -> &SimulatedTarget {
        &self.target
    }
}
