//! The post guards' borrow rules, pinned with trybuild: each program in `tests/compile_fail/`
//! must fail to compile with the borrow error in its `.stderr` file (two send guards on one
//! queue pair; a request handle outliving its guard; posting while a request handle is alive;
//! a query, which lets libibverbs write the queue pair, through a shared reference).
//!
//! A host-only test: it runs cargo to compile the programs, so `scripts/device-suite` does not
//! run it in the VM (it counts it as skipped there). After a change to the guards, regenerate the
//! expected errors with `TRYBUILD=overwrite cargo test --test test_compile_fail` and review them.

#[test]
fn post_guard_borrow_rules() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/*.rs");
}

/// The DC initiator's batches (`--features mlx5`): one at a time per DC initiator (a pool's, in
/// sideway-ext-dc-pool's own test). The data step before the DC address is the `compile_fail`
/// doctest of `mlx5::dc::initiator`'s post guard.
#[cfg(feature = "mlx5")]
#[test]
fn dc_one_batch_at_a_time() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/dc/*.rs");
}
