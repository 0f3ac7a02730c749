# Pull request 3c-1: the DC initiator's creation and its planning. Read by scripts/upstream-pr (see
# upstream/README.md).
#
# The DC initiator's files move again with 3c-2 (bring-up, recovery), 3d (posting) and 3e (stream
# reset): each part takes the rewrites below that hold for it, so that every later part's commit
# is the difference. The rewrites are grouped by the part that brings what they cut:
# `INITIATOR_REWRITES(files, later)` gives a file's rewrites for a part whose later parts are
# `later` (pull request 3c-2 reads this file with runpy).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-dc-initiator", "2-dc-hello-example"]

_INIT = "src/mlx5/dc/initiator/"

# What holds for every part.
_ALWAYS = {
    "creation.rs": [
        # ibv_query_device through the protection domain's context, carried (helpers).
        ("crate::ibverbs::query_device_attr(&self.pd)", "query_device_attr(&self.pd)", 1),
    ],
}

# Cut before anything else: the test of a device that did not report its send request sizes
# (read with QUERY_HCA_CAP, this crate's own: see below).
_FIRST = {
    "creation.rs": [
        (("\n    /// A device that did not report its send request sizes",
          "CreateDcInitiatorErrorKind::DcNotSupportedByDevice\n        ));\n    }\n"), "", 1),
    ],
}

