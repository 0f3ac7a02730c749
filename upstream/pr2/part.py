# Pull request 2: the mlx5 control plane. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-mlx5-device-queries", "2-mlx5-devinfo-example"]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    # Pull request 2, the mlx5 control plane: the device context, its attributes and the DC
    # summary (not dc/, extension.rs, library.rs: pull request 3; mod.rs is written for upstream).
    "1-mlx5-device-queries": [
        {
            "from": "src/mlx5/device_context.rs",
            "to": "src/mlx5/device_context.rs",
            "helpers": [],
            "rewrites": [
                ("/// use crate::ibverbs::device::DeviceList;\n/// use sideway_ext::mlx5::",
                 "/// use sideway::ibverbs::device::DeviceList;\n/// use sideway::mlx5::", 1),
                ("/// `mlx5dv_query_device` on a raw context (for the DC queue pairs, which reach the context\n"
                 "/// through their protection domain).",
                 "/// `mlx5dv_query_device` on a raw context.", 1),
            ],
        },
        {
            "from": "src/mlx5/device_attributes.rs",
            "to": "src/mlx5/device_attributes.rs",
            "helpers": [],
            "rewrites": [
                # The DC initiator and its planning come with pull request 3.
                ("written by hand (e.g. for\n    /// [`plan_dci`](crate::mlx5::dc::initiator::plan_dci) on a device one describes).",
                 "written by hand (e.g. to\n    /// plan DC queue pairs for a device one describes).", 1),
                ("\n    /// ([`DcInitiator::max_read_atomic`](crate::mlx5::dc::initiator::DcInitiator::max_read_atomic)).",
                 ".", 2),
            ],
        },
        {
            "from": "src/mlx5/dc_capabilities.rs",
            "to": "src/mlx5/dc_capabilities.rs",
            "helpers": [],
            "rewrites": [
                ("so [`DcInitiator`](crate::mlx5::dc::initiator::DcInitiator) caps its\n    /// depth by this value.",
                 "so a DC initiator's depth is capped\n    /// by this value.", 1),
            ],
        },
    ],
    "2-mlx5-devinfo-example": [
        {
            # The example without its DC self-test (pull request 3 brings DC), one file upstream.
            "from": "examples/mlx5_devinfo/main.rs",
            "to": "examples/mlx5_devinfo.rs",
            "common": False,
            "helpers": [],
            "rewrites": [
                ("sideway_ext::mlx5::", "sideway::mlx5::", 6),
                ("//! cargo run --features mlx5 --example mlx5_devinfo -- --dc-selftest -d mlx5_0\n"
                 "//! cargo run --features mlx5 --example mlx5_devinfo -- --dc-selftest --report dc-report.json\n",
                 "", 1),
                (("//! `--dc-selftest` runs DC end to end", "no device can be listed.\n//!\n"), "", 1),
                ("(or the named one does not exist), and\n"
                 "//! with `--dc-selftest` also when the device is not mlx5; 2 when a self-test check failed.",
                 "(or the named one does not exist).", 1),
                ("mod dc_selftest;\nmod fault;\nmod report;\n\n", "", 1),
                (("    /// Run the DC self-test", "    report: Option<std::path::PathBuf>,\n"), "", 1),
                (("    if args.dc_selftest {\n", "        std::process::exit(status);\n    }\n"), "", 1),
                (("/// Runs the DC self-test on the chosen device", "    status\n}\n\n"), "", 1),
            ],
        },
    ],
}

# What a moved file, or a line a diff adds, must not say.
FORBIDDEN = GLUE + DC_DATA_PLANE

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1600, 300)
