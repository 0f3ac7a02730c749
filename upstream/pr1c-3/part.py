# Pull request 1c-3: the UD transport of the post guard, `setup_qkey`, and the old extended guard
# deprecated. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-unreliable-datagram"]

_GUARD = "src/ibverbs/post_send_guard/"

# The files that move, per commit (see MOVES in scripts/upstream-pr): UD's transport, and the
# guard's mod.rs again (pull request 1c-2 moved it without UD), now with its UD lines.
MOVES = {
    "1-unreliable-datagram": [
        {
            "from": _GUARD + "mod.rs",
            "to": _GUARD + "mod.rs",
            "helpers": [],
            "rewrites": [
                # As pull request 1c-2 moved it: the path MTUs an RDMA READ is held to stay this crate's.
                (", the path MTUs of a\n// request's two ends (path_mtus).", ".", 1),
                ("mod path_mtus;\n", "", 1),
                ("pub(crate) use path_mtus::mtu_bytes;\npub use path_mtus::PathMtus;\n", "", 1),
            ],
        },
        {
            "from": _GUARD + "unreliable_datagram.rs",
            "to": _GUARD + "unreliable_datagram.rs",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# What a moved file, or a line a diff adds, must not say: this crate's names and DC's data plane
# (DC's destination step is pull request 3d).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["test_support", "setup_dc_addr"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (500, 150)

# Its unit tests (the attribute's Q_Key; no device): on the host.
HOST_TESTS = [
    "ibverbs::queue_pair::tests::test_qkey_and_mask",
]