# What stays this crate's, cut from every part: the thread domain a DC initiator can be created
# on (src/ibverbs/thread_domain.rs: the register of sideway-ext-dc-direct's writer; upstream's DC
# initiator posts through libmlx5), and the largest send request read with QUERY_HCA_CAP
# (src/mlx5/send_wqe_sizes.rs, through mlx5dv_devx_general_cmd, which rdma-mummy-sys does not
# bind). Upstream, plan_dci refuses no request by its size: a request larger than every device
# takes is left to libmlx5, whose EINVAL is told apart as RequestTooLarge.
_REQUEST_TOO_LARGE = (
    "    /// libmlx5 refused the size of a request (`EINVAL` from `mlx5_calc_send_wqe`): with\n"
    "    /// `max_send_sge` entries or `max_inline_data` bytes inline, and this initiator's overhead,\n"
    "    /// a request takes `request_bytes`, more than the device's largest send request\n"
    "    /// (`max_wqe_sz_sq`, which no query of libibverbs or libmlx5 reports; every device takes\n"
    "    /// `guaranteed`). See [`DcInitiatorBuilder::setup_max_send_sge`].\n"
    "    #[error(\n"
    "        \"a request of {request_bytes} bytes (max_send_sge {max_send_sge}, max_inline_data {max_inline_data}) \\\n"
    "         is larger than the device's largest send request; {guaranteed} bytes fit every device\"\n"
    "    )]\n"
    "    RequestTooLarge {\n"
    "        /// The scatter/gather entries asked for.\n"
    "        max_send_sge: u32,\n"
    "        /// The inline bytes asked for.\n"
    "        max_inline_data: u32,\n"
    "        /// What a request takes (libmlx5's sizing, before rounding to 64-byte blocks).\n"
    "        request_bytes: u32,\n"
    "        /// What every device with this `max_sge` takes (`16 · max_sge + 32`).\n"
    "        guaranteed: u32,\n"
    "    },\n"
)
_MAX_SEND_SGE = (
    "    /// libmlx5 also bounds the whole request (`mlx5_calc_send_wqe`): this initiator's overhead\n"
    "    /// (control segment, 48-byte address vector, 16 more for RDMA's remote address, 32 more for\n"
    "    /// an atomic's), then 16 bytes an entry, or the inline data with a 4-byte header padded to\n"
    "    /// 16, must fit the device's largest send request, `max_wqe_sz_sq`, which no query of\n"
    "    /// libibverbs or libmlx5 reports. Every device takes at least `16 · max_sge + 32` bytes (the\n"
    "    /// kernel derives `max_sge` from it, capped at 512), so `max_sge − 3` entries (`− 4` with\n"
    "    /// atomics) and 428 bytes of inline data (412 with atomics) fit every device with `max_sge`\n"
    "    /// 30. A larger request is left to the library, and its refusal reported as\n"
    "    /// [`RequestTooLarge`](CreateDcInitiatorErrorKind::RequestTooLarge), never a bare `EINVAL`.\n"
)
_GUARANTEED = (
    "/// The largest send request every device with this `max_sge` takes, in bytes: the kernel's\n"
    "/// `mlx5_ib_query_device` derives `max_sge` as `(min(max_wqe_sz_sq, 512) − 32) / 16`, and its\n"
    "/// `mlx5_ib_alloc_ucontext` hands libmlx5 `max_wqe_sz_sq` itself as `max_sq_desc_sz`, the bound\n"
    "/// of `mlx5_calc_send_wqe`: so `max_sq_desc_sz ≥ 16 · max_sge + 32`.\n"
    "pub(crate) fn guaranteed_request_bytes(max_sge: u32) -> u32 {\n"
    "    max_sge.saturating_mul(16).saturating_add(32)\n"
    "}\n"
)
_THIS_CRATE = {
    "mod.rs": [
        ("use crate::ibverbs::thread_domain::{AllocateThreadDomainError, ThreadDomain};\n", "", 1),
        (("    /// A request does not fit the device's largest DC send request", "        reported: bool,\n    },\n"),
         _REQUEST_TOO_LARGE, 1),
        (("    /// Allocating the DC initiator's thread domain failed", "AllocateThreadDomainError),\n"), "", 1),
        (("/// The end of [`CreateDcInitiatorErrorKind::RequestTooLarge`]'s message", "\n}\n\n"), "", 1),
        ("    thread_domain: bool,\n", "", 1),
        ("; holds its protection domain,\n/// send CQ and thread domain, if any.",
         "; holds its protection domain\n/// and send CQ.", 1),
        ("    /// Dropped first: the queue pair, before the thread domain it was created on.\n", "", 1),
        ("    thread_domain: Option<ThreadDomain>,\n", "", 1),
        ("            .field(\"thread_domain\", &self.thread_domain.is_some())\n", "", 1),
        (("    /// The thread domain it was created on, of its own", "    }\n\n"), "", 1),
        (" parents and thread domain).", " parents).", 1),
    ],
    "creation.rs": [
        # The stream address step is this crate's own (src/mlx5/dc/streams.rs), and its setter's check.
        (("        if params.streams.is_some() {\n", "check_stream_setter(mlx5_qp_ex) }?;\n        }\n"), "", 1),
        ("use crate::ibverbs::thread_domain::ThreadDomain;\n", "", 1),
        ("use crate::mlx5::send_wqe_sizes::query_send_wqe_sizes_raw;\n", "", 1),
        ("            thread_domain: false,\n", "", 1),
        (("    /// The whole request is bounded too (libmlx5's `mlx5_calc_send_wqe`)", "never a bare `EINVAL`.\n"),
         _MAX_SEND_SGE, 1),
        (("    /// Whether each DC initiator is created on a thread domain of its own", "        self\n    }\n\n"), "", 1),
        (", the largest send request, DCI streams, see\n    /// [`CreateDcInitiatorErrorKind`]).\n",
         ", DCI streams, see [`CreateDcInitiatorErrorKind`]).\n", 1),
        (("        // Dropped after the queue pair if creation fails below", "        unsafe {\n"),
         "        // SAFETY: the PD and CQ are alive: self holds them, and the queue pair will too.\n        unsafe {\n", 1),
        (("            init.pd = match &thread_domain {", "            };\n"), "            init.pd = self.pd.pd().as_ptr();\n", 1),
        ("        let mut dci = DcInitiator::adopt(", "        DcInitiator::adopt(", 1),
        ("            .map_err(|entry| CreateDcInitiatorErrorKind::MissingProviderEntry { entry })?;\n"
         "        dci.thread_domain = thread_domain;\n        Ok(dci)\n",
         "            .map_err(|entry| CreateDcInitiatorErrorKind::MissingProviderEntry { entry }.into())\n", 1),
        (", and `QUERY_HCA_CAP` through\n    /// `mlx5dv_devx_general_cmd` for the largest send request)", ")", 1),
        ("        let max_sge = device.max_sge.max(0) as u32;\n", "", 1),
        ("            max_sge,\n            atomics:", "            max_sge: device.max_sge.max(0) as u32,\n            atomics:", 1),
        (("            // SAFETY: as above; the device is mlx5", "query_send_wqe_sizes_raw(context, max_sge) },\n"), "", 1),
        ("            thread_domain: None,\n", "", 1),
        # The plan's test without the device's largest send request (read with QUERY_HCA_CAP).
        ("two (20 requests of 128 bytes: 32), and\n"
         "    /// 500 bytes inline make a request of 80 + 512 bytes, beyond the device's DC size.\n",
         "two (20 requests of 128 bytes: 32).\n", 1),
        ("        let mut request = DciRequest {\n            max_send_wr: 20,", "        let request = DciRequest {\n            max_send_wr: 20,", 1),
        ("            send_wqe_sizes: crate::mlx5::send_wqe_sizes::SendWqeSizes::new(1024, 512),\n", "", 1),
        (("        request.max_inline_data = 500;\n", "                ..\n            })\n        ));\n"), "", 1),
        ("`EINVAL` for a request larger than the device's sizes is libmlx5's",
         "`EINVAL` for a request larger than every device takes\n"
         "/// ([`guaranteed_request_bytes`]) is libmlx5's", 1),
        ("    let sizes = device.send_wqe_sizes;\n", "    let guaranteed = guaranteed_request_bytes(device.max_sge);\n", 1),
        (("        Some(libc::EINVAL) if request_bytes > sizes.max_dc_request_bytes() => {", "        },\n"),
         "        Some(libc::EINVAL) if request_bytes > guaranteed => CreateDcInitiatorErrorKind::RequestTooLarge {\n"
         "            max_send_sge: params.max_send_sge,\n"
         "            max_inline_data: params.max_inline_data,\n"
         "            request_bytes,\n"
         "            guaranteed,\n"
         "        },\n", 1),
    ],
    "plan.rs": [
        ("use crate::mlx5::send_wqe_sizes::SendWqeSizes;\n", "", 1),
        ("`atomic_cap`, `mlx5dv_query_device`'s `dci_streams_caps`, and the\n"
         "/// general capabilities' `max_wqe_sz_sq` and `max_wqe_sz_sq_dc` (`QUERY_HCA_CAP`).",
         "`atomic_cap`, and `mlx5dv_query_device`'s `dci_streams_caps`.", 1),
        (("    /// The largest send request the device takes: reported", "    pub send_wqe_sizes: SendWqeSizes,\n"), "", 1),
        (("    let request_bytes = dci_request_bytes(send_ops,", "        ));\n    }\n"), "", 1),
        (("/// The refusal of a request (`max_send_sge` entries", "\n    }\n}\n"), _GUARANTEED, 1),
    ],
}

