//! DC requests written into a DCI's send queue two ways, for callgrind to count: through
//! libmlx5's own post path (rdma-core 55's `providers/mlx5/qp.c`, compiled `-O2` with rdma-core's
//! own barriers by softmlx5's oracle: `OracleDci::unrecorded`) and through this crate's
//! direct writer ([`SendQueue`], with the real x86-64 barriers), both over plain memory. Each
//! row's posting is done only in its two `measured_*` functions (libmlx5 and direct), which
//! `scripts/bench` passes to `valgrind --tool=callgrind --toggle-collect=…`, so the counts hold
//! the posting and nothing of the setup. See BENCHMARKS.md.
//!
//! ```text
//! wqe_instructions BATCH      # every row, both ways, REQUESTS requests in batches of BATCH
//!                             # (1, 16 or 256)
//! ```
//!
//! It prints one line per measured function, `measured <function> batch=<BATCH> requests=<N>`,
//! for scripts/bench to divide the counts by, after checking that both ways left the same send
//! queue, doorbell record and BlueFlame register.
//!
//! Nothing is retired while a measured function runs: each DCI's queue holds every request of
//! the run (the writer's completion path, the poller, is crate-private, and libmlx5's queue is
//! given the same room), and a request costs the same wherever it lands in the ring.
//!
//! The pool row ("DC pool, WRITE 1 SGE", `pool.rs`) posts the same WRITEs through
//! sideway-ext-dc-pool's pool, on libmlx5 and on the direct writer's batch to one address.
#[path = "wqe_instructions/pool.rs"]
mod pool;

use std::hint::black_box;

use rdma_mummy_sys::ibv_qp_create_send_ops_flags as ops;
use rdma_mummy_sys::{
    ibv_qp_ex, ibv_send_flags, ibv_wr_complete, ibv_wr_rdma_write, ibv_wr_send, ibv_wr_set_inline_data, ibv_wr_set_sge,
    ibv_wr_start, mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr,
};
use sideway::ibverbs::queue_pair::WorkRequestFlags;
use sideway_ext_dc_direct::send_queue::{AddressVector, SendQueue, SendQueueParts};
use softmlx5::oracle::{DciShape, OracleAh, OracleDci};

/// Requests each measured function posts.
const REQUESTS: usize = 4096;
/// The batch sizes scripts/bench runs.
const BATCHES: [usize; 3] = [1, 16, 256];
/// Bytes of each request's one scatter/gather entry, and of the remote stride.
const SGE_LENGTH: u32 = 64;
/// Bytes of inline data in each SEND.
const INLINE_LENGTH: usize = 16;

/// A DCI's shape for both rows: WRITE and SEND, one entry, 16 bytes inline asked for (libmlx5
/// grants more: a request takes 128 bytes), BlueFlame of 256 bytes as on a ConnectX. 16 384
/// slots: room for 8 192 requests, every request of a run and its warm-up.
fn shape() -> DciShape {
    DciShape {
        wqe_count: 1 << 14,
        max_inline_data: INLINE_LENGTH as u32,
        max_send_sge: 1,
        sq_sig_all: false,
        send_ops_flags: u64::from((ops::IBV_QP_EX_WITH_RDMA_WRITE | ops::IBV_QP_EX_WITH_SEND).0),
        streams: false,
        blueflame_size: 256,
        qp_number: 0x00_1234,
    }
}

/// The request's fields, opaque to the optimiser, like keys and addresses a program gets from
/// the device.
#[derive(Clone, Copy)]
struct Fields {
    lkey: u32,
    local: u64,
    rkey: u32,
    remote: u64,
    dct_number: u32,
    dc_key: u64,
    inline: [u8; INLINE_LENGTH],
}

/// The fields of every row's requests.
fn fields() -> Fields {
    Fields {
        lkey: 0x1234,
        local: 0x10_0000,
        rkey: 0x5678,
        remote: 0x20_0000,
        dct_number: 0x00ab_cdef,
        dc_key: 0xdc,
        inline: [0x37; INLINE_LENGTH],
    }
}

