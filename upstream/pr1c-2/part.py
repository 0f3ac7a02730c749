# Pull request 1c-2: the post guard with the RC transport, and the provider-entry check. Read by
# scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-post-send-guard"]

_GUARD = "src/ibverbs/post_send_guard/"


def _move(name, rewrites=()):
    return {"from": _GUARD + name, "to": _GUARD + name, "helpers": [], "rewrites": list(rewrites)}


# The files that move, per commit (see MOVES in scripts/upstream-pr): the whole guard but UD's
# file (pull request 1c-3).
MOVES = {
    "1-post-send-guard": [
        _move("mod.rs", [
            ("the destination (`setup_ud_addr`, or DC's address step in the `mlx5` module)",
             "the destination (added with those transports)", 1),
            ("(transport: the trait, RC; unreliable_datagram: UD and its destination step)",
             "(transport: the trait, RC)", 1),
            ("provider table that records its calls (recording) and a transport of another module's\n// (external_transport).",
             "provider table that records its calls (recording).", 1),
            ("#[cfg(test)]\nmod external_transport;\n", "", 1),
            ("mod unreliable_datagram;\n", "", 1),
            ("pub use unreliable_datagram::{DatagramAddress, UnreliableDatagram, UnreliableDatagramDestination};\n",
             "", 1),
        ]),
        _move("guard.rs", [
            ("use sideway_ext::ibverbs::", "use sideway::ibverbs::", 1),
            # The doctest is a user of sideway: COMMON made its path the crate's.
            ("# use crate::ibverbs::queue_pair::", "# use sideway::ibverbs::queue_pair::", 1),
            ("The queue pairs of this crate call it from their `start_post_send`.",
             "[`ExtendedQueuePair::start_post_send_as`](crate::ibverbs::queue_pair::ExtendedQueuePair::start_post_send_as)\n"
             "    /// calls it on the queue pairs sideway creates.", 1),
            ("\n    /// The queue pairs of this crate call it from their `post_send_one`.", "", 1),
        ]),
        _move("request.rs", [
            ("[`WorkCompletion::imm_data`](crate::ibverbs::work_completion::WorkCompletion::imm_data) (or\n"
             "    /// sideway's) gives back",
             "[`GenericWorkCompletion::imm_data`](crate::ibverbs::completion::GenericWorkCompletion::imm_data)\n"
             "    /// gives back", 1),
            ("`ib_mlx5dv_md.c`;\n    /// `mlx5_devinfo --dc-selftest` reports it).", "`ib_mlx5dv_md.c`).", 1),
        ]),
        _move("data.rs"),
        _move("error.rs", [
            ("crate::ibverbs::queue_pair::SharedReceiveQueuePairBuilder::setup_send_ops_flags",
             "crate::ibverbs::queue_pair::QueuePairBuilder::setup_send_ops_flags", 1),
        ]),
        _move("operation.rs"),
        _move("provider_entries.rs", [
            ("the DC setters that\n    /// [`DcContext::entries`](crate::mlx5::dc::initiator::DcContext::entries) reads, or a",
             "the DC setters of the\n    /// mlx5 module, or a", 1),
        ]),
        _move("transport.rs", [
            # The queue-pair type a transport posts on: ExtendedQueuePair::start_post_send_as checks it.
            ("pub trait Transport: sealed::Sealed + Sized {\n",
             "pub trait Transport: sealed::Sealed + Sized {\n"
             "    /// The type of the queue pairs whose requests it posts, checked by\n"
             "    /// [`ExtendedQueuePair::start_post_send_as`](crate::ibverbs::queue_pair::ExtendedQueuePair::start_post_send_as).\n"
             "    const QP_TYPE: QueuePairType;\n", 1),
            ("    type Context = ();\n",
             "    const QP_TYPE: QueuePairType = QueuePairType::ReliableConnection;\n    type Context = ();\n", 1),
            ("use super::{sealed, LocalBufferHandle, Operation, PendingRequest};\n",
             "use super::{sealed, LocalBufferHandle, Operation, PendingRequest};\n"
             "use crate::ibverbs::queue_pair::QueuePairType;\n", 1),
        ]),
        _move("recording.rs"),
    ],
}

# The files of the moved folder that a later part takes.
LEFT_OUT = {
    _GUARD + "external_transport.rs": "the test of a transport of another module's (DC's): pull request 3d",
}

# What a moved file, or a line a diff adds, must not say: this crate's names, DC's data plane,
# and UD's transport (pull request 1c-3).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["UnreliableDatagramDestination", "DatagramAddress", "setup_ud_addr",
                                    "unreliable_datagram", "address_handle", "test_support"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1600, 100)

# Its unit tests (a recording provider table, no device): run on the host.
HOST_TESTS = [
    "ibverbs::post_send_guard::",
]
