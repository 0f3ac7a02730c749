# Pull request 1c-1: address handles and source GIDs. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-address-handles"]

# The files that move, per commit (see MOVES in scripts/upstream-pr). This crate's
# AddressHandleAttribute (src/ibverbs/address.rs) does not move: it is sideway's with what it
# lacks, which 1-address-handles/address.diff adds to sideway's own. The attribute from a work
# completion (src/ibverbs/address_from_work_completion.rs) stays here with this crate's
# WorkCompletion; gid_as_ipv6.rs goes with the first endpoint that serializes a GID (3b-1).
MOVES = {
    "1-address-handles": [
        {
            "from": "src/ibverbs/address_handle.rs",
            "to": "src/ibverbs/address_handle.rs",
            "helpers": [],
            "rewrites": [
                # The doctest is a user of sideway, whose inherent methods stand for the Ext traits.
                ("//! use sideway_ext::ibverbs::extension::{DeviceContextExt, ProtectionDomainExt};\n", "", 1),
                ("//! use crate::ibverbs::", "//! use sideway::ibverbs::", 1),
                ("//! use sideway_ext::ibverbs::", "//! use sideway::ibverbs::", 3),
                ("ProtectionDomainExt::create_ah`](super::extension::ProtectionDomainExt::create_ah)",
                 "ProtectionDomain::create_ah`](super::protection_domain::ProtectionDomain::create_ah)", 2),
            ],
        },
        {
            "from": "src/ibverbs/source_gid.rs",
            "to": "src/ibverbs/source_gid.rs",
            "helpers": [],
            "rewrites": [
                ("[`DeviceContextExt::source_gid`](super::extension::DeviceContextExt::source_gid)",
                 "[`DeviceContext::source_gid`](super::device_context::DeviceContext::source_gid)", 1),
                (" (libibverbs), anything for a unit test's model.", ".", 1),
            ],
        },
    ],
}

# The helpers of src/ibverbs/mod.rs that moved files of this and later parts call.
SHARED = {
    "1-address-handles": [("query_port", [(" The one port query of the crate.", "", 1)])],
}

# What a moved file, or a line a diff adds, must not say: no DC yet (3b-1 brings the endpoint).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["address_from_work_completion", "from_work_completion", "WorkCompletion",
                                    "gid_as_ipv6"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1050, 200)

# Its unit tests, and those of the attribute it extends: no device, so they run on the host.
HOST_TESTS = [
    "ibverbs::source_gid::tests",
    "ibverbs::address::tests",
]