/// Two DCIs of one shape: one posted on through libmlx5, the other's memory written by the
/// direct writer; and the same route for both.
struct State {
    /// Dropped first: it points into `memory`.
    direct: SendQueue,
    libmlx5: OracleDci,
    /// Only its memory is used: the writer writes it.
    memory: OracleDci,
    ah: OracleAh,
    av: AddressVector,
    batch: usize,
    fields: Fields,
}

impl State {
    fn new(batch: usize) -> Self {
        let shape = shape();
        let mut libmlx5 = OracleDci::unrecorded(&shape);
        let mut memory = OracleDci::unrecorded(&shape);
        // The same stale bytes in both, so that both queues must end equal.
        libmlx5.fill_stale(37);
        memory.fill_stale(37);
        let layout = memory.layout();
        let parts = SendQueueParts {
            buffer: layout.buffer,
            wqe_count: layout.wqe_count,
            stride: layout.stride,
            doorbell_record: layout.doorbell_record,
            blueflame: layout.blueflame,
            blueflame_size: layout.blueflame_size,
            max_post: libmlx5.max_post(),
            max_inline_data: libmlx5.max_inline_data(),
            max_send_sge: shape.max_send_sge,
            sq_sig_all: shape.sq_sig_all,
            qp_number: shape.qp_number,
            streams: shape.streams,
        };
        assert!(
            libmlx5.max_post() as usize >= REQUESTS + BATCHES[2],
            "the queue holds a run"
        );
        // SAFETY: the second DCI's memory outlives the queue (the state drops the queue first)
        // and nothing else posts on it.
        let direct = unsafe { SendQueue::from_parts(parts) }.expect("the oracle's shape");
        let av: [u8; 48] = std::array::from_fn(|i| (i as u8).wrapping_mul(29) ^ 0x5a);
        Self {
            direct,
            libmlx5,
            memory,
            ah: OracleAh::new(av),
            av: AddressVector::new(av),
            batch: black_box(batch),
            fields: black_box(fields()),
        }
    }

    /// Requests posted through libmlx5 (`sq.head`).
    fn posted(&self) -> u32 {
        self.libmlx5.head_and_tail().0
    }

    /// Both ways left the same send queue, doorbell record and BlueFlame register.
    fn assert_same(&self, row: &str) {
        assert!(
            self.libmlx5.send_queue() == self.memory.send_queue(),
            "{row}: the send queues differ"
        );
        assert_eq!(
            self.libmlx5.doorbell_record(),
            self.memory.doorbell_record(),
            "{row}: doorbell record"
        );
        assert!(
            self.libmlx5.blueflame() == self.memory.blueflame(),
            "{row}: BlueFlame register"
        );
    }
}

#[cold]
#[inline(never)]
fn failed(what: &str) -> ! {
    panic!("{what} refused a request within the queue's limits")
}

/// A row: the same requests posted both ways, `requests` of them in batches of the state's.
trait Workload {
    /// Through libmlx5's builders, as sideway-ext's DC guard calls them.
    fn libmlx5(state: &mut State, requests: usize);
    /// Through the direct writer.
    fn direct(state: &mut State, requests: usize);
}

/// libmlx5's `ibv_qp_ex` and mlx5 view of the state's first DCI.
fn libmlx5_qp(state: &State) -> (*mut ibv_qp_ex, *mut mlx5dv_qp_ex) {
    (state.libmlx5.qp_ex().as_ptr(), state.libmlx5.mlx5_qp_ex().as_ptr())
}

/// Signalled DC RDMA WRITEs of one 64-byte scatter/gather entry.
enum Write {}

