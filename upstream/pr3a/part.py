# Pull request 3a: sideway's own fixes that DC needs. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-driver-queue-pairs", "2-conversions-without-panics"]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
}

# What a moved file, or a line a diff adds, must not say.
FORBIDDEN = GLUE + DC_DATA_PLANE + ["state_from_raw", "decode_status", "status_raw", "opcode_raw", "state_table.rs"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (600, 420)

# Its unit tests, and those of the code it changes (conversions and transition tables): no
# device, so they run on the host.
HOST_TESTS = [
    "ibverbs::queue_pair::tests::state_table_tests",
    "ibverbs::completion::tests",
    "ibverbs::device_context::tests::test_link_layer_conversion",
]
