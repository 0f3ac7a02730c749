//! `mlx5_devinfo --dc-selftest`: DC end to end on one ConnectX, in loopback on one port (`-i`,
//! default 1). A DC target (on a shared receive queue) and a DC initiator are built and brought
//! up, both from the GID `-g` gives (else each side's default), then each check runs and prints
//! one line: `ok`, `FAILED` with the status, or `skipped` with why. The exit status is 1 when the
//! device is not mlx5 (or libmlx5 is missing) and 2 when a check failed. The fault steps are in
//! `dc_selftest/faults.rs`, the direct path's in `dc_selftest/direct.rs`; with `--report FILE`
//! the steps are also written as JSON (`report.rs`), with the port and each side's GID.
//!
//! A loopback reaches its own port: a pass proves nothing of routing, ARP, a switch's MTU, PFC
//! or a remote MTU, and the report says so first (`scope`, `not_tried`).
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::{BasicCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePairState, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::extension::{CompletionQueueExt, DeviceContextExt, ProtectionDomainExt};
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
use sideway_ext::ibverbs::source_gid::SourceGid;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, DcInitiatorBringUp, DciStreams};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

use self::atomic_order::AtomicOrder;
use crate::chain;
use crate::port::PortFacts;
use crate::report::{step, SelftestReport, Side};

const KEY: u64 = 0x5e1f_7e57;
const LEN: usize = 4096;
/// The longest wait for a completion: a request to a destroyed DC target completes only once the
/// initiator's retries are spent (about half a second with the default timeout and retry count).
const TIMEOUT: Duration = Duration::from_secs(30);

mod atomic_order;
mod direct;
mod faults;

type Result<T> = std::result::Result<T, String>;

/// What the self-test found: the exit status to use.
pub enum Outcome {
    /// Every check passed or was skipped with its reason.
    Passed,
    /// The device is not mlx5, or libmlx5 is missing.
    NotMlx5,
    /// At least one check failed.
    Failed,
}

/// A buffer registered for local and remote access; deregistered before it is freed.
struct Buffer {
    mr: Arc<MemoryRegion>,
    data: Vec<u8>,
}

impl Buffer {
    fn new(pd: &Arc<ProtectionDomain>, len: usize, access: AccessFlags) -> Result<Self> {
        let data = vec![0u8; len];
        // SAFETY: `data` is never reallocated and is dropped after `mr` (field order).
        let mr = unsafe { pd.reg_mr(data.as_ptr() as usize, data.len(), access) }
            .map_err(|e| format!("reg_mr: {}", chain(&e)))?;
        Ok(Self { mr, data })
    }

    fn addr(&self, offset: usize) -> u64 {
        self.data.as_ptr() as u64 + offset as u64
    }