impl Workload for Write {
    // inline(always): into its measured_* function, as the harness's own in dc-pool/benches (the
    // DC WQE rows count the posting there).
    #[inline(always)]
    fn libmlx5(state: &mut State, requests: usize) {
        let ((qp, mlx5), batch, f) = (libmlx5_qp(state), state.batch, state.fields);
        let ah = state.ah.ibv_ah().as_ptr();
        let mut next = 0;
        while next < requests {
            // SAFETY: the oracle's DCI and address handle are alive, libmlx5's builders installed;
            // the buffers are only described.
            unsafe {
                ibv_wr_start(qp);
                for n in next as u64..(next + batch) as u64 {
                    (*qp).wr_id = n;
                    (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                    ibv_wr_rdma_write(qp, f.rkey, f.remote + n * u64::from(SGE_LENGTH));
                    mlx5dv_wr_set_dc_addr(mlx5, ah, f.dct_number, f.dc_key);
                    ibv_wr_set_sge(qp, f.lkey, f.local + n * u64::from(SGE_LENGTH), SGE_LENGTH);
                }
                if ibv_wr_complete(qp) != 0 {
                    failed("ibv_wr_complete");
                }
            }
            next += batch;
        }
    }

    // inline(always): into its measured_* function, as the harness's own in dc-pool/benches (the
    // DC WQE rows count the posting there).
    #[inline(always)]
    fn direct(state: &mut State, requests: usize) {
        let (batch, f, av) = (state.batch, state.fields, &state.av);
        let mut next = 0;
        while next < requests {
            let mut guard = state.direct.start_post_send();
            for n in next as u64..(next + batch) as u64 {
                let request = guard
                    .construct_wr(n, WorkRequestFlags::Signaled)
                    .setup_write(f.rkey, f.remote + n * u64::from(SGE_LENGTH))
                    .setup_dc_addr(av, f.dct_number, f.dc_key);
                // SAFETY: the buffers are only described; nothing reads them.
                if unsafe { request.setup_sge(f.lkey, f.local + n * u64::from(SGE_LENGTH), SGE_LENGTH) }.is_err() {
                    failed("setup_sge");
                }
            }
            guard.post();
            next += batch;
        }
    }
}

/// Signalled DC SENDs of 16 bytes inline.
enum SendInline {}

impl Workload for SendInline {
    // inline(always): into its measured_* function, as the harness's own in dc-pool/benches (the
    // DC WQE rows count the posting there).
    #[inline(always)]
    fn libmlx5(state: &mut State, requests: usize) {
        let ((qp, mlx5), batch) = (libmlx5_qp(state), state.batch);
        let (f, ah) = (&state.fields, state.ah.ibv_ah().as_ptr());
        let mut next = 0;
        while next < requests {
            // SAFETY: as for Write; the inline bytes are copied during the call.
            unsafe {
                ibv_wr_start(qp);
                for n in next as u64..(next + batch) as u64 {
                    (*qp).wr_id = n;
                    (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                    ibv_wr_send(qp);
                    mlx5dv_wr_set_dc_addr(mlx5, ah, f.dct_number, f.dc_key);
                    ibv_wr_set_inline_data(qp, f.inline.as_ptr() as *mut _, INLINE_LENGTH);
                }
                if ibv_wr_complete(qp) != 0 {
                    failed("ibv_wr_complete");
                }
            }
            next += batch;
        }
    }

    // inline(always): into its measured_* function, as the harness's own in dc-pool/benches (the
    // DC WQE rows count the posting there).
    #[inline(always)]
    fn direct(state: &mut State, requests: usize) {
        let (batch, f, av) = (state.batch, &state.fields, &state.av);
        let mut next = 0;
        while next < requests {
            let mut guard = state.direct.start_post_send();
            for n in next as u64..(next + batch) as u64 {
                let request = guard
                    .construct_wr(n, WorkRequestFlags::Signaled)
                    .setup_send()
                    .setup_dc_addr(av, f.dct_number, f.dc_key);
                if request.setup_inline_data(&f.inline).is_err() {
                    failed("setup_inline_data");
                }
            }
            guard.post();
            next += batch;
        }
    }
}

/// Builds a warm state for batches of `batch` (a batch posted both ways, not measured), runs
/// both measured functions on it, checks that they posted the same requests, and says so.
fn run<W: Workload>(batch: usize, row: &str, libmlx5: (&str, fn(&mut State)), direct: (&str, fn(&mut State))) {
    let mut state = State::new(batch);
    W::libmlx5(&mut state, batch);
    W::direct(&mut state, batch);
    // libmlx5's tail as its poller would leave it: the warm-up batch retired.
    state.libmlx5.retire_all();
    let before = state.posted();
    libmlx5.1(&mut state);
    assert_eq!(state.posted() - before, REQUESTS as u32, "{row}: requests posted");
    direct.1(&mut state);
    state.assert_same(row);
    for (name, _) in [libmlx5, direct] {
        println!("measured {name} batch={batch} requests={REQUESTS}");
    }
}

/// A libmlx5 and a direct measured function per row, named as scripts/bench-results reads them
/// (`measured_<row>_libmlx5`, `measured_<row>_direct`). Each hands the black box its own name,
/// so that no two are merged into one symbol.
macro_rules! rows {
    ($($row:literal $libmlx5:ident, $direct:ident: $workload:ty;)*) => {
        $(
            #[inline(never)]
            fn $libmlx5(state: &mut State) {
                black_box(stringify!($libmlx5));
                <$workload as Workload>::libmlx5(state, black_box(REQUESTS));
            }

            #[inline(never)]
            fn $direct(state: &mut State) {
                black_box(stringify!($direct));
                <$workload as Workload>::direct(state, black_box(REQUESTS));
            }
        )*

        fn run_rows(batch: usize) {
            $(
                run::<$workload>(
                    batch,
                    $row,
                    (stringify!($libmlx5), $libmlx5),
                    (stringify!($direct), $direct),
                );
            )*
        }
    };
}

rows! {
    "DC WQE, WRITE 1 SGE" measured_dc_wqe_write_libmlx5, measured_dc_wqe_write_direct: Write;
    "DC WQE, SEND 16 B inline" measured_dc_wqe_send_inline_libmlx5, measured_dc_wqe_send_inline_direct: SendInline;
}

/// The pool row's measured functions, named as scripts/bench-results reads them.
#[inline(never)]
fn measured_dc_pool_write_libmlx5(state: &mut pool::PoolState) {
    black_box("measured_dc_pool_write_libmlx5");
    state.libmlx5(black_box(REQUESTS));
}

#[inline(never)]
fn measured_dc_pool_write_direct(state: &mut pool::PoolState) {
    black_box("measured_dc_pool_write_direct");
    state.direct(black_box(REQUESTS));
}

/// The pool row at batches of `batch`: a warm state (a batch posted both ways, not measured),
/// both measured functions, the same requests posted.
fn run_pool_row(batch: usize, fields: Fields) {
    let row = "DC pool, WRITE 1 SGE";
    let mut state = pool::PoolState::new(batch, fields);
    state.libmlx5(batch);
    state.direct(batch);
    let before = state.posted();
    measured_dc_pool_write_libmlx5(&mut state);
    assert_eq!(state.posted() - before, REQUESTS as u32, "{row}: requests posted");
    measured_dc_pool_write_direct(&mut state);
    state.assert_same(row);
    for name in ["measured_dc_pool_write_libmlx5", "measured_dc_pool_write_direct"] {
        println!("measured {name} batch={batch} requests={REQUESTS}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let batch = match args.as_slice() {
        [batch] => batch.parse::<usize>().expect("BATCH"),
        // `cargo bench` without arguments (e.g. `cargo bench --all-targets`): nothing to measure.
        [] => {
            eprintln!("wqe_instructions: usage: wqe_instructions BATCH (scripts/bench runs it under callgrind)");
            return;
        },
        _ => panic!("usage: wqe_instructions BATCH"),
    };
    assert!(BATCHES.contains(&batch), "BATCH is one of {BATCHES:?}");
    run_rows(batch);
    run_pool_row(batch, fields());
}
