# Pull request 3b-2: the DC target. Read by scripts/upstream-pr (see upstream/README.md).
#
# Its commits, in order: the folders beside this file.
COMMITS = ["1-dc-target"]

# The DC queue pair's file: what only the DC initiator's bring-up and recovery call (its port and
# GID table, its replacement by a rebuilt queue pair, its state read from the device) comes with
# them (pull request 3c-2).
DC_QUEUE_PAIR_REWRITES = [
    (("\n    /// The device context of the queue pair.", "        Ok(self.state)\n    }\n"), "", 1),
]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-dc-target": [
        {
            # The DC transitions and the check that explains a refusal with them. The tests (on the
            # kernel's named transitions, beside this workspace's device tests) stay: sideway's
            # are files/src/mlx5/dc/state_table/tests.rs.
            "from": "src/mlx5/dc/state_table.rs",
            "to": "src/mlx5/dc/state_table.rs",
            "helpers": [],
            "rewrites": [
                ("pub(crate) const DC_INITIATOR_TRANSITIONS",
                 "#[cfg_attr(not(test), allow(dead_code))] // the DC initiator's, which comes next\n"
                 "pub(crate) const DC_INITIATOR_TRANSITIONS", 1),
            ],
        },
        {
            # The DC queue pair: creation, the handle and its modify.
            "from": "src/mlx5/dc/queue_pair.rs",
            "to": "src/mlx5/dc/queue_pair.rs",
            "helpers": [],
            "rewrites": DC_QUEUE_PAIR_REWRITES,
        },
        {
            # The DC target, whole.
            "from": "src/mlx5/dc/target.rs",
            "to": "src/mlx5/dc/target.rs",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# What a moved file, or a line a diff adds, must not say: this crate's names and glue, and the
# DC words of the later parts (3c: the initiator and its planning; 3d: posting; 3e: streams and
# the example).
FORBIDDEN = GLUE + ["library::", "library.rs", "DcVerbs", "QueuePairCore", "TransitionTable", "DcInitiator",
                    "plan_dci", "DciStreams", "setup_dc_addr", "reset_stream", "dc_hello",
                    "dc_selftest", "SharedReceiveQueuePair", "modelled"]

# The most it may change: lines, and lines of sideway's existing files (a mission request).
LIMITS = (1000, 300)

# It needs the mlx5 control plane and the shared receive queues, not the address handles' optional
# parts: it applies on the address handles (the mission path's request before it).
BASE = "pr1c-1"

# Files of the moved dc/ folder that later parts take.
LEFT_OUT = {
    "src/mlx5/dc/mod.rs": "written for upstream: upstream/pr3b-2/1-dc-target/files/src/mlx5/dc/mod.rs, "
                          "each later part adds its modules",
    "src/mlx5/dc/state_table/tests.rs": "uses this crate's test support (src/test_support.rs): "
                                        "sideway's tests are upstream/pr3b-2/1-dc-target/files/",
}

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_target"], "counters": {"DC targets created": 1}}
