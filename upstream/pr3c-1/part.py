# Pull request 3c-1: the DC initiator, its posting and dc_hello. Read by scripts/upstream-pr (see
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
_ALWAYS = {}

# What stays this crate's, cut from every part: the module lines of a DC initiator created on a
# thread domain of its own (thread_domain.rs: the register of sideway-ext-dc-direct's writer;
# upstream's DC initiator posts through libmlx5, which needs none), of a builder's settings taken
# to another protection domain (protection_domain.rs, the pool's) and of the plan that checks a
# request against the device before it is built (plan.rs, the pool's: upstream's `build` leaves
# the device's limits to libmlx5 and the kernel, as sideway's queue pair builder does).
_THIS_CRATE = {
    "mod.rs": [
        # A DC initiator on a thread domain of its own (thread_domain.rs, which stays).
        (("// This crate's own: a DC initiator on a thread domain", "pub mod thread_domain;\n"), "", 1),
    ],
}

# The module's guide from 3c-2 on (this crate's, src/mlx5/dc/initiator/mod.rs, is 3c-1's).
_GUIDE = {
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
        "//! other methods are in one file per concept: `creation`, the builder's settings and `build`;\n"
        "//! `bring_up`, the transitions to RTS; `recovery`, the state read from the device and\n"
        "//! `recover` after an error; `post_send`, the post guard.\n"
    ),
}

# What a later part brings, cut from the files until it comes.
_LATER = {
    # Bring-up and recovery.
    "pr3c-2": {
        "mod.rs": [
            (("// How it reaches RTS, and comes back after an error.\n",
              "pub use self::recovery::{DcRecovery, RecoverDcInitiatorError, RecoverDcInitiatorErrorKind};\n"), "", 1),
            ("    brought_up_with: Option<Arc<bring_up::BringUpAttributes>>,\n", "", 1),
        ],
        "creation.rs": [
            ("            brought_up_with: None,\n", "", 1),
        ],
    },
    # The reset of one DCI stream (mlx5dv_dci_stream_id_reset: an rdma-mummy-sys release first).
    "pr3e": {
        "mod.rs": [
            (("// The reset of one errored DCI stream.\n", "pub use self::stream_reset::{ResetDciStreamError, ResetDciStreamErrorKind};\n"),
             "", 1),
        ],
    },
}

_PARTS = ["pr3c-1", "pr3c-2", "pr3e"]

# What holds from a part on (once what it brings is there).
_SINCE = {}


def INITIATOR_REWRITES(name, part):
    """The rewrites of the DC initiator's file `name` (under src/mlx5/dc/initiator/) in `part`."""
    later = _PARTS[_PARTS.index(part) + 1:]
    rewrites = list(_THIS_CRATE.get(name, []))
    # The later parts' cuts first (the latest first: a part's rewrites read its own lines, which
    # an earlier part's cut would remove): some of the crate's lines they cut name this crate's types.
    for other in reversed(later):
        rewrites += _LATER[other].get(name, [])
    for since, files in _SINCE.items():
        if since not in later:
            rewrites += files.get(name, [])
    rewrites += _ALWAYS.get(name, [])
    if name == "mod.rs" and part != "pr3c-1":
        # This crate's guide is pr3c-1's; from bring-up on, the guide of 3c-2.
        rewrites.append((("//! Build one with [`DcInitiatorBuilder`]", "`post_send` the post guard.\n"),
                         _GUIDE["pr3c-2"], 1))
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
        _move("creation.rs", "pr3c-1"),
        _move("post_send.rs", "pr3c-1"),
    ],
    "2-dc-hello-example": [
        {
            # The example as a user of sideway writes it: sideway's inherent methods (no extension
            # traits) and its completion poller.
            "from": "examples/dc_hello.rs",
            "to": "examples/dc_hello.rs",
            "common": "user",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# The files of the moved folder that later parts take.
LEFT_OUT = {
    _INIT + "bring_up.rs": "the DC initiator's bring-up: pull request 3c-2",
    _INIT + "recovery.rs": "the DC initiator's recovery: pull request 3c-2",
    _INIT + "stream_reset.rs": "the reset of one DCI stream: pull request 3e",
}

# What a moved file, or a line a diff adds, must not say: this crate's names and glue, and the DC
# words of the later parts (3c-2: bring-up and recovery; 3d: posting; 3e: stream reset, example).
FORBIDDEN = GLUE + ["setup_protection_domain", "library::", "library.rs", "DcVerbs", "QueuePairCore", "TransitionTable", "modelled",
                    "SharedReceiveQueuePair", "extension::",
                    "DcInitiatorBringUp", "BringUpAttributes", "DcRecovery", "recover`", "query_state",
                    "wait_for_error", "bring_up", "PortNotReady", "test_support",
                    "reset_stream", "stream_reset", "dc_selftest", "WorkCompletion::default",
                    "PathMtus", "ReadResponsesTooLarge", "planned_max_send_wr", "PlanDcInitiator", "SendQueueTooLarge", "destination_path_mtu", "set_path_mtus", "with_path_mtu"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (2000, 30)

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_initiator"], "examples": ["dc_hello"],
            "counters": {"DC targets created": 1, "DC initiators created": 1, "requests": 2}}
