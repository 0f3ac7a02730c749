//! A DC test bed on the software device: one DC target (on an SRQ, its own receive CQ) and one
//! DC initiator (its own send CQ), brought up by sideway-ext's unchanged code, and registered
//! memory. Each test runs in a process of its own on the device (`softmlx5::rerun_on_device`).
#![allow(dead_code)] // each test binary uses part of it

use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::{BasicCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, DcInitiatorBringUp};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

pub const PORT: u8 = 1;
pub const DC_KEY: u64 = 0x005e_eddc;

/// Runs the calling test on the software device; returns from the caller when this process is
/// not on it (the rerun's outcome is asserted).
#[macro_export]
macro_rules! on_device {
    ($($env:expr),*) => {
        if let Some(status) = softmlx5::rerun_on_device(&[$($env),*]) {
            assert!(status.success(), "the test on the software device: {status}");
            return;
        }
    };
}

pub fn device() -> &'static softmlx5::Control {
    softmlx5::Control::loaded().expect("the test runs on the software device")
}

/// Registered memory, zeroed.
pub struct Buffer {
    pub mr: Arc<sideway::ibverbs::memory_region::MemoryRegion>,
    data: Vec<u8>,
}

impl Buffer {
    pub fn new(pd: &Arc<ProtectionDomain>, len: usize, access: AccessFlags) -> Self {
        let data = vec![0u8; len];
        // SAFETY: `data` is never reallocated and is dropped after `mr` (field order).
        let mr = unsafe { pd.reg_mr(data.as_ptr() as usize, data.len(), access) }.expect("reg_mr");
        Self { mr, data }
    }

    pub fn addr(&self, offset: usize) -> u64 {
        self.data.as_ptr() as u64 + offset as u64
    }

    /// The bytes at `offset`, read as the device wrote them.
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        // SAFETY: in bounds; volatile, since the device wrote behind Rust's back.
        (offset..offset + len)
            .map(|i| unsafe { self.data.as_ptr().add(i).read_volatile() })
            .collect()
    }

    pub fn fill(&mut self, byte: u8) {
        // SAFETY: in bounds; the device does not write this buffer while the test fills it.
        unsafe { std::ptr::write_bytes(self.data.as_mut_ptr(), byte, self.data.len()) }
    }
}

/// Every access flag a DC test needs.
pub fn all() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic
}

pub struct Bed {
    pub ctx: Arc<DeviceContext>,
    pub pd: Arc<ProtectionDomain>,
    pub send_cq: Arc<BasicCompletionQueue>,
    pub recv_cq: Arc<BasicCompletionQueue>,
    pub srq: Arc<SharedReceiveQueue>,
    pub dct: DcTarget,
    pub endpoint: DcEndpoint,
    pub dci: DcInitiator,
    pub ah: Arc<AddressHandle>,
}

pub fn open() -> Arc<DeviceContext> {
    let devices = DeviceList::new().expect("device list");
    let device = devices.iter().find(|d| d.name() == "softmlx5_0").expect("softmlx5_0");
    device.open().expect("open softmlx5_0")
}

impl Bed {
    /// A target with `target_access` and the target's bring-up, an initiator with its own.
    pub fn with(
        target_access: AccessFlags, target: impl FnOnce(&mut DcTargetBringUp),
        initiator: impl FnOnce(&mut DcInitiatorBringUp),
    ) -> Self {
        let ctx = open();
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let send_cq = ctx.create_cq_builder().setup_cqe(256).build().expect("send CQ");
        let recv_cq = ctx.create_cq_builder().setup_cqe(256).build().expect("receive CQ");
        let srq = pd.create_srq_builder().setup_max_wr(64).build().expect("SRQ");
        let mut dct = pd
            .create_dct_builder()
            .setup_recv_cq(recv_cq.clone())
            .setup_srq(&srq)
            .setup_dc_key(DC_KEY)
            .setup_access_flags(target_access)
            .build()
            .expect("DC target");
        let mut target_params = DcTargetBringUp::new(PORT);
        target(&mut target_params);
        dct.bring_up(&target_params).expect("DC target to RTR");
        let endpoint = dct.endpoint().expect("endpoint");
        let mut dci = pd
            .create_dci_builder()
            .setup_send_cq(send_cq.clone())
            .setup_max_send_wr(64)
            .setup_max_inline_data(64)
            .build()
            .expect("DC initiator");
        let mut params = DcInitiatorBringUp::new(PORT);
        initiator(&mut params);
        dci.bring_up(&params).expect("DC initiator to RTS");
        let gid_index = dci.source_gid().map_or(0, |entry| entry.index());
        let ah = endpoint.create_ah(&pd, PORT, gid_index).expect("address handle");
        Self {
            ctx,
            pd,
            send_cq,
            recv_cq,
            srq,
            dct,
            endpoint,
            dci,
            ah,
        }
    }

    pub fn new() -> Self {
        Self::with(all(), |_| {}, |_| {})
    }

    pub fn buffer(&self, len: usize) -> Buffer {
        Buffer::new(&self.pd, len, all())
    }

    pub fn dct_number(&self) -> u32 {
        self.endpoint.dct_number()
    }

    /// Posts one signaled RDMA WRITE of `len` bytes from `from` (lkey `lkey`) to `to`/`rkey`.
    pub fn write(&mut self, wr_id: u64, lkey: u32, from: u64, rkey: u32, to: u64, len: u32) {
        let (ah, dct_number, dc_key) = (self.ah.clone(), self.endpoint.dct_number(), self.endpoint.dc_key());
        self.dci
            .post_send_one(wr_id, sideway::ibverbs::queue_pair::WorkRequestFlags::Signaled, |wr| {
                use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
                // SAFETY: the tests keep both buffers alive until the completion is polled.
                unsafe {
                    wr.setup_write(rkey, to)
                        .setup_dc_addr(&ah, dct_number, dc_key)
                        .setup_sge(lkey, from, len)
                }
            })
            .expect("post an RDMA WRITE");
    }

    /// The send completions, waiting up to `timeout` for `count` of them.
    pub fn sends(&self, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
        wait(self.send_cq.as_ref(), count, timeout)
    }

    pub fn receives(&self, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
        wait(self.recv_cq.as_ref(), count, timeout)
    }
}

/// Up to `count` completions of `cq`, polled until `timeout`.
pub fn wait(cq: &BasicCompletionQueue, count: usize, timeout: Duration) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + timeout;
    let mut all = Vec::new();
    let mut wcs = [WorkCompletion::default(); 16];
    loop {
        all.extend_from_slice(cq.poll_work_completions(&mut wcs).expect("poll"));
        if all.len() >= count || Instant::now() >= deadline {
            return all;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

pub fn status(wc: &WorkCompletion) -> Option<WorkCompletionStatus> {
    wc.status()
}
