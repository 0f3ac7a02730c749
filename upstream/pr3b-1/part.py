# Pull request 3b-1: DC endpoints and their class of service. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-dc-endpoints"]

# The serde attributes of the endpoint, without this crate's `serde` feature: sideway depends on
# serde unconditionally (a `cfg(feature = "serde")` is an unexpected_cfgs error there).
UNGATED = [
    ("#[cfg_attr(feature = \"serde\", derive(serde::Serialize))]", "#[derive(serde::Serialize)]", 1),
    ("#[cfg_attr(feature = \"serde\", serde(with = \"crate::ibverbs::gid_as_ipv6\"))]",
     "#[serde(with = \"crate::ibverbs::gid_as_ipv6\")]", 1),
    ("#[cfg_attr(\n        feature = \"serde\",\n        serde(with = \"mtu_as_bytes\", skip_serializing_if = \"Option::is_none\")\n    )]",
     "#[serde(with = \"mtu_as_bytes\", skip_serializing_if = \"Option::is_none\")]", 1),
    ("#[cfg(feature = \"serde\")]\n#[cfg_attr(docsrs, doc(cfg(feature = \"serde\")))]\n", "", 1),
    ("#[cfg(feature = \"serde\")]\nmod mtu_as_bytes", "mod mtu_as_bytes", 1),
    ("#[cfg(all(test, feature = \"serde\"))]", "#[cfg(test)]", 1),
    ("; with the `serde` feature it\n//! serializes)", "; it serializes\n//! with serde)", 1),
    ("/// With the `serde` feature it is `Serialize` and `Deserialize`:", "/// It is `Serialize` and `Deserialize`:", 1),
]

# What 3b-2 brings to the endpoint's file, cut here: an InfiniBand port that requires a GRH
# (IBV_QPF_GRH_REQUIRED), from which the endpoint's address is global, or refused where the
# endpoint has no GID (its DC target, 3b-2, was brought up without one).
_GRH_REQUIRED = [
    (("    /// The local InfiniBand port requires a GRH", "    GidRequired {\n        /// The local port.\n"
      "        port: u8,\n    },\n"), "", 1),
    (" (global from an\n"
     "    /// InfiniBand port that requires a GRH, `IBV_QPF_GRH_REQUIRED`, where the kernel refuses any\n"
     "    /// other). Cache it: one per destination, alive until its requests complete.",
     ". Cache it: one per\n    /// destination, alive until its requests complete.", 1),
    ("    /// - [`GidRequired`](CreateDcAddressHandleErrorKind::GidRequired): the local port requires a\n"
     "    ///   GRH and the endpoint has no GID.\n", "", 1),
    (("        match addressing {\n            PortAddressing::InfiniBandGrhRequired if", "        }\n"),
     "        Ok(self.address_handle_attribute(port, src_gid_index))\n", 1),
    (("    #[test]\n    fn from_an_infiniband_port_that_requires_a_grh_the_address_is_global()", "    }\n\n"), "", 1),
]


# What the target's path MTU means for READs (a DC target answers them in packets of its own
# path MTU), cut from 3b-1: it comes with the DC target (3b-2).
_TARGET_MTU_DOCS = [
    (("//! The endpoint carries the target's path MTU", "carries the MTU to the post).\n//!\n"), "", 1),
    (("    /// The target's path MTU: the largest packets its port takes, and those",
      "the MTU is unknown and nothing is refused for it.\n"),
     "    /// The target's path MTU: the largest packets its port takes (a DC target's endpoint sets\n"
     "    /// the one it was brought up with). A DC initiator must send no larger ones: on nodes at 1500\n"
     "    /// and 9000 bytes of Ethernet MTU, 4096-byte packets to the 1500 node are dropped and end in\n"
     "    /// `RETRY_EXC`.\n", 1),
]

# The module's paragraph on the path MTU, from 3b-2 on: without this crate's DC guide's section
# and its pool (which refuses the READs whose responses would be dropped).
_MTU_PARAGRAPH = (
    "//! The endpoint carries the target's path MTU ([`DcEndpoint::path_mtu`]), for the fleet rule:\n"
    "//! every DC initiator and target brought up with one path MTU, the smallest of their ports'. An\n"
    "//! initiator sends at its own MTU and a target answers READs at its own: where they differ, the\n"
    "//! larger packets are dropped.\n"
)


def _paragraph(text):
    return [(("//! The endpoint carries the target's path MTU", "carries the MTU to the post).\n"), text, 1)]


# The same docs from 3b-2 on: without this crate's pool.
_MTU_DOCS = [
    ("([`DcTarget::endpoint`](super::target::DcTarget::endpoint) sets the one it was brought up\n"
     "    /// with); the fleet rule is [the DC module's](super#across-nodes).",
     "(a DC target's endpoint sets the one it was brought up\n"
     "    /// with): a DC initiator must send no larger packets, and one at a smaller MTU drops the\n"
     "    /// responses of a READ longer than its own.", 1),
]

