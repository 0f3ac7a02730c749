# Pull request 1c-2: the post guard with the RC transport, and the provider-entry check. Read by
# scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-post-send-guard"]

_GUARD = "src/ibverbs/post_send_guard/"

# The example of the raw `TypedPostSendGuard::start`, after COMMON.
START_EXAMPLE = """    ///
    /// ```no_run
    /// # use std::ptr::NonNull;
    /// # use crate::ibverbs::queue_pair::{SendOperationFlags, WorkRequestFlags, SetScatterGatherEntry};
    /// use sideway_ext::ibverbs::post_send_guard::{ProviderEntries, ReliableConnection, TypedPostSendGuard};
    /// # fn adopt(qp_ex: NonNull<rdma_mummy_sys::ibv_qp_ex>) -> Result<(), Box<dyn std::error::Error>> {
    /// // `qp_ex`: the extended view of an RC queue pair created elsewhere and in RTS.
    /// // SAFETY: the queue pair is alive and used by no one else while the guard lives.
    /// let entries = unsafe { ProviderEntries::new(qp_ex, SendOperationFlags::Send) }?;
    /// // SAFETY: as above; its provider filled `entries`.
    /// let mut guard = unsafe { TypedPostSendGuard::<ReliableConnection>::start(qp_ex, entries, ()) };
    /// // SAFETY: the buffer at 0x1000 is registered under lkey 7 and outlives the request.
    /// unsafe { guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send().setup_sge(7, 0x1000, 64) };
    /// guard.post()?;
    /// # Ok(()) }
    /// ```
"""

# The one-request post's line in the guard's mod.rs (pull requests 1c-2 and 1c-3).
ONE_REQUEST = [
    (", one-request posts on\n// a raw queue pair (one_request), the path MTUs of a request's two ends (path_mtus).",
     ".", 1),
    ("mod one_request;\n", "", 1),
]

# What pull request 3d-2 brings to the guard, cut here and in 1c-3: an RDMA READ held to the path
# MTUs of its two ends (path_mtus.rs, LEFT_OUT), which only a DC initiator and its target can
# differ in. The guard's data.rs, guard.rs and error.rs move again with 3d-2, each time
# with GUARD_REWRITES(name, part), so that 3d-2's commit is the difference; its mod.rs lines are
# 3d-2's post_send_guard_mod.diff.
PATH_MTUS_MOD = [
    ("mod path_mtus;\n", "", 1),
    ("pub(crate) use path_mtus::mtu_bytes;\npub use path_mtus::PathMtus;\n", "", 1),
]

