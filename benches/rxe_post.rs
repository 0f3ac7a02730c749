//! Posting with the guards and with direct rdma-mummy-sys calls through a real provider (rxe in
//! the SoftRoCE VM), for callgrind to count: the posting is done only in the `measured_*`
//! functions, which `scripts/bench` passes to `valgrind --tool=callgrind --toggle-collect=…`, so
//! the counts hold the posting code and the provider's, and nothing of the setup, the warm-up or
//! the completion polling between batches. See BENCHMARKS.md.
//!
//! ```text
//! rxe_post BATCH REQUESTS      # posts REQUESTS requests in batches of BATCH, each way
//! ```
//!
//! on the device named by `SIDEWAY_EXT_TEST_DEVICE` (default rxe0). It prints one line per
//! measured function, `measured <function> batch=<BATCH> requests=<N>`, for scripts/bench to
//! divide the counts by. Sends: an RC queue pair connected to a second one on the same device,
//! RDMA writes of one 64-byte scatter/gather entry, signalled; the completions of a batch are
//! polled before the next. Receives: one-entry receives posted to an SRQ with no queue pair
//! (nothing consumes them); a full SRQ is replaced, between batches.
#[path = "../tests/common/mod.rs"]
mod device;

use std::hint::black_box;
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::Duration;

use device::{connect_rc, local_gid, open_test_device, wait_completions, Buffer};
use rdma_mummy_sys::{
    ibv_post_srq_recv, ibv_qp_ex, ibv_qp_to_qp_ex, ibv_recv_wr, ibv_send_flags, ibv_sge, ibv_srq, ibv_wr_complete,
    ibv_wr_rdma_write, ibv_wr_set_sge, ibv_wr_start,
};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;

/// Bytes per request.
const LEN: u32 = 64;
/// Receives an SRQ holds before it is replaced.
const SRQ_WR: u32 = 4096;
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where a batch's requests point: request `i` at `local + i * LEN` (and `remote + i * LEN`).
#[derive(Clone, Copy)]
struct Buffers {
    lkey: u32,
    local: u64,
    rkey: u32,
    remote: u64,
}

#[cold]
#[inline(never)]
fn failed(what: &str) -> ! {
    panic!("{what} failed")
}

// ---------------------------------------------------------------------------------------------
// The posting code: the same requests as dc-pool/benches/common/mod.rs, through the public entry points
// (`qp.start_post_send()`, `srq.start_post_recv()`). Each body is inlined into a measured and a
// warm-up function.

// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn send_guard(qp: &mut SharedReceiveQueuePair<ReliableConnection>, b: Buffers, batch: usize) {
    let mut guard = qp.start_post_send();
    for n in 0..batch as u64 {
        // SAFETY: the buffers lie in the registered region, which outlives the queue pairs.
        unsafe {
            guard
                .construct_wr(n, WorkRequestFlags::Signaled)
                .setup_write(b.rkey, b.remote + n * LEN as u64)
                .setup_sge(b.lkey, b.local + n * LEN as u64, LEN)
        };
    }
    if guard.post().is_err() {
        failed("TypedPostSendGuard::post");
    }
}

// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn send_raw(qp: *mut ibv_qp_ex, b: Buffers, batch: usize) {
    // SAFETY: the queue pair is live, in RTS, created with RDMA writes; the buffers lie in the
    // registered region.
    unsafe {
        ibv_wr_start(qp);
        for n in 0..batch as u64 {
            (*qp).wr_id = n;
            (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
            ibv_wr_rdma_write(qp, b.rkey, b.remote + n * LEN as u64);
            ibv_wr_set_sge(qp, b.lkey, b.local + n * LEN as u64, LEN);
        }
        if ibv_wr_complete(qp) != 0 {
            failed("ibv_wr_complete");
        }
    }
}

// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn recv_guard(srq: &SharedReceiveQueue, b: Buffers, batch: usize) {
    let mut guard = srq.start_post_recv();
    for n in 0..batch as u64 {
        // SAFETY: the buffers lie in the registered region, which outlives the SRQ.
        unsafe { guard.construct_wr(n).setup_sge(b.lkey, b.local + n * LEN as u64, LEN) };
    }
    if guard.post().is_err() {
        failed("PostSrqRecvGuard::post");
    }
}

// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn recv_raw(srq: *mut ibv_srq, wrs: &mut [ibv_recv_wr], sges: &mut [ibv_sge], b: Buffers) {
    let batch = wrs.len().min(sges.len());
    let (wr_base, sge_base) = (wrs.as_mut_ptr(), sges.as_mut_ptr());
    // SAFETY: every index is below the length of both arrays; the list lives in them until
    // ibv_post_srq_recv returns; the SRQ is live; the buffers lie in the registered region.
    unsafe {
        for i in 0..batch {
            let n = i as u64;
            let sge = sge_base.add(i);
            (*sge).addr = b.local + n * LEN as u64;
            (*sge).length = LEN;
            (*sge).lkey = b.lkey;
            let wr = wr_base.add(i);
            (*wr).wr_id = n;
            (*wr).sg_list = sge;
            (*wr).num_sge = 1;
            (*wr).next = if i + 1 < batch { wr_base.add(i + 1) } else { null_mut() };
        }
        let mut bad: *mut ibv_recv_wr = null_mut();
        if ibv_post_srq_recv(srq, wr_base, &mut bad) != 0 {
            failed("ibv_post_srq_recv");
        }
    }
}

/// One request with `qp.post_send_one` (request `n` of a batch's buffers).
// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn send_one_guard(qp: &mut SharedReceiveQueuePair<ReliableConnection>, b: Buffers, n: u64) {
    let posted = qp.post_send_one(n, WorkRequestFlags::Signaled, |wr| {
        // SAFETY: the buffers lie in the registered region, which outlives the queue pairs.
        unsafe {
            wr.setup_write(b.rkey, b.remote + n * LEN as u64)
                .setup_sge(b.lkey, b.local + n * LEN as u64, LEN)
        }
    });
    if posted.is_err() {
        failed("post_send_one");
    }
}

/// The same request with direct calls.
// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn send_one_raw(qp: *mut ibv_qp_ex, b: Buffers, n: u64) {
    // SAFETY: the queue pair is live, in RTS, created with RDMA writes; the buffers lie in the
    // registered region.
    unsafe {
        ibv_wr_start(qp);
        (*qp).wr_id = n;
        (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        ibv_wr_rdma_write(qp, b.rkey, b.remote + n * LEN as u64);
        ibv_wr_set_sge(qp, b.lkey, b.local + n * LEN as u64, LEN);
        if ibv_wr_complete(qp) != 0 {
            failed("ibv_wr_complete");
        }
    }
}

/// One receive with `srq.post_recv_one`.
// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn recv_one_guard(srq: &SharedReceiveQueue, b: Buffers, n: u64) {
    let sge = [ibv_sge {
        addr: b.local + n * LEN as u64,
        length: LEN,
        lkey: b.lkey,
    }];
    // SAFETY: the buffer lies in the registered region, which outlives the SRQ.
    if unsafe { srq.post_recv_one(n, &sge) }.is_err() {
        failed("post_recv_one");
    }
}

/// The same receive with a direct call, its request and entry on the stack.
// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn recv_one_raw(srq: *mut ibv_srq, b: Buffers, n: u64) {
    let mut sge = ibv_sge {
        addr: b.local + n * LEN as u64,
        length: LEN,
        lkey: b.lkey,
    };
    // Zeroed first, padding included, as a correct C caller does (`= {0}`): libibverbs may
    // copy the whole struct.
    let mut wr = std::mem::MaybeUninit::<ibv_recv_wr>::zeroed();
    // SAFETY: all-zero bytes are a valid ibv_recv_wr; fields are written in place.
    let wr = unsafe { wr.assume_init_mut() };
    wr.wr_id = n;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    let mut bad: *mut ibv_recv_wr = null_mut();
    // SAFETY: a one-request list on the stack, alive during the call; the SRQ is live; the
    // buffer lies in the registered region.
    if unsafe { ibv_post_srq_recv(srq, wr, &mut bad) } != 0 {
        failed("ibv_post_srq_recv");
    }
}

// The functions callgrind measures (`measured_<row>_<side>`, the names scripts/bench-results
// reads), and their warm-up twins (which differ by a black_box so that they are not merged).