# The module's guide, as each part has it.
_GUIDE = {
    "pr3c-1": (
        "//! Build one with [`DcInitiatorBuilder`]\n"
        "//! ([`ProtectionDomain::create_dci_builder`](crate::ibverbs::protection_domain::ProtectionDomain::create_dci_builder)):\n"
        "//! the plan checks the request against the device (send operations, capacities, DCI\n"
        "//! streams) and sizes the send queue as libmlx5 sizes it before `mlx5dv_create_qp` is called.\n"
        "//! It is created in RESET; [`DcInitiator::modify`] moves it to RTS, its refusals explained by\n"
        "//! the DC initiator's table (mlx5_ib's `modify_dci_qp_is_ok`). Then post with\n"
        "//! [`DcInitiator::start_post_send`] ([`DcPostSendGuard`]): `construct_wr` → an operation →\n"
        "//! `setup_dc_addr` → the data. A data step before the address does not compile.\n"
        "//!\n"
        "//! This module defines the builder and its errors and the DC initiator with its accessors;\n"
        "//! `plan` decides the init parameters, `creation` holds the builder's settings and `build`,\n"
        "//! `post_send` the post guard.\n"
    ),
    "pr3c-2": (
        "//! Build one with [`DcInitiatorBuilder`]\n"
        "//! ([`ProtectionDomain::create_dci_builder`](crate::ibverbs::protection_domain::ProtectionDomain::create_dci_builder)),\n"
        "//! bring it to RTS with [`DcInitiator::bring_up`] (or step by step with [`DcInitiator::modify`]),\n"
        "//! then post with [`DcInitiator::start_post_send`] ([`DcPostSendGuard`]): `construct_wr` → an\n"
        "//! operation → `setup_dc_addr` → the data. A data step before the address does not compile.\n"
        "//!\n"
        "//! After an error completion a DC initiator is in ERR for every destination:\n"
        "//! [`DcInitiator::recover`] brings it back in one call.\n"
        "//!\n"
        "//! This module defines the builder and its errors and the DC initiator with its accessors; its\n"
        "//! other methods are in one file per concept: `creation`, the builder's settings and `build`\n"
        "//! (planned by `plan`, sized as libmlx5 sizes it, so what it will grant is known before the\n"
        "//! call); `bring_up`, the transitions to RTS; `recovery`, the state read from the device and\n"
        "//! `recover` after an error; `post_send`, the post guard.\n"
    ),
}

