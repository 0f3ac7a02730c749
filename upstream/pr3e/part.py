# Pull request 3e: the reset of one DCI stream. Read by scripts/upstream-pr (see
# upstream/README.md).
#
# The reset calls mlx5dv_dci_stream_id_reset, which rdma-mummy-sys binds from 0.2.7 on (the
# wrapper's own request: scripts/upstream-rdma-mummy-sys); this crate resolves it itself until then
# (src/mlx5/library.rs, which stays). The DC initiator's module, creation and recovery move again,
# with every rewrite of upstream/pr3c-1/part.py's INITIATOR_REWRITES that holds for the last part.
import runpy
from pathlib import Path

_SHARED = runpy.run_path(str(Path(__file__).resolve().parent.parent / "pr3c-1" / "part.py"),
                         init_globals={"GLUE": GLUE, "DC_DATA_PLANE": DC_DATA_PLANE})

# Its commits, in order: the folders beside this file.
COMMITS = ["1-dci-stream-reset"]

# `--check` builds this part against the generated rdma-mummy-sys 0.2.7 (a [patch] of the check's
# copy only: the pull request itself requires the release).
NEEDS_RDMA_MUMMY_SYS = True


def _move(name, helpers=(), rewrites=()):
    path = "src/mlx5/dc/initiator/" + name
    return {"from": path, "to": path, "helpers": list(helpers),
            "rewrites": _SHARED["INITIATOR_REWRITES"](name, "pr3e") + list(rewrites)}


# The reset through rdma-mummy-sys' binding (0.2.7), which this crate's library.rs mirrors until
# then: the same name and answers (EOPNOTSUPP where libmlx5 lacks the function).
_STREAM_RESET = [
    ("use crate::mlx5::library::mlx5dv_dci_stream_id_reset;", "use rdma_mummy_sys::mlx5dv_dci_stream_id_reset;", 1),
]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-dci-stream-reset": [
        _move("mod.rs"),
        {"from": "src/mlx5/dc/initiator/stream_reset.rs", "to": "src/mlx5/dc/initiator/stream_reset.rs",
         "helpers": [], "rewrites": _STREAM_RESET},
    ],
}

# What a moved file, or a line a diff adds, must not say: this crate's names and glue (the last
# part: no later DC words).
FORBIDDEN = GLUE + ["library::", "library.rs", "DcVerbs", "QueuePairCore", "TransitionTable", "modelled",
                    "SharedReceiveQueuePair", "extension::", "test_support",
                    "dc_selftest", "WorkCompletion::default", "stream_id_reset)"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (330, 10)

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_initiator"], "counters": {"DC targets created": 1, "DC initiators created": 2, "requests": 1}}

# Stream reset needs the DC initiator's recovery (3c-2), not the endpoints (3b-1); it sits last,
# on the one before it, as every optional request does (a maintainer takes a prefix of the chain).