#[inline(never)]
fn measured_send_rc_write_guard(qp: &mut SharedReceiveQueuePair<ReliableConnection>, b: Buffers, batch: usize) {
    send_guard(qp, b, batch)
}
#[inline(never)]
fn measured_send_rc_write_raw(qp: *mut ibv_qp_ex, b: Buffers, batch: usize) {
    send_raw(qp, b, batch)
}
#[inline(never)]
fn measured_recv_srq_guard(srq: &SharedReceiveQueue, b: Buffers, batch: usize) {
    recv_guard(srq, b, batch)
}
#[inline(never)]
fn measured_recv_srq_raw(srq: *mut ibv_srq, wrs: &mut [ibv_recv_wr], sges: &mut [ibv_sge], b: Buffers) {
    recv_raw(srq, wrs, sges, b)
}

#[inline(never)]
fn measured_send_rc_write_one_guard(qp: &mut SharedReceiveQueuePair<ReliableConnection>, b: Buffers, n: u64) {
    send_one_guard(qp, b, n)
}
#[inline(never)]
fn measured_send_rc_write_one_raw(qp: *mut ibv_qp_ex, b: Buffers, n: u64) {
    send_one_raw(qp, b, n)
}
#[inline(never)]
fn measured_recv_srq_one_guard(srq: &SharedReceiveQueue, b: Buffers, n: u64) {
    recv_one_guard(srq, b, n)
}
#[inline(never)]
fn measured_recv_srq_one_raw(srq: *mut ibv_srq, b: Buffers, n: u64) {
    recv_one_raw(srq, b, n)
}

#[inline(never)]
fn warm_one(qp: &mut SharedReceiveQueuePair<ReliableConnection>, srq: &SharedReceiveQueue, b: Buffers, guard: bool) {
    black_box(2);
    if guard {
        send_one_guard(qp, b, 0);
        recv_one_guard(srq, b, 0);
    } else {
        // SAFETY: the queue pair is live and was created with send operations.
        send_one_raw(unsafe { ibv_qp_to_qp_ex(qp.qp().as_ptr()) }, b, 0);
        // SAFETY: the handle is used while `srq` is alive.
        recv_one_raw(unsafe { srq.srq() }.as_ptr(), b, 0);
    }
}

#[inline(never)]
fn warm_send(qp: &mut SharedReceiveQueuePair<ReliableConnection>, b: Buffers, batch: usize, guard: bool) {
    black_box(0);
    if guard {
        send_guard(qp, b, batch)
    } else {
        // SAFETY: the queue pair is live and was created with send operations.
        send_raw(unsafe { ibv_qp_to_qp_ex(qp.qp().as_ptr()) }, b, batch)
    }
}
#[inline(never)]
fn warm_recv(srq: &SharedReceiveQueue, wrs: &mut [ibv_recv_wr], sges: &mut [ibv_sge], b: Buffers) {
    black_box(1);
    recv_guard(srq, b, wrs.len());
    // SAFETY: the handle is used while `srq` is alive.
    recv_raw(unsafe { srq.srq() }.as_ptr(), wrs, sges, b);
}

// ---------------------------------------------------------------------------------------------

