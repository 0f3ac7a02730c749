//! A simulated DC target: its DCT number and DC key (its [`DcEndpoint`]), the memory RDMA WRITEs
//! and READs reach where it registered it, and its shared receive queue of receive slots that SENDs fill; and the
//! faults a test scripts on it (kill it, change its key).
use std::collections::VecDeque;
use std::ops::Range;

use sideway::ibverbs::address::Gid;
use sideway::ibverbs::AccessFlags;

use super::memory::{Node, RegisterMemoryError, RegisterMemoryErrorKind, SimulatedMemoryRegion};
use super::Shared;
use sideway_ext::mlx5::dc::endpoint::{DcEndpoint, InvalidDcEndpointError};

/// The first DCT number the fabric gives a target; the next ones follow by one.
pub(crate) const FIRST_DCT_NUMBER: u32 = 0x1_0000;

/// A message a target received: a SEND's bytes, or a WRITE with immediate's (empty) receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedMessage {
    /// The bytes (empty for a WRITE with immediate).
    pub data: Vec<u8>,
    /// The immediate data, if the request carried some.
    pub imm_data: Option<u32>,
}

/// A DC target's state in the fabric.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) dc_key: u64,
    pub(crate) alive: bool,
    pub(crate) latency: u64,
    pub(crate) memory: Vec<u8>,
    pub(crate) base: u64,
    pub(crate) slot_size: u32,
    pub(crate) free_slots: u64,
    pub(crate) received: VecDeque<SimulatedMessage>,
}

/// Where a simulated target's memory starts in its address space (what `remote_addr`s name).
const MEMORY_BASE: u64 = 0x7f00_0000_0000;

/// Creates a [`SimulatedTarget`]; from
/// [`SimulatedFabric::create_target_builder`](super::SimulatedFabric::create_target_builder).
#[derive(Debug, Clone)]
pub struct SimulatedTargetBuilder {
    fabric: Shared,
    dc_key: u64,
    memory: usize,
    receives: u64,
    receive_size: u32,
    latency: u64,
}

impl SimulatedTargetBuilder {
    pub(crate) fn new(fabric: &Shared) -> Self {
        Self {
            fabric: Shared::clone(fabric),
            dc_key: 0,
            memory: 4096,
            receives: 0,
            receive_size: 4096,
            latency: 1,
        }
    }

    /// Its DC key (`dct_access_key`; default 0): requests must name it.
    pub fn setup_dc_key(&mut self, dc_key: u64) -> &mut Self {
        self.dc_key = dc_key;
        self
    }

    /// Its memory in bytes (default 4096), zeroed: RDMA WRITEs and READs reach the parts of it
    /// [registered](SimulatedTarget::register_memory).
    pub fn setup_memory(&mut self, bytes: usize) -> &mut Self {
        self.memory = bytes;
        self
    }

    /// Receives posted on its shared receive queue at creation (default 0: a SEND waits for
    /// [`post_receives`](SimulatedTarget::post_receives)), each of `size` bytes (default 4096).
    pub fn setup_receives(&mut self, count: u64, size: u32) -> &mut Self {
        self.receives = count;
        self.receive_size = size;
        self
    }

    /// How many ticks a request to it takes once it is the head of its stream (default 1; at
    /// least 1).
    pub fn setup_latency(&mut self, ticks: u64) -> &mut Self {
        self.latency = ticks.max(1);
        self
    }

    /// Creates the target, with the next DCT number of the fabric.
    ///
    /// # Errors
    ///
    /// The DCT numbers (24 bits) are used up: [`InvalidDcEndpointError`].
    pub fn build(&self) -> Result<SimulatedTarget, InvalidDcEndpointError> {
        let mut fabric = self.fabric.borrow_mut();
        let index = fabric.targets.len();
        let dct_number = u32::try_from(index).map_or(u32::MAX, |index| index.saturating_add(FIRST_DCT_NUMBER));
        // Checked once here: `endpoint` builds it again with the key the target has then.
        endpoint(dct_number, self.dc_key)?;
        fabric.targets.push(Target {
            dc_key: self.dc_key,
            alive: true,
            latency: self.latency,
            memory: vec![0; self.memory],
            base: MEMORY_BASE,
            slot_size: self.receive_size,
            free_slots: self.receives,
            received: VecDeque::new(),
        });
        Ok(SimulatedTarget {
            fabric: Shared::clone(&self.fabric),
            index,
            dct_number,
        })
    }
}

/// The endpoint of the target with `dct_number` and `dc_key`: an InfiniBand port at LID 1 (the
/// fabric routes by DCT number).
fn endpoint(dct_number: u32, dc_key: u64) -> Result<DcEndpoint, InvalidDcEndpointError> {
    DcEndpoint::new(1, Gid::default(), dct_number, dc_key, false)
}

