# Pull request 1c-2: the post guard with the RC transport, and the provider-entry check. Read by
# scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-post-send-guard"]

_GUARD = "src/ibverbs/post_send_guard/"


# The path MTUs' line in the guard's mod.rs (pull requests 1c-2 and 1c-3).
PATH_MTUS_LINE = [
    (", the path MTUs of a\n// request's two ends (path_mtus).", ".", 1),
]

# What stays this crate's, cut here and in 1c-3: the path MTUs an RDMA READ is held to
# (path_mtus.rs, STAYS), which only DC's two ends can differ in, and the refusal this crate's DC
# pool reports with them.
PATH_MTUS_MOD = [
    ("mod path_mtus;\n", "", 1),
    ("pub(crate) use path_mtus::mtu_bytes;\npub use path_mtus::PathMtus;\n", "", 1),
]

_READ_MTUS = {
    "error.rs": [
        ("use std::io;\n\nuse crate::ibverbs::device_context::Mtu;\n", "use std::io;\n", 1),
        (("    /// An RDMA READ longer than the queue pair's path MTU", "        batch_len: usize,\n    },\n"), "", 1),
        ("            | Self::ReadResponsesTooLarge { batch_len, .. }\n", "", 1),
    ],
}

_ALWAYS = {}


def GUARD_REWRITES(name, part):
    """The rewrites of the guard's `name` (data.rs, guard.rs, error.rs) in `part` (pr1c-2)."""
    rewrites = _ALWAYS.get(name, []) + (_READ_MTUS.get(name, []) if part == "pr1c-2" else [])
    return rewrites


def _move(name, rewrites=()):
    return {"from": _GUARD + name, "to": _GUARD + name, "helpers": [], "rewrites": list(rewrites)}


# The files that move, per commit (see MOVES in scripts/upstream-pr): the whole guard, RC and UD.
MOVES = {
    "1-post-send-guard": [
        _move("mod.rs", [
            *PATH_MTUS_LINE,
            *PATH_MTUS_MOD,
        ]),
        _move("guard.rs", GUARD_REWRITES("guard.rs", "pr1c-2")),
        _move("request.rs"),
        _move("data.rs", GUARD_REWRITES("data.rs", "pr1c-2")),
        _move("error.rs", GUARD_REWRITES("error.rs", "pr1c-2")),
        _move("operation.rs"),
        _move("provider_entries.rs"),
        _move("transport.rs"),
        _move("unreliable_datagram.rs"),
    ],
}


# What a moved file, or a line a diff adds, must not say: this crate's names, DC's data plane.
FORBIDDEN = GLUE + DC_DATA_PLANE + ["test_support"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1600, 100)

# Its unit tests (the provider entries read from a table, no device): run on the host.
HOST_TESTS = [
    "ibverbs::post_send_guard::",
]