_READ_MTUS = {
    "data.rs": [
        ("use super::{entry, Destination, Operation, PathMtus, PendingRequest};",
         "use super::{entry, Destination, Operation, PendingRequest};", 1),
        (" A READ is held to the batch's path MTUs\n"
         "    /// ([`TypedPostSendGuard::set_path_mtus`](super::TypedPostSendGuard::set_path_mtus)).\n", "\n", 1),
        (("    /// The same, for a transport whose requests are addressed one by one", "        true\n    }\n\n"), "", 1),
        ("(mut self, buf: &[u8]) {\n        if self.read_refused(|| buf.len() as u64) {\n            return;\n        }\n",
         "(self, buf: &[u8]) {\n", 1),
        ("(mut self, bufs: &[IoSlice<'_>]) {\n"
         "        if self.read_refused(|| bufs.iter().map(|buf| buf.len() as u64).sum()) {\n            return;\n        }\n",
         "(self, bufs: &[IoSlice<'_>]) {\n", 1),
        ("(mut self, lkey: u32, addr: u64, length: u32) {\n"
         "        if self.read_refused(|| u64::from(length)) {\n            return;\n        }\n",
         "(self, lkey: u32, addr: u64, length: u32) {\n", 1),
        ("(mut self, sg_list: &[ibv_sge]) {\n"
         "        if self.read_refused(|| sg_list.iter().map(|sge| u64::from(sge.length)).sum()) {\n"
         "            return;\n        }\n",
         "(self, sg_list: &[ibv_sge]) {\n", 1),
    ],
    "guard.rs": [
        ("use super::{PathMtus, ProviderEntries,", "use super::{ProviderEntries,", 1),
        (("    /// The path MTUs an RDMA READ is held to", "    refused_path_mtus: Option<PathMtus>,\n"), "", 1),
        (("    /// Its data has this length: inline data over", "    DataTooLong(usize),\n"),
         "    /// Its inline data has this length, over the granted size.\n    InlineDataTooLong(usize),\n", 1),
        ("reason: Refusal::DataTooLong(length),", "reason: Refusal::InlineDataTooLong(length),", 1),
        (("impl Batch {\n    /// Records an RDMA READ", "        batch_len,\n    }\n}\n\n"), "", 1),
        ("                path_mtus: None,\n                refused_path_mtus: None,\n", "", 1),
        (("    /// The path MTUs of the batch's two ends, for a guard", "        self.batch.path_mtus = path_mtus;\n    }\n\n"),
         "", 1),
        ("let (max_inline_data, refused_path_mtus) = (self.batch.max_inline_data, self.batch.refused_path_mtus);",
         "let max_inline_data = self.batch.max_inline_data;", 1),
        ("                Refusal::DataTooLong(length) => match refused_path_mtus {\n"
         "                    None => TypedPostSendErrorKind::InlineDataTooLong {\n"
         "                        index,\n"
         "                        wr_id,\n"
         "                        length,\n"
         "                        max_inline_data,\n"
         "                        batch_len,\n"
         "                    },\n"
         "                    Some(path_mtus) => read_refused(index, wr_id, length, path_mtus, batch_len),\n"
         "                },\n",
         "                Refusal::InlineDataTooLong(length) => TypedPostSendErrorKind::InlineDataTooLong {\n"
         "                    index,\n"
         "                    wr_id,\n"
         "                    length,\n"
         "                    max_inline_data,\n"
         "                    batch_len,\n"
         "                },\n", 1),
    ],
    "error.rs": [
        ("use std::io;\n\nuse crate::ibverbs::device_context::Mtu;\n", "use std::io;\n", 1),
        (("    /// An RDMA READ longer than the queue pair's path MTU", "        batch_len: usize,\n    },\n"), "", 1),
        ("            | Self::ReadResponsesTooLarge { batch_len, .. }\n", "", 1),
    ],
}

# What holds for every part.
_ALWAYS = {
    "guard.rs": [
        # The raw start stays public upstream: DC's batches addressed once (3d's BatchAddressed) are
        # started with it on a DC initiator's send views. The one-request post on a raw queue pair
        # (one_request.rs, LEFT_OUT) goes: sideway does not call it.
        ("on a queue pair this crate did not create: one created\n"
         "    /// through libibverbs directly, or a provider table of one's own (a counting table).\n",
         "on a queue pair's extended view: one created\n"
         "    /// through libibverbs directly, or a DC initiator's for a batch to one destination.\n"
         "    /// [`ExtendedQueuePair::start_post_send_as`](crate::ibverbs::queue_pair::ExtendedQueuePair::start_post_send_as)\n"
         "    /// calls it.\n",
         1),
        (START_EXAMPLE, START_EXAMPLE.replace("# use crate::ibverbs::", "# use sideway::ibverbs::")
         .replace("use sideway_ext::", "use sideway::"), 1),
    ],
}