# What a later part brings, cut from the files until it comes.
_LATER = {
    # Bring-up and recovery.
    "pr3c-2": {
        "mod.rs": [
            ("use self::bring_up::BringUpAttributes;\n", "", 1),
            ("pub(crate) mod bring_up;\n", "", 1),
            ("pub(crate) mod recovery;\n", "", 1),
            ("pub use self::bring_up::{BringUpDcInitiatorError, BringUpDcInitiatorErrorKind, DcInitiatorBringUp};\n",
             "", 1),
            ("pub use self::recovery::{DcRecovery, RecoverDcInitiatorError, RecoverDcInitiatorErrorKind};\n", "", 1),
            ("    brought_up_with: Option<Arc<BringUpAttributes>>,\n", "", 1),
            # Read by recovery, which creates the DC initiator again where the kernel refuses RESET.
            ("    init: Zeroed<ibv_qp_init_attr_ex>,\n    mlx5: Zeroed<mlx5dv_qp_init_attr>,\n",
             "    #[allow(dead_code)] // read by recovery, which comes next\n"
             "    init: Zeroed<ibv_qp_init_attr_ex>,\n"
             "    #[allow(dead_code)] // as `init`\n"
             "    mlx5: Zeroed<mlx5dv_qp_init_attr>,\n", 1),
            ("    /// The queue pair number (a new one after [`recover`](Self::recover) rebuilt it).",
             "    /// The queue pair number.", 1),
            ("as of the last [`modify`](Self::modify) or [`query_state`](Self::query_state).",
             "as of the last [`modify`](Self::modify).", 1),
            ("it takes, which [`bring_up`](Self::bring_up) caps with: the\n    /// smaller",
             "it takes: the\n    /// smaller", 1),
        ],
        "creation.rs": [
            ("            brought_up_with: None,\n", "", 1),
        ],
    },
    # The reset of one DCI stream (mlx5dv_dci_stream_id_reset: an rdma-mummy-sys release first).
    "pr3e": {
        "recovery.rs": [
            ("only\n    /// a stream errored ([`reset_stream`](Self::reset_stream)) and it is still RTS.",
             "only\n    /// a stream errored and it is still RTS.", 1),
            (",\n//! `recover`, and the reset of one errored DCI stream (`mlx5dv_dci_stream_id_reset`, resolved\n"
             "//! here until rdma-mummy-sys binds it).\n", ",\n//! and `recover`.\n", 1),
            (("\n/// Error returned by [`DcInitiator::reset_stream`].\n",
              "_ => Err(ResetDciStreamErrorKind::Ibverbs(io::Error::from_raw_os_error(errno)).into()),\n"
              "            },\n        }\n    }\n}\n"), "", 1),
        ],
        "mod.rs": [
            ("pub use self::recovery::{\n"
             "    DcRecovery, RecoverDcInitiatorError, RecoverDcInitiatorErrorKind, ResetDciStreamError, ResetDciStreamErrorKind,\n"
             "};\n",
             "pub use self::recovery::{DcRecovery, RecoverDcInitiatorError, RecoverDcInitiatorErrorKind};\n", 1),
            ("    /// The device's `dci_streams_caps.max_log_num_errored` (0: no stream can be reset).\n"
             "    max_log_num_errored: u8,\n", "", 1),
        ],
        "creation.rs": [
            ("            max_log_num_errored: device.dci_streams.map_or(0, |caps| caps.max_log_num_errored),\n", "", 1),
        ],
    },
}

