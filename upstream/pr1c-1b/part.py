# Pull request 1c-1b: the source GID of an address. Read by scripts/upstream-pr (see
# upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-source-gids"]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-source-gids": [
        {
            "from": "src/ibverbs/source_gid.rs",
            "to": "src/ibverbs/source_gid.rs",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# What a moved file, or a line a diff adds, must not say: no DC yet (3b-1 brings the endpoint).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["address_from_work_completion", "from_work_completion", "WorkCompletion",
                                    "gid_as_ipv6", "DC pool"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1100, 30)

# Its unit tests: no device, so they run on the host.
HOST_TESTS = [
    "ibverbs::source_gid::tests",
]