fn new_srq(pd: &Arc<ProtectionDomain>) -> Arc<SharedReceiveQueue> {
    pd.create_srq_builder()
        .setup_max_wr(SRQ_WR)
        .setup_max_sge(1)
        .build()
        .expect("create SRQ")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let (batch, requests) = match args.as_slice() {
        [batch, requests] => (
            batch.parse::<usize>().expect("BATCH"),
            requests.parse::<usize>().expect("REQUESTS"),
        ),
        // `cargo bench` without arguments (e.g. `cargo bench --all-targets`): nothing to measure.
        [] => {
            eprintln!("rxe_post: usage: rxe_post BATCH REQUESTS (scripts/bench runs it in the VM)");
            return;
        },
        _ => panic!("usage: rxe_post BATCH REQUESTS"),
    };
    assert!(
        batch > 0 && batch <= 256 && requests % batch == 0,
        "BATCH in 1..=256 dividing REQUESTS"
    );
    if std::env::var_os(device::DEVICE_VARIABLE).is_none() {
        std::env::set_var(device::DEVICE_VARIABLE, "rxe0");
    }
    let rounds = requests / batch;

    let ctx = open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (gid_index, gid) = local_gid(&ctx);
    let cq: Arc<BasicCompletionQueue> = ctx.create_cq_builder().setup_cqe(1024).build().expect("create CQ");
    let buffer = Buffer::new(&pd, 2 * 256 * LEN as usize);
    let b = black_box(Buffers {
        lkey: buffer.lkey(),
        local: buffer.addr(0),
        rkey: buffer.mr.rkey(),
        remote: buffer.addr(256 * LEN as usize),
    });

    // Sends: an RC pair on the same device; the peer only receives the writes.
    let sender_srq = pd.create_srq_builder().setup_max_wr(4).build().expect("sender SRQ");
    let peer_srq = pd.create_srq_builder().setup_max_wr(4).build().expect("peer SRQ");
    let mut sender = sender_srq
        .create_qp_builder()
        .setup_send_cq(cq.clone())
        .setup_recv_cq(cq.clone())
        .setup_max_send_wr(512)
        .setup_max_send_sge(1)
        .build_rc()
        .expect("sender QP");
    let mut peer = peer_srq
        .create_qp_builder()
        .setup_send_cq(cq.clone())
        .setup_recv_cq(cq.clone())
        .build_rc()
        .expect("peer QP");
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let (sq, pq) = (sender.qp_number(), peer.qp_number());
    connect_rc(&mut sender, pq, gid_index, gid, access);
    connect_rc(&mut peer, sq, gid_index, gid, access);
    // SAFETY: the queue pair was created with send operations and outlives every use below.
    let qp_ex = unsafe { ibv_qp_to_qp_ex(sender.qp().as_ptr()) };
    assert!(!qp_ex.is_null(), "ibv_qp_to_qp_ex");

    let drain = |count: usize| {
        for wc in wait_completions(&*cq, count, TIMEOUT) {
            assert!(wc.is_success(), "write completion {wc:?}");
        }
    };
    for guard in [true, false] {
        warm_send(&mut sender, b, batch, guard);
        drain(batch);
    }
    for _ in 0..rounds {
        measured_send_rc_write_guard(&mut sender, b, batch);
        drain(batch);
        measured_send_rc_write_raw(qp_ex, b, batch);
        drain(batch);
    }
    println!("measured measured_send_rc_write_guard batch={batch} requests={requests}");
    println!("measured measured_send_rc_write_raw batch={batch} requests={requests}");

    // Receives: an SRQ with no queue pair, replaced when it has no room for another batch.
    let empty_wr = ibv_recv_wr {
        wr_id: 0,
        next: null_mut(),
        sg_list: null_mut(),
        num_sge: 0,
    };
    let empty_sge = ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    };
    let (mut wrs, mut sges) = (vec![empty_wr; batch], vec![empty_sge; batch]);
    let mut srq = new_srq(&pd);
    warm_recv(&srq, &mut wrs, &mut sges, b);
    let mut free = SRQ_WR as usize - 2 * batch;
    for _ in 0..rounds {
        if free < 2 * batch {
            srq = new_srq(&pd);
            free = SRQ_WR as usize;
        }
        measured_recv_srq_guard(&srq, b, batch);
        // SAFETY: the handle is used while `srq` is alive.
        measured_recv_srq_raw(unsafe { srq.srq() }.as_ptr(), &mut wrs, &mut sges, b);
        free -= 2 * batch;
    }
    println!("measured measured_recv_srq_guard batch={batch} requests={requests}");
    println!("measured measured_recv_srq_raw batch={batch} requests={requests}");

    // One-request posts (in the batch-1 run only): each call posts one request.
    if batch == 1 {
        let mut srq = new_srq(&pd);
        for guard in [true, false] {
            warm_one(&mut sender, &srq, b, guard);
            drain(1);
        }
        let mut free = SRQ_WR as usize - 2;
        for n in 0..requests as u64 {
            if free < 2 {
                srq = new_srq(&pd);
                free = SRQ_WR as usize;
            }
            measured_send_rc_write_one_guard(&mut sender, b, n % 256);
            drain(1);
            measured_send_rc_write_one_raw(qp_ex, b, n % 256);
            drain(1);
            measured_recv_srq_one_guard(&srq, b, n % 256);
            // SAFETY: the handle is used while `srq` is alive.
            measured_recv_srq_one_raw(unsafe { srq.srq() }.as_ptr(), b, n % 256);
            free -= 2;
        }
        for op in ["send_rc_write_one", "recv_srq_one"] {
            for kind in ["guard", "raw"] {
                println!("measured measured_{op}_{kind} batch=1 requests={requests}");
            }
        }
    }
}
