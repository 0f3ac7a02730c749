//! Posting with the guards and with direct rdma-mummy-sys calls over counting provider tables (no
//! device), for callgrind to count: each row's posting is done only in its two `measured_*`
//! functions (guard and raw), which `scripts/bench` passes to `valgrind --tool=callgrind
//! --toggle-collect=…`, so the counts hold the posting and nothing of the setup (the provider
//! tables, the warm-up batches) or of the teardown. See BENCHMARKS.md.
//!
//! ```text
//! post_instructions BATCH      # every row's guard and raw post common::REQUESTS requests in
//!                              # batches of BATCH (1, 16 or 256; the `_one` rows at 1 only)
//! ```
//!
//! It prints one line per measured function, `measured <function> batch=<BATCH> requests=<N>`,
//! for scripts/bench to divide the counts by. Each measured function runs once, on a state of its
//! own, so that callgrind's `--dump-after` gives each a profile of its own.
mod common;

use std::hint::black_box;

use common::{
    SendDcFloorDedicatedSettled, SendDcFloorWrite, SendDcFloorWriteSettled, SendDcPoolDedicatedSettled,
    SendDcPoolWrite, SendDcPoolWriteSettled, SendDcWrite, SendDcWriteOne,
};
use common::{SendRcWrite, SendRcWriteOne, Workload, BATCHES, REQUESTS};

/// Builds a warm state for batches of `batch` (not measured), runs `measured` on it once and
/// says so.
fn run<W: Workload>(batch: usize, name: &str, measured: fn(&mut W::State)) {
    let mut state = W::setup(batch);
    let before = W::posted(&state);
    measured(&mut state);
    assert_eq!(W::posted(&state) - before, REQUESTS as u64, "{name}: requests posted");
    println!("measured {name} batch={batch} requests={REQUESTS}");
}

/// A guard and a raw measured function per row, named as scripts/bench-results reads them
/// (`measured_<row>_guard`, `measured_<row>_raw`); `batched` rows run at every batch size, `one`
/// rows at batch 1 only. Each measured function hands the black box its own name, so that no two
/// are merged into one symbol.
macro_rules! rows {
    ($($kind:ident $guard:ident, $raw:ident: $workload:ty;)*) => {
        $(
            #[inline(never)]
            fn $guard(state: &mut <$workload as Workload>::State) {
                black_box(stringify!($guard));
                <$workload as Workload>::guard(state, black_box(REQUESTS));
            }

            #[inline(never)]
            fn $raw(state: &mut <$workload as Workload>::State) {
                black_box(stringify!($raw));
                <$workload as Workload>::raw(state, black_box(REQUESTS));
            }
        )*

        fn run_rows(batch: usize) {
            $(
                if rows!(@runs $kind batch) {
                    run::<$workload>(batch, stringify!($guard), $guard);
                    run::<$workload>(batch, stringify!($raw), $raw);
                }
            )*
        }
    };
    (@runs batched $batch:ident) => { true };
    (@runs one $batch:ident) => { $batch == 1 };
}

// A row per workload (benches/common/mod.rs): batched or one, its guard and raw functions, the
// workload. The DC rows need the `mlx5` feature (scripts/bench enables it). The DC pool rows'
// "raw" side is the direct DC initiator's guard, their floors' too (see benches/common/mod.rs).
rows! {
    batched measured_send_rc_write_guard, measured_send_rc_write_raw: SendRcWrite;
    one measured_send_rc_write_one_guard, measured_send_rc_write_one_raw: SendRcWriteOne;
    batched measured_send_dc_write_guard, measured_send_dc_write_raw: SendDcWrite;
    one measured_send_dc_write_one_guard, measured_send_dc_write_one_raw: SendDcWriteOne;
    batched measured_send_dc_pool_write_guard, measured_send_dc_pool_write_raw: SendDcPoolWrite;
    batched measured_send_dc_pool_write_settled_guard, measured_send_dc_pool_write_settled_raw:
        SendDcPoolWriteSettled;
    batched measured_send_dc_pool_dedicated_write_settled_guard, measured_send_dc_pool_dedicated_write_settled_raw:
        SendDcPoolDedicatedSettled;
    batched measured_send_dc_floor_write_guard, measured_send_dc_floor_write_raw: SendDcFloorWrite;
    batched measured_send_dc_floor_write_settled_guard, measured_send_dc_floor_write_settled_raw:
        SendDcFloorWriteSettled;
    batched measured_send_dc_floor_dedicated_write_settled_guard, measured_send_dc_floor_dedicated_write_settled_raw:
        SendDcFloorDedicatedSettled;
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let batch = match args.as_slice() {
        [batch] => batch.parse::<usize>().expect("BATCH"),
        // `cargo bench` without arguments (e.g. `cargo bench --all-targets`): nothing to measure.
        [] => {
            eprintln!("post_instructions: usage: post_instructions BATCH (scripts/bench runs it under callgrind)");
            return;
        },
        _ => panic!("usage: post_instructions BATCH"),
    };
    assert!(BATCHES.contains(&batch), "BATCH is one of {BATCHES:?}");
    run_rows(batch);
}
