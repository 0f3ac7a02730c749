# Pull request 2: the mlx5 control plane. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-mlx5-device-queries", "2-clippy-every-feature"]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    # Pull request 2, the mlx5 control plane: the device context, its attributes and the DC
    # summary (not dc/, extension.rs, library.rs: pull request 3; mod.rs is written for upstream).
    "1-mlx5-device-queries": [
        {
            "from": "src/mlx5/device_context.rs",
            "to": "src/mlx5/device_context.rs",
            "helpers": [],
            "rewrites": [],
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
            "rewrites": [],
        },
    ],
}

# What a moved file, or a line a diff adds, must not say.
FORBIDDEN = GLUE + DC_DATA_PLANE

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1600, 300)

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_mlx5"], "counters": {"mlx5 device queries": 1}}
