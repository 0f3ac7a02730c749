# Pull request 3e: the reset of one DCI stream and the DC example. Read by scripts/upstream-pr (see
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
COMMITS = ["1-dci-stream-reset", "2-dc-hello-example"]

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
        _move("creation.rs", helpers=["query_device_attr"]),
        _move("recovery.rs", rewrites=_STREAM_RESET),
    ],
    "2-dc-hello-example": [
        {
            # The example as a user of sideway writes it: sideway's inherent methods (no extension
            # traits) and its completion poller.
            "from": "examples/dc_hello.rs",
            "to": "examples/dc_hello.rs",
            "common": False,
            "helpers": [],
            "rewrites": [
                ("use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};\n", "", 1),
                ("use sideway_ext::ibverbs::work_completion::WorkCompletion;\n", "", 1),
                ("use sideway_ext::mlx5::extension::DcProtectionDomainExt;\n", "", 1),
                ("use sideway::ibverbs::device::{DeviceInfo, DeviceList};\n",
                 "use sideway::ibverbs::completion::{PollCompletionQueueError, WorkCompletionStatus};\n"
                 "use sideway::ibverbs::device::{DeviceInfo, DeviceList};\n", 1),
                ("sideway_ext::", "sideway::", 4),
                ("    let mut wcs = [WorkCompletion::default(); 4];\n", "", 1),
                ("        for wc in cq.poll_work_completions(&mut wcs)? {\n"
                 "            if !wc.is_success() {\n"
                 "                return Err(format!(\"request {} failed: {wc:?}\", wc.wr_id()).into());\n"
                 "            }\n"
                 "            done.push((wc.wr_id(), wc.byte_len()));\n"
                 "        }\n",
                 "        let poller = match cq.start_poll() {\n"
                 "            Ok(poller) => poller,\n"
                 "            Err(PollCompletionQueueError::CompletionQueueEmpty) => continue,\n"
                 "            Err(err) => return Err(err.into()),\n"
                 "        };\n"
                 "        for wc in poller {\n"
                 "            if wc.status() != WorkCompletionStatus::Success as u32 {\n"
                 "                return Err(format!(\"request {} failed: status {}\", wc.wr_id(), wc.status()).into());\n"
                 "            }\n"
                 "            done.push((wc.wr_id(), wc.byte_len()));\n"
                 "        }\n", 1),
            ],
        },
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
SOFTMLX5 = {"tests": ["test_dc_initiator"], "examples": ["dc_hello"], "counters": {"DC targets created": 2, "DC initiators created": 2, "requests": 3}}
