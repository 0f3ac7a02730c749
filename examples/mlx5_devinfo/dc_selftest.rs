//! `mlx5_devinfo --dc-selftest`: DC end to end on one ConnectX, in loopback on port 1. A DC target
//! (on a shared receive queue) and a DC initiator are built and brought up, then each check runs
//! and prints one line: `ok`, `FAILED` with the status, or `skipped` with why. The exit status is
//! 1 when the device is not mlx5 (or libmlx5 is missing) and 2 when a check failed.
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
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, DcInitiatorBringUp, DciStreams};
use sideway_ext::mlx5::dc::target::{DcTarget, DcTargetBringUp};
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

const PORT: u8 = 1;
const KEY: u64 = 0x5e1f_7e57;
const LEN: usize = 4096;
const TIMEOUT: Duration = Duration::from_secs(5);

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

/// Everything one loopback needs.
struct Loopback {
    pd: Arc<ProtectionDomain>,
    send_cq: sideway::ibverbs::completion::GenericCompletionQueue,
    recv_cq: sideway::ibverbs::completion::GenericCompletionQueue,
    srq: Arc<SharedReceiveQueue>,
    dct: DcTarget,
    endpoint: DcEndpoint,
    ah: Arc<AddressHandle>,
    gid_index: u8,
    remote: Buffer,
    /// Registered without remote write: a write into it is a remote access error.
    forbidden: Buffer,
    local: Buffer,
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
    fn new(ctx: &Arc<DeviceContext>, gid_index: u8, atomics: bool) -> Result<Self> {
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
        let mut dct = pd
            .create_dct_builder()
            .setup_recv_cq(recv_cq.clone())
            .setup_srq(Arc::clone(&srq))
            .setup_dc_key(KEY)
            .setup_access_flags(access)
            .build()
            .map_err(|e| format!("create the DC target: {}", chain(&e)))?;
        let roce = ctx
            .query_port(PORT)
            .map_err(|e| format!("query port {PORT}: {}", chain(&e)))?
            .link_layer()
            == LinkLayer::Ethernet;
        let mut bring_up = DcTargetBringUp::new(PORT);
        if roce {
            bring_up.setup_src_gid_index(gid_index);
        }
        dct.bring_up(&bring_up)
            .map_err(|e| format!("DC target to RTR: {}", chain(&e)))?;
        let gid = ctx
            .query_gid(PORT, gid_index as u32)
            .map_err(|e| format!("GID index {gid_index}: {}", chain(&e)))?;
        let endpoint = dct
            .endpoint(PORT, gid)
            .map_err(|e| format!("the DC target's endpoint: {}", chain(&e)))?;
        let ah = endpoint
            .create_ah(&pd, PORT, gid_index)
            .map_err(|e| format!("address handle: {}", chain(&e)))?;
        let remote = Buffer::new(&pd, LEN, access)?;
        let local = Buffer::new(&pd, LEN, AccessFlags::LocalWrite)?;
        let forbidden = Buffer::new(&pd, LEN, AccessFlags::LocalWrite)?;
        Ok(Self {
            pd,
            send_cq,
            recv_cq,
            srq,
            dct,
            endpoint,
            ah,
            gid_index,
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
        dci.bring_up(&DcInitiatorBringUp::new(PORT))
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
        build: impl FnOnce(
            &mut Self,
            &mut sideway_ext::ibverbs::post_send_guard::PostSendGuard<
                '_,
                sideway_ext::mlx5::dc::initiator::DynamicallyConnected,
            >,
            u64,
            Option<u16>,
        ),
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
                let $handle = $request.setup_dc_addr_stream(&$loopback.ah, number, $key, stream);
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

/// The streams check's verdict on an errored stream, from what it saw: the statuses of the
/// stream's completions from its error on (`seen`, the error first) and the DC initiator's state
/// read right after the error. It requires what mlx5dv_dci_stream_id_reset(3) guarantees: the
/// request failed with its own cause (not as flushed), and the DC initiator stayed in RTS (one
/// errored stream; 2 would move it to ERR). It reports the statuses, whatever they are: no reference
/// promises one error status, nor `WR_FLUSH_ERR` for the stream's later requests (only rdma-core
/// commit 82166bcc's message says so; pyverbs resets the stream right after its error).
fn errored_stream_verdict(seen: &[Option<WorkCompletionStatus>], state: QueuePairState) -> Result<String> {
    match seen.first() {
        None => return Err("no completion of the errored stream".into()),
        Some(Some(WorkCompletionStatus::Success)) => return Err("the request meant to fail succeeded".into()),
        Some(Some(WorkCompletionStatus::WorkRequestFlushedError)) => {
            return Err("the failed request was flushed instead of carrying its cause".into())
        },
        Some(_) => {},
    }
    if state != QueuePairState::ReadyToSend {
        return Err(format!(
            "after one stream's error the DC initiator is {state:?}, not RTS"
        ));
    }
    Ok(format!(
        "the stream's completions {seen:?} left the DC initiator in {state:?}"
    ))
}

fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The checks' lines and whether one failed.
struct Report {
    failed: bool,
}

impl Report {
    fn check(&mut self, name: &str, result: Result<String>) {
        match result {
            Ok(detail) if detail.is_empty() => println!("ok       {name}"),
            Ok(detail) => println!("ok       {name}: {detail}"),
            Err(why) => {
                self.failed = true;
                println!("FAILED   {name}: {why}");
            },
        }
    }

    fn skip(&self, name: &str, why: &str) {
        println!("skipped  {name}: {why}");
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

/// The byte order a ConnectX gives an 8-byte atomic's operands and reply: the host's where
/// mlx5_core set `atomic_req_8B_endianness_mode` to host endianness, big-endian (the wire's)
/// otherwise. UCX handles both (`ib_mlx5dv_md.c`); the self-test accepts both and says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtomicOrder {
    Host,
    BigEndian,
}

impl AtomicOrder {
    /// The value of 8 bytes of memory, as the device reads them in this order.
    fn read(self, bytes: [u8; 8]) -> u64 {
        match self {
            Self::Host => u64::from_ne_bytes(bytes),
            Self::BigEndian => u64::from_be_bytes(bytes),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Host => "host byte order",
            Self::BigEndian => "big-endian byte order (atomic_req_8B_endianness_mode not host)",
        }
    }

    /// The order in which a fetch-and-add of `add` on memory that held `before` returned
    /// `returned` and left `left`, if one explains all three (the host's first: on a big-endian
    /// host both do).
    fn of_fetch_add(before: [u8; 8], add: u64, returned: [u8; 8], left: [u8; 8]) -> Option<Self> {
        [Self::Host, Self::BigEndian].into_iter().find(|order| {
            order.read(returned) == order.read(before) && order.read(left) == order.read(before).wrapping_add(add)
        })
    }
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

/// The GID index to use: the one given, else on RoCE the port's RoCE v2 GID (IPv4-mapped
/// first), on InfiniBand 0.
fn pick_gid_index(ctx: &Arc<DeviceContext>, given: Option<u8>) -> Result<u8> {
    if let Some(index) = given {
        return Ok(index);
    }
    let port = ctx
        .query_port(PORT)
        .map_err(|e| format!("query port {PORT}: {}", chain(&e)))?;
    if port.link_layer() != LinkLayer::Ethernet {
        return Ok(0);
    }
    let entry = ctx
        .roce_v2_gid(PORT)
        .map_err(|e| format!("read the GID table: {}", chain(&e)))?
        .ok_or_else(|| format!("port {PORT} is RoCE and has no RoCE v2 GID (no IP address?): give one with -g"))?;
    Ok(entry.gid_index() as u8)
}

/// Runs the self-test on `ctx` (named `name`) with the local GID `gid_index` (picked when
/// `None`).
pub fn run(ctx: &Arc<DeviceContext>, name: &str, gid_index: Option<u8>) -> Outcome {
    let mlx5 = Mlx5DeviceContext::new(Arc::clone(ctx));
    let capabilities = match mlx5.query_dc_capabilities() {
        Ok(capabilities) if capabilities.is_mlx5() => capabilities,
        Ok(_) => {
            println!("{name}: not an mlx5 device (or libmlx5 is missing): DC needs a ConnectX-4 or newer");
            return Outcome::NotMlx5;
        },
        Err(err) => {
            println!("{name}: the DC capability query failed: {}", chain(&err));
            return Outcome::Failed;
        },
    };
    let gid_index = match pick_gid_index(ctx, gid_index) {
        Ok(index) => index,
        Err(why) => {
            println!("{name}: {why}");
            return Outcome::Failed;
        },
    };
    let gid = ctx.query_gid(PORT, gid_index.into()).map_or_else(
        |e| format!("unreadable: {}", chain(&e)),
        |gid| std::net::Ipv6Addr::from(gid).to_string(),
    );
    println!(
        "DC self-test of {name}, port {PORT}, GID index {gid_index} ({gid}): max_dc_rd_atom {:?} (as requester), \
         max_dc_init_rd_atom {:?} (as responder; a DCI's bound), DCI streams {:?}",
        capabilities.max_dc_rd_atom(),
        capabilities.max_dc_init_rd_atom(),
        capabilities.dci_streams()
    );
    let mut report = Report { failed: false };
    // The DC initiator's default operations leave the atomics out on a device without them; a
    // device without DC atomics refuses the DC target's remote atomic access by name, and the
    // loopback is built again without it.
    let lb = match Loopback::new(ctx, gid_index, true) {
        Err(why) if why.contains("no DC atomics") => Loopback::new(ctx, gid_index, false).map(|lb| (lb, false)),
        other => other.map(|lb| (lb, true)),
    };
    let (mut lb, dc_atomics) = match lb {
        Ok((lb, dc_atomics)) => {
            report.check(
                "DC target at RTR",
                Ok(format!("DCT number {:#x}", lb.endpoint.dct_number())),
            );
            (lb, dc_atomics)
        },
        Err(why) => {
            report.check("DC target at RTR", Err(why));
            return Outcome::Failed;
        },
    };
    let mut dci = match lb.initiator(None) {
        Ok(dci) => {
            report.check("DC initiator at RTS", Ok(format!("QP number {:#x}", dci.qp_number())));
            dci
        },
        Err(why) => {
            report.check("DC initiator at RTS", Err(why));
            return Outcome::Failed;
        },
    };

    let result = write(&mut lb, &mut dci, KEY, None, 1)
        .and_then(|wc| success(&wc))
        .and_then(|()| written(&lb, 1));
    report.check("RDMA WRITE", result);

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
    report.check("RDMA READ", result);

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
        report.check("atomic fetch-and-add", result);
        // The compare value and the swap value are numbers, which the device compares with the
        // memory in its order.
        match order {
            None => report.skip("atomic compare-and-swap", "the fetch-and-add showed no byte order"),
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
                report.check("atomic compare-and-swap", result);
            },
        }
    } else {
        report.skip(
            "atomics",
            if atomics {
                "the device has no DC atomics (the DC target refused remote atomic access)"
            } else {
                "the device reports no atomics (atomic_cap IBV_ATOMIC_NONE)"
            },
        );
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
    report.check("SEND into the shared receive queue", result);

    let result = (|| {
        let error = write(&mut lb, &mut dci, KEY ^ 1, None, 6)?;
        if success(&error).is_ok() {
            return Err("a write with a wrong DC key succeeded".into());
        }
        let state = dci
            .wait_for_error(Duration::from_secs(1))
            .map_err(|e| format!("query: {}", chain(&e)))?;
        if state != QueuePairState::Error {
            return Err(format!("after the error the DC initiator is {state:?}, not ERR"));
        }
        let recovery = dci.recover().map_err(|e| format!("recover: {}", chain(&e)))?;
        let wc = write(&mut lb, &mut dci, KEY, None, 8)?;
        success(&wc)?;
        written(&lb, 8)?;
        Ok(format!(
            "error status {:?} (vendor syndrome {:#x}), then {recovery:?} and a write that arrived",
            error.status(),
            error.vendor_err()
        ))
    })();
    report.check("wrong DC key: error, recover, write again", result);

    match capabilities.dci_streams() {
        None => report.skip(
            "DCI streams",
            "the device has no DCI streams (dci_streams_caps.max_log_num_concurent is 0: ConnectX-6 Dx or newer has them)",
        ),
        Some(caps) if caps.max_log_num_errored == 0 => report.skip(
            "DCI streams",
            "the device cannot reset a stream (dci_streams_caps.max_log_num_errored is 0)",
        ),
        Some(_) => {
            let result = (|| {
                let streams = DciStreams {
                    log_num_concurrent: 1,
                    log_num_errored: 1,
                };
                let mut dci = lb.initiator(Some(streams))?;
                let wc = write_into(&mut lb, &mut dci, KEY, Some(1), 9, true)?;
                let state = dci.query_state().map_err(|e| format!("query: {}", chain(&e)))?;
                let seen = errored_stream_verdict(&[wc.status()], state)
                    .map_err(|why| format!("a write on stream 1 into memory without remote write: {why}"))?;
                // Other streams go on (man page mlx5dv_dci_stream_id_reset(3)).
                success(&write(&mut lb, &mut dci, KEY, Some(0), 11)?).map_err(|e| format!("stream 0: {e}"))?;
                // Stream 1 had nothing else queued, so nothing is left to flush: reset it now, as
                // pyverbs does right after the error.
                dci.reset_stream(1).map_err(|e| format!("reset stream 1: {}", chain(&e)))?;
                success(&write(&mut lb, &mut dci, KEY, Some(1), 12)?).map_err(|e| format!("stream 1 after its reset: {e}"))?;
                written(&lb, 12)?;
                Ok(format!(
                    "stream 1: {seen} (vendor syndrome {:#x}); stream 0 went on; stream 1 reset and used again",
                    wc.vendor_err()
                ))
            })();
            report.check("DCI streams", result);
        },
    }
    // The rest of the loopback goes with `lb`; the GID index is reported for the record.
    let _ = (&lb.dct, lb.gid_index);
    if report.failed {
        Outcome::Failed
    } else {
        Outcome::Passed
    }
}

#[cfg(test)]
mod tests {
    use sideway::ibverbs::completion::WorkCompletionStatus::*;
    use sideway::ibverbs::queue_pair::QueuePairState;

    use super::{errored_stream_verdict, AtomicOrder};

    #[test]
    fn an_errored_stream_needs_its_error_and_rts_only_and_its_statuses_are_reported() {
        let rts = QueuePairState::ReadyToSend;
        // Whatever error the device gives, with nothing after it: no flush is required.
        for error in [RemoteAccessError, RemoteInvalidRequestError, LocalProtectionError] {
            let verdict = errored_stream_verdict(&[Some(error)], rts).expect("the man page's promise holds");
            assert!(verdict.contains(&format!("{error:?}")), "{verdict}");
        }
        // Later completions of the stream are reported, flushed or not.
        let verdict = errored_stream_verdict(&[Some(RemoteAccessError), Some(WorkRequestFlushedError)], rts);
        assert!(verdict.expect("reported").contains("WorkRequestFlushedError"));
        // What the man page does promise.
        assert!(errored_stream_verdict(&[Some(Success)], rts).is_err());
        assert!(errored_stream_verdict(&[Some(WorkRequestFlushedError)], rts).is_err());
        assert!(errored_stream_verdict(&[], rts).is_err());
        let err = errored_stream_verdict(&[Some(RemoteAccessError)], QueuePairState::Error).unwrap_err();
        assert!(err.contains("not RTS"), "{err}");
    }

    #[test]
    fn a_fetch_add_in_either_byte_order_is_recognised() {
        let before = 40u64.to_ne_bytes();
        // Host order: the reply is 40, the memory 42, both in the host's bytes.
        assert_eq!(
            AtomicOrder::of_fetch_add(before, 2, before, 42u64.to_ne_bytes()),
            Some(AtomicOrder::Host)
        );
        // Big-endian: the device reads the memory's bytes as a big-endian number and writes
        // the sum and the reply back in that order.
        let as_be = u64::from_be_bytes(before);
        let returned = as_be.to_be_bytes();
        let left = (as_be + 2).to_be_bytes();
        let seen = AtomicOrder::of_fetch_add(before, 2, returned, left);
        if cfg!(target_endian = "little") {
            assert_eq!(seen, Some(AtomicOrder::BigEndian));
        } else {
            assert_eq!(seen, Some(AtomicOrder::Host));
        }
        // Anything else is neither.
        assert_eq!(AtomicOrder::of_fetch_add(before, 2, before, before), None);
    }
}
