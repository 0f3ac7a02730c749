# Pull request 1c-1: address handles. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-address-handles"]

# The files that move, per commit (see MOVES in scripts/upstream-pr). This crate's
# AddressHandleAttribute (src/ibverbs/address.rs) does not move: it has sideway's crate-private
# field, which the handle reads, so sideway's own needs nothing. The attribute from a work
# completion (src/ibverbs/address_from_work_completion.rs) stays here with this crate's
# WorkCompletion; the source GID (src/ibverbs/source_gid.rs) comes with 1c-1b; gid_as_ipv6.rs
# with the first endpoint that serializes a GID (3b-1).
MOVES = {
    "1-address-handles": [
        {
            "from": "src/ibverbs/address_handle.rs",
            "to": "src/ibverbs/address_handle.rs",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# The helpers of src/ibverbs/mod.rs that moved files of this and later parts call.
SHARED = {
    "1-address-handles": [("query_port", [])],
}

# What a moved file, or a line a diff adds, must not say: no DC yet (3b-1 brings the endpoint),
# no source GID yet (1c-1b).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["address_from_work_completion", "from_work_completion", "WorkCompletion",
                                    "gid_as_ipv6", "source_gid", "SourceGid", "DC pool"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1050, 200)

# The unit tests of the handle: no device, so they run on the host.
HOST_TESTS = [
    "ibverbs::address_handle::tests",
]