    /// Reads what the device wrote (behind Rust's back: volatile reads).
    fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        // SAFETY: in bounds of `data`.
        (offset..offset + len)
            .map(|i| unsafe { std::ptr::read_volatile(self.data.as_ptr().add(i)) })
            .collect()
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.data[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// Where the loopback runs: its port, the GID index its address handle is sent from, and the
/// source GID both sides are brought up with.
struct Addressing {
    port: u8,
    /// The address handle's source GID index: given, or picked (`pick_gid_index`).
    gid_index: u8,
    /// `-g`: the GID both sides use, on InfiniBand too (then every address is global).
    given: Option<u8>,
}

impl Addressing {
    /// The source GID of both sides: the given index, else each side's default (on RoCE the
    /// port's RoCE v2 GID, on InfiniBand none).
    fn source_gid(&self) -> SourceGid {
        self.given.map_or(SourceGid::Automatic, SourceGid::Index)
    }

    /// How every DC initiator of the self-test is brought up: on the port, from the source GID.
    fn initiator_bring_up(&self) -> DcInitiatorBringUp {
        let mut bring_up = DcInitiatorBringUp::new(self.port);
        bring_up.setup_source_gid(self.source_gid());
        bring_up
    }
}

/// Everything one loopback needs.
struct Loopback {
    addressing: Addressing,
    pd: Arc<ProtectionDomain>,
    send_cq: sideway::ibverbs::completion::GenericCompletionQueue,
    recv_cq: sideway::ibverbs::completion::GenericCompletionQueue,
    srq: Arc<SharedReceiveQueue>,
    /// How its DC target was made: the fault steps make one more.
    recipe: TargetRecipe,
    dct: DcTarget,
    endpoint: DcEndpoint,
    ah: Arc<AddressHandle>,
    remote: Buffer,
    /// Registered without remote write: a write into it is a remote access error.
    forbidden: Buffer,
    local: Buffer,
}

/// A DC target of the loopback, on its receive CQ and SRQ, brought up on the local GID.
struct TargetRecipe {
    pd: Arc<ProtectionDomain>,
    recv_cq: sideway::ibverbs::completion::GenericCompletionQueue,
    srq: Arc<SharedReceiveQueue>,
    access: AccessFlags,
    bring_up: DcTargetBringUp,
}

impl TargetRecipe {
    /// A DC target at RTR and its endpoint.
    fn build(&self) -> Result<(DcTarget, DcEndpoint)> {
        let mut dct = self
            .pd
            .create_dct_builder()
            .setup_recv_cq(self.recv_cq.clone())
            .setup_srq(&self.srq)
            .setup_dc_key(KEY)
            .setup_access_flags(self.access)
            .build()
            .map_err(|e| format!("create the DC target: {}", chain(&e)))?;
        dct.bring_up(&self.bring_up)
            .map_err(|e| format!("DC target to RTR: {}", chain(&e)))?;
        let endpoint = dct
            .endpoint()
            .map_err(|e| format!("the DC target's endpoint: {}", chain(&e)))?;
        Ok((dct, endpoint))
    }
}

fn cq(ctx: &Arc<DeviceContext>) -> Result<sideway::ibverbs::completion::GenericCompletionQueue> {
    let cq: Arc<BasicCompletionQueue> = ctx
        .create_cq_builder()
        .setup_cqe(256)
        .build()
        .map_err(|e| format!("create CQ: {}", chain(&e)))?;
    Ok(cq.into())
}

impl Loopback {
    fn new(ctx: &Arc<DeviceContext>, addressing: Addressing, atomics: bool) -> Result<Self> {
        let port = addressing.port;
        let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {}", chain(&e)))?;
        let (send_cq, recv_cq) = (cq(ctx)?, cq(ctx)?);
        let srq = pd
            .create_srq_builder()
            .setup_max_wr(16)
            .build()
            .map_err(|e| format!("create SRQ: {}", chain(&e)))?;
        let mut access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
        if atomics {
            access |= AccessFlags::RemoteAtomic;
        }
        let roce = ctx
            .query_port(port)
            .map_err(|e| format!("query port {port}: {}", chain(&e)))?
            .link_layer()
            == LinkLayer::Ethernet;
        let mut bring_up = DcTargetBringUp::new(port);
        bring_up.setup_source_gid(addressing.source_gid());
        let recipe = TargetRecipe {
            pd: Arc::clone(&pd),
            recv_cq: recv_cq.clone(),
            srq: Arc::clone(&srq),
            access,
            bring_up,
        };
        let (dct, endpoint) = recipe.build()?;
        let ah = match addressing.given {
            // A GID given on InfiniBand: global, as the target is.
            Some(index) if !roce => pd
                .create_ah(&endpoint.global_address_handle_attribute(port, index))
                .map_err(|e| format!("address handle: {}", chain(&e)))?,
            _ => endpoint
                .create_ah(&pd, port, addressing.gid_index)
                .map_err(|e| format!("address handle: {}", chain(&e)))?,
        };
        let remote = Buffer::new(&pd, LEN, access)?;
        let local = Buffer::new(&pd, LEN, AccessFlags::LocalWrite)?;
        let forbidden = Buffer::new(&pd, LEN, AccessFlags::LocalWrite)?;
        Ok(Self {
            addressing,
            pd,
            send_cq,
            recv_cq,
            srq,
            recipe,
            dct,
            endpoint,
            ah,
            remote,
            forbidden,
            local,
        })
    }

    fn initiator(&self, streams: Option<DciStreams>) -> Result<DcInitiator> {
        let mut builder = self.pd.create_dci_builder();
        builder.setup_send_cq(self.send_cq.clone()).setup_max_send_wr(16);
        if let Some(streams) = streams {
            builder.setup_dci_streams(streams);
        }
        let mut dci = builder
            .build()
            .map_err(|e| format!("create the DC initiator: {}", chain(&e)))?;
        dci.bring_up(&self.addressing.initiator_bring_up())
            .map_err(|e| format!("DC initiator to RTS: {}", chain(&e)))?;
        Ok(dci)
    }

    /// Waits for one completion of `cq`.
    fn wait(&self, receive: bool) -> Result<WorkCompletion> {
        let cq = if receive { &self.recv_cq } else { &self.send_cq };
        let deadline = Instant::now() + TIMEOUT;
        let mut wcs = [WorkCompletion::default(); 1];
        loop {
            let polled = cq
                .poll_work_completions(&mut wcs)
                .map_err(|e| format!("poll: {}", chain(&e)))?;
            if let Some(wc) = polled.first() {
                return Ok(*wc);
            }
            if Instant::now() >= deadline {
                return Err(format!("no completion within {TIMEOUT:?}"));
            }
            std::thread::yield_now();
        }
    }

    /// Posts one request built by `build` (operation, address with `key` on `stream`, data) and
    /// waits for its completion.
    fn one(
        &mut self, dci: &mut DcInitiator, key: u64, stream: Option<u16>,
        build: impl FnOnce(&mut Self, &mut sideway_ext::mlx5::dc::initiator::DcPostSendGuard<'_>, u64, Option<u16>),
    ) -> Result<WorkCompletion> {
        let mut guard = dci.start_post_send();
        build(self, &mut guard, key, stream);
        guard.post().map_err(|e| format!("post: {}", chain(&e)))?;
        self.wait(false)
    }
}

/// Addresses `$request` to the loopback's DC target with `$key` (on `$stream`, if any), then
/// runs the data step `$body` on the request, named `$handle`.
macro_rules! finish {
    ($loopback:expr, $request:expr, $key:expr, $stream:expr, |$handle:ident| $body:expr) => {{
        let number = $loopback.endpoint.dct_number();
        match $stream {
            Some(stream) => {
                // SAFETY: the self-test passes a stream only to a DC initiator built with streams.
                let $handle = unsafe { $request.setup_dc_addr_stream(&$loopback.ah, number, $key, stream) };
                $body
            },
            None => {
                let $handle = $request.setup_dc_addr(&$loopback.ah, number, $key);
                $body
            },
        }
    }};
}

fn success(wc: &WorkCompletion) -> Result<()> {
    match wc.status() {
        Some(WorkCompletionStatus::Success) => Ok(()),
        status => Err(format!(
            "completion status {status:?} ({}), vendor syndrome {:#x}",
            wc.status_raw(),
            wc.vendor_err()
        )),
    }
}

fn write(lb: &mut Loopback, dci: &mut DcInitiator, key: u64, stream: Option<u16>, seed: u8) -> Result<WorkCompletion> {
    write_into(lb, dci, key, stream, seed, false)
}

/// A write of `seed`'s pattern into the remote buffer, or with `forbidden` into memory without
/// remote write (a remote access error).
fn write_into(
    lb: &mut Loopback, dci: &mut DcInitiator, key: u64, stream: Option<u16>, seed: u8, forbidden: bool,
) -> Result<WorkCompletion> {
    lb.local.write(0, &pattern(LEN, seed));
    lb.one(dci, key, stream, |lb, guard, key, stream| {
        let to = if forbidden { &lb.forbidden } else { &lb.remote };
        let request = guard
            .construct_wr(u64::from(seed), WorkRequestFlags::Signaled)
            .setup_write(to.mr.rkey(), to.addr(0));
        // SAFETY: the local buffer lies in its memory region and outlives the request.
        finish!(lb, request, key, stream, |h| unsafe {
            h.setup_sge(lb.local.mr.lkey(), lb.local.addr(0), LEN as u32)
        })
    })
}

/// An atomic on the remote buffer's first 8 bytes.
enum Atomic {
    FetchAdd(u64),
    CompareSwap(u64, u64),
}

/// Runs `op`; the bytes it returned and the bytes it left.
fn atomic(lb: &mut Loopback, dci: &mut DcInitiator, op: Atomic) -> Result<([u8; 8], [u8; 8])> {
    let wc = lb.one(dci, KEY, None, |lb, guard, key, stream| {
        let (rkey, remote) = (lb.remote.mr.rkey(), lb.remote.addr(0));
        let request = guard.construct_wr(3, WorkRequestFlags::Signaled);
        // SAFETY: the local buffer lies in its memory region and outlives the request.
        match op {
            Atomic::FetchAdd(add) => finish!(
                lb,
                request.setup_atomic_fetch_add(rkey, remote, add),
                key,
                stream,
                |h| unsafe { h.setup_sge(lb.local.mr.lkey(), lb.local.addr(0), 8) }
            ),
            Atomic::CompareSwap(compare, swap) => {
                finish!(
                    lb,
                    request.setup_atomic_compare_swap(rkey, remote, compare, swap),
                    key,
                    stream,
                    // SAFETY: the 8 bytes at the start of the local buffer, registered as its region.
                    |h| unsafe { h.setup_sge(lb.local.mr.lkey(), lb.local.addr(0), 8) }
                )
            },
        }
    })?;
    success(&wc)?;
    let bytes = |buffer: &Buffer| -> [u8; 8] { buffer.read(0, 8).try_into().expect("8 bytes") };
    Ok((bytes(&lb.local), bytes(&lb.remote)))
}

fn written(lb: &Loopback, seed: u8) -> Result<String> {
    (lb.remote.read(0, LEN) == pattern(LEN, seed))
        .then(|| format!("{LEN} bytes arrived"))
        .ok_or_else(|| "the bytes that arrived differ from those sent".to_string())
}

/// The GID index to use on `port`: the one given, else on RoCE the port's RoCE v2 GID
/// (IPv4-mapped first), on InfiniBand 0.
fn pick_gid_index(ctx: &Arc<DeviceContext>, port: u8, given: Option<u8>) -> Result<u8> {
    if let Some(index) = given {
        return Ok(index);
    }
    let attr = ctx
        .query_port(port)
        .map_err(|e| format!("query port {port}: {}", chain(&e)))?;
    if attr.link_layer() != LinkLayer::Ethernet {
        return Ok(0);
    }
    let entry = ctx
        .source_gid(port, &SourceGid::Automatic)
        .map_err(|e| format!("pick a RoCE v2 GID: {}: give one with -g", chain(&e)))?
        .ok_or_else(|| format!("port {port} is RoCE and has no RoCE v2 GID (no IP address?): give one with -g"))?;
    Ok(entry.index())
}

/// Runs the self-test on port `port` of `ctx` (named `name`) with the local GID `gid_index`
/// (picked when `None`), recording it in `report`.
pub fn run(
    ctx: &Arc<DeviceContext>, name: &str, port: u8, gid_index: Option<u8>, report: &mut SelftestReport,
) -> Outcome {
    report.device(ctx, name);
    let mlx5 = Mlx5DeviceContext::new(Arc::clone(ctx));
    let capabilities = match mlx5.query_dc_capabilities() {
        Ok(capabilities) => {
            report.capabilities(&capabilities, mlx5.query_send_wqe_sizes().ok());
            capabilities
        },
        Err(err) => return stop(report, name, format!("the DC capability query failed: {}", chain(&err))),
    };
    if !capabilities.is_mlx5() {
        let why = "not an mlx5 device (or libmlx5 is missing): DC needs a ConnectX-4 or newer";
        println!("{name}: {why}");
        report.stop(why);
        return Outcome::NotMlx5;
    }
    let port_facts = PortFacts::read(ctx, port);
    let port_line = port_facts.as_ref().map_or_else(Clone::clone, PortFacts::line);
    report.port(port_facts);
    let given = gid_index;
    let gid_index = match pick_gid_index(ctx, port, given) {
        Ok(index) => index,
        Err(why) => return stop(report, name, why),
    };
    let gid = ctx.query_gid(port, gid_index.into()).map_or_else(
        |e| format!("unreadable: {}", chain(&e)),
        |gid| std::net::Ipv6Addr::from(gid).to_string(),
    );
    report.address(gid_index, gid.clone());
    println!(
        "DC self-test of {name}, port {port}, GID index {gid_index} ({gid}): max_dc_rd_atom {:?} (as requester), \
         max_dc_init_rd_atom {:?} (as responder; a DCI's bound), DCI streams {:?}",
        capabilities.max_dc_rd_atom(),
        capabilities.max_dc_init_rd_atom(),
        capabilities.dci_streams()
    );
    println!("{port_line}");
    let addressing = || Addressing { port, gid_index, given };
    // The DC initiator's default operations leave the atomics out on a device without them; a
    // device without DC atomics refuses the DC target's remote atomic access by name, and the
    // loopback is built again without it.
    let lb = match Loopback::new(ctx, addressing(), true) {
        Err(why) if why.contains("no DC atomics") => Loopback::new(ctx, addressing(), false).map(|lb| (lb, false)),
        other => other.map(|lb| (lb, true)),
    };
    let (mut lb, dc_atomics) = match lb {
        Ok((lb, dc_atomics)) => {
            let gid = report.side_gid(Side::Target, port, lb.dct.source_gid());
            report.check(
                step::DC_TARGET,
                Ok(format!("DCT number {:#x}, {gid}", lb.endpoint.dct_number())),
            );
            (lb, dc_atomics)
        },
        Err(why) => {
            report.check(step::DC_TARGET, Err(why));
            report.stop("the DC target could not be made");
            return Outcome::Failed;
        },
    };
    let mut dci = match lb.initiator(None) {
        Ok(dci) => {
            let gid = report.side_gid(Side::Initiator, port, dci.source_gid());
            report.check(
                step::DC_INITIATOR,
                Ok(format!("QP number {:#x}, {gid}", dci.qp_number())),
            );
            report.granted(step::DC_INITIATOR, &dci);
            dci
        },
        Err(why) => {
            report.check(step::DC_INITIATOR, Err(why));
            report.stop("the DC initiator could not be made");
            return Outcome::Failed;
        },
    };

    let result = write(&mut lb, &mut dci, KEY, None, 1)
        .and_then(|wc| success(&wc))
        .and_then(|()| written(&lb, 1));
    report.check(step::WRITE, result);

    let result = (|| {
        lb.remote.write(0, &pattern(LEN, 2));
        lb.local.write(0, &[0; LEN]);
        let wc = lb.one(&mut dci, KEY, None, |lb, guard, key, stream| {
            let request = guard
                .construct_wr(2, WorkRequestFlags::Signaled)
                .setup_read(lb.remote.mr.rkey(), lb.remote.addr(0));
            // SAFETY: the local buffer lies in its memory region and outlives the request.
            finish!(lb, request, key, stream, |h| unsafe {
                h.setup_sge(lb.local.mr.lkey(), lb.local.addr(0), LEN as u32)
            })
        })?;
        success(&wc)?;
        (lb.local.read(0, LEN) == pattern(LEN, 2))
            .then(|| format!("{LEN} bytes read back"))
            .ok_or_else(|| "the bytes read differ from the remote ones".to_string())
    })();
    report.check(step::READ, result);

    let atomics = dci
        .send_ops_flags()
        .contains(sideway::ibverbs::queue_pair::SendOperationFlags::AtomicFetchAndAdd);
    if atomics && dc_atomics {
        let before = 40u64.to_ne_bytes();
        lb.remote.write(0, &before);
        let mut order = None;
        let result = atomic(&mut lb, &mut dci, Atomic::FetchAdd(2)).and_then(|(returned, left)| {
            order = AtomicOrder::of_fetch_add(before, 2, returned, left);
            order
                .map(|order| format!("40 + 2 = 42, 40 returned, in {}", order.name()))
                .ok_or_else(|| {
                    format!(
                        "fetch-and-add of 2 on {before:02x?} returned {returned:02x?} and left {left:02x?}: neither \
                         host nor big-endian order explains it"
                    )
                })
        });
        report.check(step::FETCH_ADD, result);
        // The compare value and the swap value are numbers, which the device compares with the
        // memory in its order.
        match order {
            None => report.skip(step::COMPARE_SWAP, "the fetch-and-add showed no byte order"),
            Some(order) => {
                let current: [u8; 8] = lb.remote.read(0, 8).try_into().expect("8 bytes");
                let compare = order.read(current);
                let result = atomic(&mut lb, &mut dci, Atomic::CompareSwap(compare, 7)).and_then(|(returned, left)| {
                    (order.read(returned) == compare && order.read(left) == 7)
                        .then(|| format!("{compare} swapped for 7, in {}", order.name()))
                        .ok_or_else(|| {
                            format!(
                                "compare-and-swap returned {:#x}, left {:#x} (expected {compare:#x}, 7)",
                                order.read(returned),
                                order.read(left)
                            )
                        })
                });
                report.check(step::COMPARE_SWAP, result);
            },
        }
    } else {
        let why = if atomics {
            "the device has no DC atomics (the DC target refused remote atomic access)"
        } else {
            "the device reports no atomics (atomic_cap IBV_ATOMIC_NONE)"
        };
        report.skip(step::FETCH_ADD, why);
        report.skip(step::COMPARE_SWAP, why);
    }

    let result = (|| {
        let mut guard = lb.srq.start_post_recv();
        // SAFETY: the remote buffer lies in its memory region and outlives the receive.
        unsafe {
            guard
                .construct_wr(77)
                .setup_sge(lb.remote.mr.lkey(), lb.remote.addr(0), LEN as u32)
        };
        guard.post().map_err(|e| format!("post a receive: {}", chain(&e)))?;
        lb.local.write(0, &pattern(64, 5));
        let wc = lb.one(&mut dci, KEY, None, |lb, guard, key, stream| {
            let request = guard.construct_wr(5, WorkRequestFlags::Signaled).setup_send();
            // SAFETY: as above.
            finish!(lb, request, key, stream, |h| unsafe {
                h.setup_sge(lb.local.mr.lkey(), lb.local.addr(0), 64)
            })
        })?;
        success(&wc)?;
        let received = lb.wait(true)?;
        success(&received)?;
        if (received.wr_id(), received.byte_len()) != (77, 64) || lb.remote.read(0, 64) != pattern(64, 5) {
            return Err(format!(
                "the SRQ's receive {} got {} bytes, or other bytes than sent",
                received.wr_id(),
                received.byte_len()
            ));
        }
        Ok("64 bytes into the SRQ's receive".to_string())
    })();
    report.check(step::SEND, result);

    let (result, fault) = faults::wrong_key(&mut lb, &mut dci);
    report.check_fault(step::WRONG_KEY, result, fault);
    match dci.query_state() {
        Ok(QueuePairState::ReadyToSend) => {
            let (result, fault) = faults::destroyed_target(&mut lb, &mut dci);
            report.check_fault(step::DESTROYED_TARGET, result, fault);
        },
        state => report.skip(
            step::DESTROYED_TARGET,
            &format!("the DC initiator is not back in RTS after the wrong DC key ({state:?})"),
        ),
    }

    match capabilities.dci_streams() {
        None => report.skip(
            step::STREAMS,
            "the device has no DCI streams (dci_streams_caps.max_log_num_concurent is 0: ConnectX-6 Dx or newer has them)",
        ),
        Some(caps) if caps.max_log_num_errored == 0 => report.skip(
            step::STREAMS,
            "the device cannot reset a stream (dci_streams_caps.max_log_num_errored is 0)",
        ),
        Some(_) => {
            let mut built = None;
            let (result, fault) = faults::errored_stream(&mut lb, &mut built);
            if let Some(dci) = &built {
                report.granted(step::STREAMS, dci);
            }
            report.check_fault(step::STREAMS, result, fault);
        },
    }
    match direct::direct_path(&mut lb, ctx, report) {
        direct::Verdict::Checked(result) => report.check(step::DIRECT, result),
        direct::Verdict::Skipped(why) => report.skip(step::DIRECT, &why),
    }
    if report.failed() {
        Outcome::Failed
    } else {
        Outcome::Passed
    }
}

/// Prints why the self-test stops before its steps, records it, and fails.
fn stop(report: &mut SelftestReport, name: &str, why: String) -> Outcome {
    println!("{name}: {why}");
    report.stop(&why);
    Outcome::Failed
}
