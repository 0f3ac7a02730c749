# Pull request 1c-1: address handles. Read by scripts/upstream-pr (see upstream/README.md).
#
# The address handle's file moves again with 1c-1b, the source GID of an address, with what only
# that part can say (ADDRESS_HANDLE_REWRITES, which upstream/pr1c-1b/part.py reads): that part's
# commit is the difference.

# Its commits, in order: the folders beside this file.
COMMITS = ["1-address-handles"]

# What 1c-1b brings to the address handle's file, cut here: the source GID (the doctest's
# ctx.source_gid, its mention in the module docs and in an error), and whether a port requires a
# GRH, which only the source GID reads.
_SOURCE_GID = [
    ("`setup_grh_*` methods, its source GID index from a\n//! [`SourceGid`](super::source_gid::SourceGid). The kernel",
     "`setup_grh_*` methods, its source GID index from the port's GID table\n"
     "//! (`DeviceContext::query_gid_table`). The kernel", 1),
    ("//! use sideway_ext::ibverbs::source_gid::SourceGid;\n", "", 1),
    ("//! use sideway_ext::ibverbs::address::AddressHandleAttribute;\n",
     "//! use sideway_ext::ibverbs::address::{AddressHandleAttribute, GidType};\n", 1),
    ("//!     // On RoCE, send from the port's RoCE v2 GID; on InfiniBand the LID is the address.\n"
     "//!     if let Some(local) = ctx.source_gid(1, &SourceGid::Automatic)? {\n"
     "//!         attr.setup_grh_src_gid_index(local.index())\n",
     "//!     // On RoCE, send from the port's RoCE v2 GID with an IPv4 address (a router forwards its\n"
     "//!     // packets); on InfiniBand the LID is the address.\n"
     "//!     let table = ctx.query_gid_table()?;\n"
     "//!     let routable = table.iter().find(|e| {\n"
     "//!         let ipv4 = std::net::Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some();\n"
     "//!         e.port_num() == 1 && e.gid_type() == GidType::RoceV2 && ipv4\n"
     "//!     });\n"
     "//!     if let Some(local) = routable {\n"
     "//!         attr.setup_grh_src_gid_index(local.gid_index() as u8)\n", 1),
    (" (SourceGid::Automatic picks one where the port has it)", "", 2),
    (("    /// Whether every address from the port must be global (carry a GRH).\n", "    }\n\n"), "", 1),
    ("        assert!(grh_required.requires_grh() && !grh_required.is_roce());\n",
     "        assert!(!grh_required.is_roce());\n", 1),
    ("        assert!(!plain.requires_grh() && plain.check_global(1, false).is_ok());\n",
     "        assert!(plain.check_global(1, false).is_ok());\n", 1),
    ("        assert!(roce.is_roce() && roce.requires_grh());\n", "        assert!(roce.is_roce());\n", 1),
]


# What 3d-2 (DC READs held to path MTUs) brings to the address handle's file, cut before it: the path MTU of the
# port a handle reaches, which a DC endpoint's handle carries to the DC initiator's READs.
_DESTINATION_PATH_MTU = [
    ("use crate::ibverbs::device_context::Mtu;\n", "", 1),
    ("    destination_path_mtu: Option<Mtu>,\n", "", 1),
    ("            destination_path_mtu: None,\n", "", 1),
    (("    /// The same handle, reaching a port whose path MTU", "        self\n    }\n\n"), "", 1),
    (("\n    /// The path MTU of the port the handle reaches", "        self.destination_path_mtu\n    }\n"), "", 1),
]


def ADDRESS_HANDLE_REWRITES(part):
    """The rewrites of src/ibverbs/address_handle.rs in `part` (pr1c-1, pr1c-1b or pr3d-2)."""
    first = part == "pr1c-1"
    return (_SOURCE_GID if first else []) + (_DESTINATION_PATH_MTU if part != "pr3d-2" else []) + [
        # The doctest is a user of sideway, whose inherent methods stand for the Ext traits.
        ("//! use sideway_ext::ibverbs::extension::{DeviceContextExt, ProtectionDomainExt};\n", "", 1),
        ("//! use crate::ibverbs::", "//! use sideway::ibverbs::", 1),
        ("//! use sideway_ext::ibverbs::", "//! use sideway::ibverbs::", 2 if first else 3),
    ]


# The files that move, per commit (see MOVES in scripts/upstream-pr). This crate's
# AddressHandleAttribute (src/ibverbs/address.rs) does not move: it is sideway's with what it
# lacks, which 1-address-handles/address.diff adds to sideway's own. The attribute from a work
# completion (src/ibverbs/address_from_work_completion.rs) stays here with this crate's
# WorkCompletion; the source GID (src/ibverbs/source_gid.rs) comes with 1c-1b; gid_as_ipv6.rs
# with the first endpoint that serializes a GID (3b-1).
MOVES = {
    "1-address-handles": [
        {
            "from": "src/ibverbs/address_handle.rs",
            "to": "src/ibverbs/address_handle.rs",
            "helpers": [],
            "rewrites": ADDRESS_HANDLE_REWRITES("pr1c-1"),
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

# The unit tests of the handle and of the attribute it extends: no device, so they run on the host.
HOST_TESTS = [
    "ibverbs::address_handle::tests",
    "ibverbs::address::tests",
]