/// A DC target of a [`SimulatedFabric`](super::SimulatedFabric): what a program gives a pool as
/// a destination ([`endpoint`](Self::endpoint)), what it checks after a run (its
/// [memory](Self::read), its [received](Self::take_received) messages), and the faults it
/// scripts ([`kill`](Self::kill), [`set_dc_key`](Self::set_dc_key)).
#[derive(Debug, Clone)]
pub struct SimulatedTarget {
    fabric: Shared,
    index: usize,
    dct_number: u32,
}

impl SimulatedTarget {
    fn with<R>(&self, f: impl FnOnce(&mut Target) -> R) -> R {
        f(&mut self.fabric.borrow_mut().targets[self.index])
    }

    /// Its fabric, and its index among the fabric's targets.
    pub(crate) fn place(&self) -> (&Shared, usize) {
        (&self.fabric, self.index)
    }

    /// Its endpoint, as a peer would send it: give it to
    /// [`add_destination`](crate::DcInitiatorPool::add_destination). Its DC key
    /// is the one the target has now: after [`set_dc_key`](Self::set_dc_key), the new one (a
    /// destination added before keeps the endpoint it was added with).
    pub fn endpoint(&self) -> DcEndpoint {
        let dc_key = self.with(|target| target.dc_key);
        endpoint(self.dct_number, dc_key).expect("its DCT number was checked when it was built")
    }

    /// Its DCT number.
    pub fn dct_number(&self) -> u32 {
        self.dct_number
    }

    /// The address of the first byte of its memory.
    pub fn address(&self) -> u64 {
        self.with(|target| target.base)
    }

    /// Registers the bytes `range` of its memory (offsets from [`address`](Self::address)) with
    /// `access`, as its program's `ibv_reg_mr` does: RDMA WRITEs reach the region through its
    /// [`rkey`](SimulatedMemoryRegion::rkey) if `access` has remote write, READs if it has
    /// remote read; a request outside it, with another key, or after it is dropped
    /// (deregistered) ends with a remote access error.
    ///
    /// # Errors
    ///
    /// [`RegisterMemoryErrorKind::InvalidRange`] for a range outside its memory, and the
    /// others of [`SimulatedFabric::register_memory`](super::SimulatedFabric::register_memory).
    pub fn register_memory(
        &self, range: Range<usize>, access: AccessFlags,
    ) -> Result<SimulatedMemoryRegion, RegisterMemoryError> {
        let (base, size) = self.with(|target| (target.base, target.memory.len()));
        if range.start > range.end || range.end > size {
            return Err(RegisterMemoryErrorKind::InvalidRange.into());
        }
        let node = Node::Target(self.index);
        SimulatedMemoryRegion::register(&self.fabric, node, base + range.start as u64, range.len(), access)
    }

    /// A copy of its memory in `range` (offsets from [`address`](Self::address)); `None` for a
    /// range outside it.
    pub fn read(&self, range: Range<usize>) -> Option<Vec<u8>> {
        self.with(|target| target.memory.get(range).map(<[u8]>::to_vec))
    }

    /// Posts `count` more receives on its shared receive queue.
    pub fn post_receives(&self, count: u64) {
        self.with(|target| target.free_slots = target.free_slots.saturating_add(count));
    }

    /// Receives posted and not yet consumed.
    pub fn free_receives(&self) -> u64 {
        self.with(|target| target.free_slots)
    }

    /// The messages it received since the last call, in arrival order.
    pub fn take_received(&self) -> Vec<SimulatedMessage> {
        self.with(|target| target.received.drain(..).collect())
    }

    /// A fault: the target is gone (its host died, or it was destroyed): nothing answers its DCT
    /// number, and requests to it fail after the transport timeout.
    pub fn kill(&self) {
        self.with(|target| target.alive = false);
    }

    /// It answers again (a peer back under the same DCT number).
    pub fn revive(&self) {
        self.with(|target| target.alive = true);
    }

    /// Whether it answers.
    pub fn is_alive(&self) -> bool {
        self.with(|target| target.alive)
    }

    /// A fault: its DC key changes; requests naming the old key fail (those to a destination
    /// added with an [`endpoint`](Self::endpoint) taken before) as the fabric's
    /// [`WrongDcKey`](super::WrongDcKey) says (by default dropped: transport retry exceeded after
    /// the transport timeout), and the endpoint names the new one.
    pub fn set_dc_key(&self, dc_key: u64) {
        self.with(|target| target.dc_key = dc_key);
    }

    /// How many ticks a request to it takes (at least 1).
    pub fn set_latency(&self, ticks: u64) {
        self.with(|target| target.latency = ticks.max(1));
    }
}
