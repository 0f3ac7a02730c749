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
    ("; with the `serde` feature it\n//! serializes)", "; it serializes with serde)", 1),
    ("/// With the `serde` feature it is `Serialize` and `Deserialize`:", "/// It is `Serialize` and `Deserialize`:", 1),
]

# The files that move, per commit (see MOVES in scripts/upstream-pr). src/mlx5/dc/mod.rs is
# written for upstream (files/), with only what this part brings.
MOVES = {
    "1-dc-endpoints": [
        {
            "from": "src/mlx5/dc/endpoint.rs",
            "to": "src/mlx5/dc/endpoint.rs",
            "helpers": [],
            "rewrites": UNGATED + [
                ("//! use sideway_ext::mlx5::", "//! use sideway::mlx5::", 1),
                ("//! use crate::ibverbs::", "//! use sideway::ibverbs::", 1),
                ("use crate::ibverbs::extension::ProtectionDomainExt;\n", "", 1),
                ("[`DeviceContextExt::source_gid`](crate::ibverbs::extension::DeviceContextExt::source_gid)",
                 "[`DeviceContext::source_gid`](crate::ibverbs::device_context::DeviceContext::source_gid)", 1),
                # The DC target and initiator come with the next parts (3b-2, 3c).
                ("([`DcTarget::endpoint`](super::target::DcTarget::endpoint) sets the one it was brought up\n"
                 "    /// with)", "(a DC target's endpoint sets the one it was brought up with)", 1),
                ("\n    /// [`DcInitiatorBringUp::setup_destination_path_mtu`](super::initiator::DcInitiatorBringUp::setup_destination_path_mtu)\n"
                 "    /// takes it into account, and a pool refuses a destination whose MTU is below its\n"
                 "    /// initiators'.", "", 1),
            ],
        },
        {
            "from": "src/mlx5/dc/service_class.rs",
            "to": "src/mlx5/dc/service_class.rs",
            "helpers": [],
            "rewrites": [
                ("/// use sideway_ext::mlx5::", "/// use sideway::mlx5::", 1),
                ("(the\n/// requests), to a DC target's RTR address vector with\n"
                 "/// [`DcTargetBringUp::setup_service_class`](super::target::DcTargetBringUp::setup_service_class)\n"
                 "/// (its ACKs, read responses and atomic responses) and to a pool's address handles with\n"
                 "/// `DcInitiatorPoolBuilder::setup_service_class` (sideway-ext-dc-pool).",
                 "(the\n/// requests) and, with the DC target, to its RTR address vector (its ACKs, read responses and\n"
                 "/// atomic responses).", 1),
                (", this crate's path,", ",", 1),
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
    "src/mlx5/dc/target/bring_up.rs": "the DC target's bring-up: pull request 3b-2",
    "src/mlx5/dc/initiator/mod.rs": "the DC initiator: pull requests 3c-1, 3c-2",
    "src/mlx5/dc/initiator/creation.rs": "the DC initiator's creation: pull request 3c-1",
    "src/mlx5/dc/initiator/plan.rs": "the DC initiator's planning: pull request 3c-1",
    "src/mlx5/dc/initiator/bring_up.rs": "the DC initiator's bring-up and recovery: pull request 3c-2",
    "src/mlx5/dc/initiator/transport.rs": "DC posting: pull request 3d",
    "src/mlx5/dc/initiator/addressed.rs": "DC posting: pull request 3d",
    "src/mlx5/dc/initiator/route.rs": "DC posting: pull request 3d",
    "src/mlx5/dc/initiator/send.rs": "DC posting: pull request 3d",
    "src/mlx5/dc/model/mod.rs": "stays here: this crate's unit-test model of mlx5_ib and libmlx5",
    "src/mlx5/dc/model/tests.rs": "stays here: the model's tests",
}

# What a moved file, or a line a diff adds, must not say: the later DC parts' names.
FORBIDDEN = GLUE + ["DcInitiator", "DcTarget", "plan_dci", "DciStreams", "DcPoolPolicy", "setup_dc_addr",
                    "DcRoute", "DcSend", "reset_stream", "state_table", "SharedReceiveQueuePair", "extension::",
                    "library::", "dc_selftest", "feature = \"serde\""]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (850, 10)
