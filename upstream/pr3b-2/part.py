# Pull request 3b-2: the DC target. Read by scripts/upstream-pr (see upstream/README.md).
#
# sideway's .gitignore says `target/`, which hides src/mlx5/dc/target/ from `git add`:
# gitignore.diff anchors it (`/target/`).
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

# The crate's tables are made at compile time from the lists; sideway's are QueuePairStateTables
# (LazyLock, as its RC, UC, UD tables), checked by `modify_qp` after the device's EINVAL.
UPSTREAM_TABLES = '''// The tables, as sideway's `modify_qp` explains the device's `EINVAL` with them.

/// The DC initiator's table, [`DC_INITIATOR_TRANSITIONS`].
#[cfg_attr(not(test), allow(dead_code))] // the DC initiator's, which comes next
pub(crate) static DC_INITIATOR_STATE_TABLE: LazyLock<QueuePairStateTable> =
    LazyLock::new(|| dc_table(&DC_INITIATOR_TRANSITIONS));

/// The DC target's table, [`DC_TARGET_TRANSITIONS`].
pub(crate) static DC_TARGET_STATE_TABLE: LazyLock<QueuePairStateTable> =
    LazyLock::new(|| dc_table(&DC_TARGET_TRANSITIONS));

/// A table in which only the listed transitions are valid, each needing `IBV_QP_STATE` too.
fn dc_table(transitions: &[DcTransition]) -> QueuePairStateTable {
    let invalid = QueuePairStateTableEntry {
        valid: false,
        required_mask: Mask::none(),
        optional_mask: Mask::none(),
    };
    let mut table = [[invalid; QueuePairState::Error as usize + 1]; QueuePairState::Error as usize + 1];
    for &(from, to, required, optional) in transitions {
        table[from as usize][to as usize] = QueuePairStateTableEntry {
            valid: true,
            required_mask: required | Mask::State,
            optional_mask: optional,
        };
    }
    table
}
'''

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
            # The DC transitions as they are; the tables made from them in sideway's shape. The
            # tests (on the kernel's named transitions, beside this workspace's device tests) stay: sideway's
            # are files/src/mlx5/dc/state_table/tests.rs.
            "from": "src/mlx5/dc/state_table.rs",
            "to": "src/mlx5/dc/state_table.rs",
            "helpers": [],
            "rewrites": [
                ("use crate::ibverbs::queue_pair::QueuePairAttributeMask as Mask;\n"
                 "use crate::ibverbs::queue_pair::QueuePairState::{self, *};\n\n"
                 "use crate::ibverbs::queue_pair::transition::{Transition, TransitionTable};\n",
                 "use std::sync::LazyLock;\n\n"
                 "use crate::ibverbs::queue_pair::QueuePairAttributeMask as Mask;\n"
                 "use crate::ibverbs::queue_pair::QueuePairState::{self, *};\n"
                 "use crate::ibverbs::queue_pair::{QueuePairStateTable, QueuePairStateTableEntry};\n", 1),
                (("// The tables, as this crate's queue-pair core checks them", "    rows\n}\n"),
                 UPSTREAM_TABLES, 1),
            ],
        },
        {
            # What the DC queue pairs share, calling libmlx5 itself.
            "from": "src/mlx5/dc/queue_pair.rs",
            "to": "src/mlx5/dc/queue_pair.rs",
            "helpers": [],
            "rewrites": [
                ("use rdma_mummy_sys::{ibv_qp, ibv_qp_init_attr_ex, mlx5dv_qp_init_attr};",
                 "use rdma_mummy_sys::{ibv_qp, ibv_qp_init_attr_ex, mlx5dv_create_qp, mlx5dv_qp_init_attr};", 1),
                ("unsafe { rdma_mummy_sys::mlx5dv_create_qp(", "unsafe { mlx5dv_create_qp(", 1),
                # The port check's unit test stays here (what the software ConnectX cannot be).
                (("\n#[cfg(test)]\nmod tests {", "\n    }\n}\n"), "", 1),
            ],
        },
        {
            # The DC target on sideway's driver queue-pair core.
            "from": "src/mlx5/dc/target.rs",
            "to": "src/mlx5/dc/target.rs",
            "helpers": [],
            "rewrites": [
                ("use crate::ibverbs::queue_pair::{QueuePairAttribute, QueuePairCore};\n",
                 "use crate::ibverbs::driver_queue_pair::DriverQueuePair;\n"
                 "use crate::ibverbs::queue_pair::QueuePairAttribute;\n", 1),
                ("QueuePairCore", "DriverQueuePair", 2),
                # The DC initiator comes with the next part (3c-1).
                ("so that a\n    /// [`DcInitiator`](super::initiator::DcInitiator) built with its defaults",
                 "so that a\n    /// DC initiator built with its defaults", 1),
            ],
        },
        {
            "from": "src/mlx5/dc/target/bring_up.rs",
            "to": "src/mlx5/dc/target/bring_up.rs",
            "helpers": [],
            "rewrites": [
                ("use crate::mlx5::dc::state_table::DC_TARGET_STATE_TABLE;\n",
                 "use crate::ibverbs::queue_pair::attr_mask_check;\n"
                 "    use crate::mlx5::dc::state_table::DC_TARGET_STATE_TABLE;\n", 1),
                ("        DC_TARGET_STATE_TABLE.check(from, attr).is_ok()",
                 "        let to = match attr.attr_mask.contains(QueuePairAttributeMask::State) {\n"
                 "            true => attr.attr.qp_state.into(),\n"
                 "            false => from,\n"
                 "        };\n"
                 "        attr_mask_check(attr.attr_mask, from, to, &DC_TARGET_STATE_TABLE).is_ok()", 1),
            ],
        },
        {
            # Included by target.rs as the DC target's documentation.
            "from": "src/mlx5/dc/target/wrong_key.md",
            "to": "src/mlx5/dc/target/wrong_key.md",
            "common": False,
            "helpers": [],
            "rewrites": [
            ],
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

# Its unit tests beyond the mlx5 module's (which --check runs on the host anyway): the transition
# to or from Unknown, which panicked.
HOST_TESTS = [
    "ibverbs::queue_pair::tests::state_table_tests::test_unknown_state_is_an_invalid_transition",
]

# Files of the moved dc/ folder that later parts take.
LEFT_OUT = {
    "src/mlx5/dc/state_table/tests.rs": "uses this crate's test support (src/test_support.rs): "
                                        "sideway's tests are upstream/pr3b-2/1-dc-target/files/",
}

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_target"], "counters": {"DC targets created": 1}}
