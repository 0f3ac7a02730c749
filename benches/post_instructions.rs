//! Instructions per request of posting with the guards and with direct rdma-mummy-sys calls,
//! counted by callgrind through gungraun (deterministic), over counting provider tables (no
//! device). Each benchmark posts `common::REQUESTS` requests in batches of 1, 16 or 256;
//! `scripts/bench` divides its instruction count by that. See BENCHMARKS.md.
//!
//! Needs `gungraun-runner` 0.20.0 on the PATH (`scripts/install-deps` installs it).
mod common;

use std::hint::black_box;

use common::{RecvSrq, RecvSrqOne, SendRcWrite, SendRcWriteOne, Workload, REQUESTS};
#[cfg(feature = "mlx5")]
use common::{
    SendDcFloorDedicatedSettled, SendDcFloorWrite, SendDcFloorWriteSettled, SendDcPoolDedicatedSettled,
    SendDcPoolWrite, SendDcPoolWriteSettled, SendDcWrite, SendDcWriteOne,
};
use gungraun::{library_benchmark, library_benchmark_group, main};

fn setup<W: Workload>(batch: usize) -> W::State {
    W::setup(batch)
}

/// One group per workload, with a guard and a raw benchmark at each batch size (`batched`) or at
/// batch 1 only (`one`: the one-request posts). The benchmark returns the state, so that dropping
/// it is not measured.
macro_rules! workloads {
    ($($kind:ident $group:ident, $guard:ident, $raw:ident: $workload:ty;)*) => {
        $(workloads!(@$kind $group, $guard, $raw: $workload);)*
        main!(library_benchmark_groups = $($group),*);
    };
    (@batched $group:ident, $guard:ident, $raw:ident: $workload:ty) => {
        #[library_benchmark]
        #[bench::batch_1(args = (1), setup = setup::<$workload>)]
        #[bench::batch_16(args = (16), setup = setup::<$workload>)]
        #[bench::batch_256(args = (256), setup = setup::<$workload>)]
        fn $guard(mut state: <$workload as Workload>::State) -> <$workload as Workload>::State {
            <$workload as Workload>::guard(&mut state, black_box(REQUESTS));
            state
        }

        #[library_benchmark]
        #[bench::batch_1(args = (1), setup = setup::<$workload>)]
        #[bench::batch_16(args = (16), setup = setup::<$workload>)]
        #[bench::batch_256(args = (256), setup = setup::<$workload>)]
        fn $raw(mut state: <$workload as Workload>::State) -> <$workload as Workload>::State {
            <$workload as Workload>::raw(&mut state, black_box(REQUESTS));
            state
        }

        library_benchmark_group!(name = $group; benchmarks = $guard, $raw);
    };
    (@one $group:ident, $guard:ident, $raw:ident: $workload:ty) => {
        #[library_benchmark]
        #[bench::batch_1(args = (1), setup = setup::<$workload>)]
        fn $guard(mut state: <$workload as Workload>::State) -> <$workload as Workload>::State {
            <$workload as Workload>::guard(&mut state, black_box(REQUESTS));
            state
        }

        #[library_benchmark]
        #[bench::batch_1(args = (1), setup = setup::<$workload>)]
        fn $raw(mut state: <$workload as Workload>::State) -> <$workload as Workload>::State {
            <$workload as Workload>::raw(&mut state, black_box(REQUESTS));
            state
        }

        library_benchmark_group!(name = $group; benchmarks = $guard, $raw);
    };
}

// A row per workload: batched or one, group, guard benchmark, raw benchmark (named
// `<NAME>_guard`/`<NAME>_raw`, as scripts/bench reads them): the workload.
// The DC rows need the `mlx5` feature (scripts/bench enables it). `send_dc_pool_write`'s "raw"
// benchmark is the direct DC initiator's guard (see benches/common/mod.rs).
#[cfg(feature = "mlx5")]
workloads! {
    batched send_rc_write, send_rc_write_guard, send_rc_write_raw: SendRcWrite;
    one send_rc_write_one, send_rc_write_one_guard, send_rc_write_one_raw: SendRcWriteOne;
    batched recv_srq, recv_srq_guard, recv_srq_raw: RecvSrq;
    one recv_srq_one, recv_srq_one_guard, recv_srq_one_raw: RecvSrqOne;
    batched send_dc_write, send_dc_write_guard, send_dc_write_raw: SendDcWrite;
    one send_dc_write_one, send_dc_write_one_guard, send_dc_write_one_raw: SendDcWriteOne;
    batched send_dc_pool_write, send_dc_pool_write_guard, send_dc_pool_write_raw: SendDcPoolWrite;
    batched send_dc_pool_write_settled, send_dc_pool_write_settled_guard, send_dc_pool_write_settled_raw: SendDcPoolWriteSettled;
    batched send_dc_pool_dedicated_write_settled, send_dc_pool_dedicated_write_settled_guard, send_dc_pool_dedicated_write_settled_raw: SendDcPoolDedicatedSettled;
    batched send_dc_floor_write, send_dc_floor_write_guard, send_dc_floor_write_raw: SendDcFloorWrite;
    batched send_dc_floor_write_settled, send_dc_floor_write_settled_guard, send_dc_floor_write_settled_raw: SendDcFloorWriteSettled;
    batched send_dc_floor_dedicated_write_settled, send_dc_floor_dedicated_write_settled_guard, send_dc_floor_dedicated_write_settled_raw: SendDcFloorDedicatedSettled;
}
#[cfg(not(feature = "mlx5"))]
workloads! {
    batched send_rc_write, send_rc_write_guard, send_rc_write_raw: SendRcWrite;
    one send_rc_write_one, send_rc_write_one_guard, send_rc_write_one_raw: SendRcWriteOne;
    batched recv_srq, recv_srq_guard, recv_srq_raw: RecvSrq;
    one recv_srq_one, recv_srq_one_guard, recv_srq_one_raw: RecvSrqOne;
}