def GUARD_REWRITES(name, part):
    """The rewrites of the guard's `name` (data.rs, guard.rs, error.rs) in `part` (pr1c-2, or pr3d-2)."""
    rewrites = _ALWAYS.get(name, []) + (_READ_MTUS.get(name, []) if part == "pr1c-2" else [])
    return rewrites


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
            ("mod unreliable_datagram;\n", "", 1),
            *ONE_REQUEST,
            ("    // Transports and operations are this crate's:", "    // Transports, operations and destinations are sideway's:", 1),
            # Destinations are sealed upstream, as transports are: every one is sideway's.
            ("provider entries rely on them. (Destinations are open, an unsafe trait: a destination only\n"
             "    // sets an address through entries the guard checks.) Visible crate-wide so that the mlx5\n"
             "    // module's DC transport can implement them.",
             "provider entries rely on them. Visible crate-wide so that the mlx5 module's DC transport can\n"
             "    // implement them.", 1),
            ("pub use unreliable_datagram::{DatagramAddress, UnreliableDatagram, UnreliableDatagramDestination};\n",
             "", 1),
            *PATH_MTUS_MOD,
        ]),
        _move("guard.rs", GUARD_REWRITES("guard.rs", "pr1c-2")),
        _move("request.rs"),
        _move("data.rs", GUARD_REWRITES("data.rs", "pr1c-2")),
        _move("error.rs", GUARD_REWRITES("error.rs", "pr1c-2")),
        _move("operation.rs"),
        # Upstream no destination comes from another crate: no first bit free for one; and no
        # entry outside `ibv_qp_ex` before DC's posting (pull request 3d) brings its setters.
        _move("provider_entries.rs", [
            ("    /// The first bit free for entries outside `ibv_qp_ex` (the mlx5 module's).\n"
             "    #[cfg_attr(not(feature = \"mlx5\"), allow(dead_code))]\n"
             "    pub const FIRST_EXTERNAL: u32 = 1 << 16;\n\n", "", 1),
            ("    /// The first bit free for the entries of a [`Destination`](super::Destination) of another\n"
             "    /// crate: below it, `ibv_qp_ex`'s entries and this crate's own outside it (mlx5's DC setters).\n"
             "    pub const FIRST_EXTERNAL_FREE: u32 = entry::FIRST_EXTERNAL << 2;\n\n", "", 1),
            ("the DC setters that\n    /// [`DcContext::entries`](crate::mlx5::dc::initiator::DcContext::entries) reads, or a\n"
             "    /// [`Destination`](super::Destination) of another crate's, from\n"
             "    /// [`FIRST_EXTERNAL_FREE`](Self::FIRST_EXTERNAL_FREE) up.",
             "the DC setters of the mlx5\n    /// module.", 1),
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
            # Destinations are sealed upstream, as transports are: every one is sideway's.
            ("/// Open, and `unsafe` to implement: a destination of one's own (e.g. for a provider table of\n"
             "/// one's own) names in `ENTRY` the entries its `set` calls, each\n"
             "/// [`ProviderEntries::FIRST_EXTERNAL_FREE`](super::ProviderEntries::FIRST_EXTERNAL_FREE) or above\n"
             "/// when it lies outside `ibv_qp_ex` and is not one of this crate's; the guard refuses the request\n"
             "/// before the provider when the queue pair's entries lack one.",
             "/// Sealed, and `unsafe` to implement: a destination names in `ENTRY` the entries its `set`\n"
             "/// calls; the guard refuses the request before the provider when the queue pair's entries lack\n"
             "/// one.", 1),
            ("pub unsafe trait Destination: Copy {", "pub unsafe trait Destination: sealed::Sealed + Copy {", 1),
            ("use super::{sealed, Operation, PendingRequest, TypedLocalBufferHandle};\n",
             "use super::{sealed, Operation, PendingRequest, TypedLocalBufferHandle};\n"
             "use crate::ibverbs::queue_pair::QueuePairType;\n", 1),
        ]),
    ],
}

# The files of the moved folder that a later part takes.
LEFT_OUT = {
    _GUARD + "one_request.rs": "the one-request post on a raw queue pair: sideway has no caller (its start is crate-private)",
    _GUARD + "path_mtus.rs": "the path MTUs an RDMA READ is held to, which only DC's two ends can differ in: "
                             "pull request 3d-2",
}

# What a moved file, or a line a diff adds, must not say: this crate's names, DC's data plane,
# and UD's transport (pull request 1c-3).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["UnreliableDatagramDestination", "DatagramAddress", "setup_ud_addr",
                                    "unreliable_datagram", "address_handle", "test_support"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1600, 100)

# Its unit tests (the provider entries read from a table, no device): run on the host.
HOST_TESTS = [
    "ibverbs::post_send_guard::",
]
