# Pull request 2: the mlx5 control plane. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-mlx5-device-queries", "2-clippy-every-feature"]

# The largest send request read with QUERY_HCA_CAP (src/mlx5/send_wqe_sizes.rs, which stays: it
# calls mlx5dv_devx_general_cmd, which rdma-mummy-sys does not bind), cut from the DC summary.
_NO_SEND_WQE_SIZES = {
    "src/mlx5/device_context.rs": [
        ("use super::send_wqe_sizes::query_send_wqe_sizes_raw;\n", "", 1),
        (", DC on-demand paging and the largest send request\n"
         "    /// (`max_wqe_sz_sq`, `max_wqe_sz_sq_dc`: [`DcCapabilities::send_wqe_sizes`]), with the RC\n"
         "    /// depths from `ibv_query_device` for comparison.\n",
         " and DC on-demand paging, with the RC depths from\n"
         "    /// `ibv_query_device` for comparison.\n", 1),
        (("    /// On an mlx5 device this also sends `QUERY_HCA_CAP`", "    ///\n"), "", 1),
        (("        let sizes = mlx5.as_ref().map(|attributes| {", "        });\n"), "", 1),
        ("DcCapabilities::from_parts(\n            sizes,", "DcCapabilities::from_parts(\n            mlx5.as_ref(),", 1),
    ],
    "src/mlx5/dc_capabilities.rs": [
        ("use super::send_wqe_sizes::SendWqeSizes;\n", "", 1),
        ("(the DC values), the device's general capabilities\n"
         "/// (`max_wqe_sz_sq` and `max_wqe_sz_sq_dc`, [`SendWqeSizes`]) and sideway's\n",
         "(the DC values) with sideway's\n", 1),
        ("    send_wqe_sizes: Option<SendWqeSizes>,\n", "", 1),
        ("mlx5: Option<(&Mlx5DeviceAttributes, SendWqeSizes)>,", "mlx5: Option<&Mlx5DeviceAttributes>,", 1),
        (("        let (mlx5, send_wqe_sizes) = match mlx5 {", "        };\n"), "", 1),
        ("            send_wqe_sizes,\n", "", 1),
        (("    /// The largest send request the device takes", "    }\n\n"), "", 1),
        # The unit tests.
        ("        assert_eq!(dc.send_wqe_sizes(), None);\n", "", 1),
        ("        assert_eq!(dc.send_wqe_sizes(), Some(SendWqeSizes::new(1024, 512)));\n", "", 1),
        ("Some((&attr, SendWqeSizes::new(1024, 512)))", "Some(&attr)", 1),
        ("Some((&zero, SendWqeSizes::guaranteed(30)))", "Some(&zero)", 1),
        ("Some((&old, SendWqeSizes::guaranteed(30)))", "Some(&old)", 1),
    ],
}

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
                *_NO_SEND_WQE_SIZES["src/mlx5/device_context.rs"],
            ],
        },
        {
            "from": "src/mlx5/device_attributes.rs",
            "to": "src/mlx5/device_attributes.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            "from": "src/mlx5/dc_capabilities.rs",
            "to": "src/mlx5/dc_capabilities.rs",
            "helpers": [],
            "rewrites": [
                *_NO_SEND_WQE_SIZES["src/mlx5/dc_capabilities.rs"],
            ],
        },
    ],
}

# What a moved file, or a line a diff adds, must not say.
FORBIDDEN = GLUE + DC_DATA_PLANE

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1600, 300)

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_mlx5"], "counters": {"mlx5 device queries": 1}}