_PARTS = ["pr3c-1", "pr3c-2", "pr3e"]

# What holds from a part on (once what it brings is there).
_SINCE = {}


def INITIATOR_REWRITES(name, part):
    """The rewrites of the DC initiator's file `name` (under src/mlx5/dc/initiator/) in `part`."""
    later = _PARTS[_PARTS.index(part) + 1:]
    rewrites = list(_FIRST.get(name, [])) + _THIS_CRATE.get(name, [])
    # The later parts' cuts first (the latest first: a part's rewrites read its own lines, which
    # an earlier part's cut would remove): some of the crate's lines they cut name this crate's types.
    for other in reversed(later):
        rewrites += _LATER[other].get(name, [])
    for since, files in _SINCE.items():
        if since not in later:
            rewrites += files.get(name, [])
    rewrites += _ALWAYS.get(name, [])
    if name == "mod.rs" and part in _GUIDE:
        rewrites.append((("//! Build one with [`DcInitiatorBuilder`]", "DCI streams [`DcInitiator::reset_stream`] the one errored stream.\n"),
                         _GUIDE[part], 1))
    return rewrites


def _move(name, part, helpers=()):
    return {"from": _INIT + name, "to": _INIT + name, "helpers": list(helpers),
            "rewrites": INITIATOR_REWRITES(name, part)}


# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-dc-initiator": [
        # As 3b-2 moved it, now that the DC initiator's transitions are used.
        {"from": "src/mlx5/dc/state_table.rs", "to": "src/mlx5/dc/state_table.rs", "helpers": [], "rewrites": []},
        _move("mod.rs", "pr3c-1"),
        _move("creation.rs", "pr3c-1", helpers=["query_device_attr"]),
        _move("plan.rs", "pr3c-1"),
        _move("post_send.rs", "pr3c-1"),
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
                ("sideway_ext::", "sideway::", 3),
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

# The files of the moved folder that later parts take.
LEFT_OUT = {
    _INIT + "bring_up.rs": "the DC initiator's bring-up: pull request 3c-2",
    _INIT + "recovery.rs": "the DC initiator's recovery: pull request 3c-2",
}

# What a moved file, or a line a diff adds, must not say: this crate's names and glue, and the DC
# words of the later parts (3c-2: bring-up and recovery; 3d: posting; 3e: stream reset, example).
FORBIDDEN = GLUE + ["library::", "library.rs", "DcVerbs", "QueuePairCore", "TransitionTable", "modelled",
                    "SharedReceiveQueuePair", "extension::",
                    "DcInitiatorBringUp", "BringUpAttributes", "DcRecovery", "recover`", "query_state",
                    "wait_for_error", "bring_up", "PortNotReady", "test_support",
                    "reset_stream", "stream_reset", "dc_selftest", "WorkCompletion::default",
                    "PathMtus", "ReadResponsesTooLarge", "destination_path_mtu", "set_path_mtus", "with_path_mtu"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (2000, 30)

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_initiator"], "examples": ["dc_hello"],
            "counters": {"DC targets created": 1, "DC initiators created": 1, "requests": 2}}
