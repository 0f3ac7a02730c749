# Pull request 3b-1: DC endpoints and their class of service. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-dc-endpoints"]


def ENDPOINT_REWRITES(part):
    """The rewrites of src/mlx5/dc/endpoint.rs."""
    return []


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
            "rewrites": [],
        },
        {
            # A GID as IPv6 text in serde, for the endpoints peers exchange (DC's here, RC's with
            # the bring-up of 1c-3).
            "from": "src/ibverbs/gid_as_ipv6.rs",
            "to": "src/ibverbs/gid_as_ipv6.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            # The DC target's bring-up in one call and its endpoint, beside it on its public API.
            "from": "src/mlx5/dc/target_bring_up.rs",
            "to": "src/mlx5/dc/target_bring_up.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            # Included by target_bring_up.rs as its documentation.
            "from": "src/mlx5/dc/target_wrong_key.md",
            "to": "src/mlx5/dc/target_wrong_key.md",
            "common": False,
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# The rest of src/mlx5/dc/: the parts that take them.

# What a moved file, or a line a diff adds, must not say: this crate's names, stream reset (3e).
FORBIDDEN = GLUE + ["plan_dci", "DcPoolPolicy", "reset_stream", "SharedReceiveQueuePair", "extension::",
                    "library::", "dc_selftest", "feature = \"serde\""]

# The most it may change: lines, and lines of sideway's existing files.
# 850, and the endpoint's reading of later versions' fields, with its test; in sideway's files the
# address attribute's getters, traffic class, flow label and Debug (address.diff).
LIMITS = (1300, 120)
