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


# The reset through rdma-mummy-sys' binding: its wrapper returns EOPNOTSUPP where libmlx5 lacks the
# function, as libmlx5 does where the device cannot reset streams, so the two are one error kind.
_STREAM_RESET = [
    ("(`mlx5dv_dci_stream_id_reset`, resolved\n//! here until rdma-mummy-sys binds it).\n",
     "(`mlx5dv_dci_stream_id_reset`,\n//! libmlx5 of rdma-core v37 and later).\n", 1),
    ("use std::time::{Duration, Instant};\n\n",
     "use std::time::{Duration, Instant};\n\nuse rdma_mummy_sys::mlx5dv_dci_stream_id_reset;\n", 1),
    (("    /// libmlx5 has no `mlx5dv_dci_stream_id_reset`", "    NotSupported,\n"), "", 1),
    ("    /// The device cannot reset streams (`EOPNOTSUPP` while the DC initiator is in RTS).",
     "    /// The device, or libmlx5 before rdma-core v37, cannot reset streams (`EOPNOTSUPP` while the\n"
     "    /// DC initiator is in RTS).", 1),
    ("(max_log_num_errored 0 or no QP context extension)",
     "(max_log_num_errored 0, no QP context extension, or libmlx5 before v37)", 1),
    ("        let reset = crate::mlx5::library::dci_stream_id_reset().ok_or(ResetDciStreamErrorKind::NotSupported)?;\n",
     "", 1),
    ("        // SAFETY: the queue pair is alive and exclusively borrowed; the function has the C\n"
     "        // signature it was resolved with.\n"
     "        match unsafe { reset(self.qp.qp().as_ptr(), stream_id) } {",
     "        // SAFETY: the queue pair is alive and exclusively borrowed.\n"
     "        match unsafe { mlx5dv_dci_stream_id_reset(self.qp.qp().as_ptr(), stream_id) } {", 1),
]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-dci-stream-reset": [
        _move("mod.rs"),
        _move("creation.rs"),
        _move("recovery.rs", rewrites=_STREAM_RESET),
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

# Stream reset needs the DC initiator's recovery (3c-2), not the endpoints.
BASE = "pr3c-2"
