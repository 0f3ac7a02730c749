//! Links libmlx5's own `providers/mlx5/qp.c` and `cq.c` (rdma-core 55, unmodified) with the
//! oracle's shim, over plain memory, as softmlx5's build script compiled them (the one place of
//! the workspace that compiles libmlx5; its `compile_oracle` says how): `mlx5_oracle_recorded`,
//! with recorded barriers and stores, and `mlx5_oracle_plain`, with rdma-core's own and every
//! symbol prefixed `plain_`.
use std::env;

fn main() {
    let dir = env::var("DEP_SOFTMLX5_ORACLE_LIB_DIR").expect("DEP_SOFTMLX5_ORACLE_LIB_DIR (softmlx5's build)");
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=static=mlx5_oracle_recorded");
    println!("cargo:rustc-link-lib=static=mlx5_oracle_plain");
    println!("cargo:rerun-if-env-changed=DEP_SOFTMLX5_ORACLE_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
}
