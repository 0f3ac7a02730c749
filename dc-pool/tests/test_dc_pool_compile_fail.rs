//! A pool's request order, pinned with trybuild: each program in `tests/compile_fail/` must fail
//! to compile with the error in its `.stderr` file (no address step, the pool sets it; one batch
//! per pool; no post from `poll`'s handler, which runs while `poll` holds the pool).
//!
//! A host-only test: it runs cargo to compile the programs, so `scripts/device-suite` does not
//! run it in the VM. After a change to the pool's guard, regenerate the expected errors with
//! `TRYBUILD=overwrite cargo test -p sideway-ext-dc-pool --test test_dc_pool_compile_fail` and review them.

#[test]
fn pool_request_order() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/*.rs");
}