# What stays this crate's, cut from the endpoint's file: the address handle carries the endpoint's
# path MTU, to which this crate's DC pool holds its READs (ReadResponsesTooLarge).
_READ_MTU_DOCS = [
    ("the MTU is unknown and nothing is refused for it.", "the MTU is unknown.", 1),
]
_READ_MTU = [
    (" The handle\n    /// carries the [`path_mtu`](Self::path_mtu) a DC initiator holds its READs to.\n", "\n", 1),
    ("        let ah = AddressHandle::new(pd, &attr).map_err(CreateDcAddressHandleErrorKind::from)?;\n"
     "        Ok(Arc::new(ah.with_destination_path_mtu(self.path_mtu)))\n",
     "        let ah = pd.create_ah(&attr).map_err(CreateDcAddressHandleErrorKind::from)?;\n        Ok(ah)\n", 1),
]



def _mtu_rewrites(part):
    if part == "pr3b-1":
        return _TARGET_MTU_DOCS + _READ_MTU
    return _paragraph(_MTU_PARAGRAPH) + _MTU_DOCS + _READ_MTU_DOCS + _READ_MTU


def ENDPOINT_REWRITES(part):
    """The rewrites of src/mlx5/dc/endpoint.rs in `part` (pr3b-1 or pr3b-2)."""
    return UNGATED + _mtu_rewrites(part) + [
        # The example takes its source GID index from the device context: the DC
        # initiator, whose bring-up resolves it, comes with 3c.
        (("//! use crate::ibverbs::protection_domain::ProtectionDomain;\n",
          "//! use sideway_ext::mlx5::dc::initiator::DcInitiator;\n"),
         "//! use sideway::ibverbs::address_handle::AddressHandle;\n"
         "//! use sideway::ibverbs::device_context::DeviceContext;\n"
         "//! use sideway::ibverbs::protection_domain::ProtectionDomain;\n"
         "//! use sideway::ibverbs::source_gid::SourceGid;\n"
         "//! use sideway::mlx5::dc::endpoint::DcEndpoint;\n", 1),
        ("/// The address handle that reaches the peer's DC target from `dci`, brought up on `port`.",
         "/// The address handle that reaches the peer's DC target from local `port` of `ctx`.", 1),
        ("pd: &Arc<ProtectionDomain>, dci: &DcInitiator, port: u8,",
         "ctx: &DeviceContext, pd: &Arc<ProtectionDomain>, port: u8,", 1),
        ("from the GID the initiator sends from:", "from the GID a DC initiator sends from:", 1),
        ("//!     let src_gid_index = dci.source_gid().map_or(0, |entry| entry.index());\n",
         "//!     let local = ctx.source_gid(port, &SourceGid::Automatic)?;\n"
         "//!     let src_gid_index = local.map_or(0, |entry| entry.index());\n", 1),
] + (_GRH_REQUIRED if part == "pr3b-1" else [])


# The files that move, per commit (see MOVES in scripts/upstream-pr). src/mlx5/dc/mod.rs is
# written for upstream (files/), with only what this part brings.
MOVES = {
    "1-dc-endpoints": [
        {
            "from": "src/mlx5/dc/endpoint.rs",
            "to": "src/mlx5/dc/endpoint.rs",
            "helpers": [],
            "rewrites": ENDPOINT_REWRITES("pr3b-1"),
        },
        {
            "from": "src/mlx5/dc/service_class.rs",
            "to": "src/mlx5/dc/service_class.rs",
            "helpers": [],
            "rewrites": [
                ("/// use sideway_ext::mlx5::", "/// use sideway::mlx5::", 1),
            ],
        },
        {
            # A GID as IPv6 text in serde, for the endpoints peers exchange (DC's here, RC's with
            # the bring-up of 1c-3).
            "from": "src/ibverbs/gid_as_ipv6.rs",
            "to": "src/ibverbs/gid_as_ipv6.rs",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# The rest of src/mlx5/dc/: the parts that take them.
LEFT_OUT = {
    "src/mlx5/dc/mod.rs": "written for upstream: upstream/pr3b-1/1-dc-endpoints/files/src/mlx5/dc/mod.rs, "
                          "each later part adds its modules",
    "src/mlx5/dc/state_table.rs": "the DC transition tables: pull request 3b-2, with the target",
    "src/mlx5/dc/target.rs": "the DC target: pull request 3b-2",
    "src/mlx5/dc/target_bring_up.rs": "the DC target's bring-up and endpoint: pull request 3b-2",
    "src/mlx5/dc/initiator/mod.rs": "the DC initiator: pull requests 3c-1, 3c-2",
    "src/mlx5/dc/initiator/creation.rs": "the DC initiator's creation: pull request 3c-1",
    "src/mlx5/dc/initiator/plan.rs": "the DC initiator's planning: pull request 3c-1",
    "src/mlx5/dc/initiator/bring_up.rs": "the DC initiator's bring-up and recovery: pull request 3c-2",
    "src/mlx5/dc/initiator/post_send.rs": "DC posting: pull request 3d",
}

# What a moved file, or a line a diff adds, must not say: the later DC parts' names.
FORBIDDEN = GLUE + ["DcInitiator", "DcTarget", "plan_dci", "DciStreams", "DcPoolPolicy", "setup_dc_addr",
                    "reset_stream", "state_table", "SharedReceiveQueuePair", "extension::",
                    "library::", "dc_selftest", "feature = \"serde\""]

# The most it may change: lines, and lines of sideway's existing files.
# 850, and the endpoint's reading of later versions' fields, with its test; in sideway's files the
# address attribute's getters, traffic class, flow label and Debug (address.diff).
LIMITS = (910, 120)

# The address attribute's unit tests: no device, so they run on the host.
HOST_TESTS = [
    "ibverbs::address::tests",
]
