# Pull request 3b-2: the DC target. Read by scripts/upstream-pr (see upstream/README.md).
#
# The DC endpoint's file, moved with 3b-1, moves again with the rewrites that hold from here on
# (upstream/pr3b-1/part.py, ENDPOINT_REWRITES): what this part adds to it (the address from an
# InfiniBand port that requires a GRH, as the target's bring-up here) is the difference.
import runpy
from pathlib import Path

_ENDPOINTS = runpy.run_path(str(Path(__file__).resolve().parent.parent / "pr3b-1" / "part.py"),
                            init_globals={"GLUE": GLUE, "DC_DATA_PLANE": DC_DATA_PLANE})

# Its commits, in order: the folders beside this file.
COMMITS = ["1-dc-target"]

# The DC queue pair's file, as this part and the DC initiator's bring-up (3c-2) move it: its
# query of the state and its replacement, which only the DC initiator's recovery calls, are cut
# from this part's copy.
DC_QUEUE_PAIR_REWRITES = [
    # sideway's QueuePairAttribute holds the `ibv_qp_attr` itself, not this crate's zeroed wrapper.
    ("ibv_qp_attr { ..*attr.attr }", "ibv_qp_attr { ..attr.attr }", 1),
    # The port check's unit test stays here (what the software ConnectX cannot be).
    (("\n#[cfg(test)]\nmod tests {", "\n    }\n}\n"), "", 1),
]
# The DC target's bring-up reads its port through the target's public API: the queue pair's
# context and port queries are the DC initiator's, and the protection domain only held.
_INITIATOR_ONLY = [
    ("ibv_context, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_qp_init_attr_ex", "ibv_qp, ibv_qp_attr, ibv_qp_init_attr_ex", 1),
    (" QueryQueuePairError, QueryQueuePairErrorKind,\n   ", "", 1),
    ("use crate::ibverbs::source_gid::{query_gid_entry, read_gid_table, SourceGidError};\n", "", 1),
    ("    pd: Arc<ProtectionDomain>,\n}", "    _pd: Arc<ProtectionDomain>,\n}", 1),
    ("            pd,\n        }", "            _pd: pd,\n        }", 1),
    (("\n    /// The device context of the queue pair's protection domain.", "        Ok(self.state)\n    }\n"), "", 1),
    (" or [`query_state`](Self::query_state):", ":", 1),
]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-dc-target": [
        {
            "from": "src/mlx5/dc/endpoint.rs",
            "to": "src/mlx5/dc/endpoint.rs",
            "helpers": [],
            "rewrites": _ENDPOINTS["ENDPOINT_REWRITES"]("pr3b-2"),
        },
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
            # The DC queue pair: creation, the handle and its modify, the port check.
            "from": "src/mlx5/dc/queue_pair.rs",
            "to": "src/mlx5/dc/queue_pair.rs",
            "helpers": [],
            "rewrites": DC_QUEUE_PAIR_REWRITES + _INITIATOR_ONLY,
        },
        {
            # The DC target, whole.
            "from": "src/mlx5/dc/target.rs",
            "to": "src/mlx5/dc/target.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            # Its bring-up in one call and its endpoint, beside it on its public API.
            "from": "src/mlx5/dc/target_bring_up.rs",
            "to": "src/mlx5/dc/target_bring_up.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            # Included by target_bring_up.rs as its documentation.
            "from": "src/mlx5/dc/target_wrong_key.md",
            "to": "src/mlx5/dc/target_wrong_key.md",
            "common": False,
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

# The most it may change: lines, and lines of sideway's existing files (1 320 and 64 measured).
LIMITS = (1400, 70)

# Files of the moved dc/ folder that later parts take.
LEFT_OUT = {
    "src/mlx5/dc/state_table/tests.rs": "uses this crate's test support (src/test_support.rs): "
                                        "sideway's tests are upstream/pr3b-2/1-dc-target/files/",
}

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_target"], "counters": {"DC targets created": 1}}
