# Pull request 3a-2: TryFrom instead of the panicking From of C values. Read by
# scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-conversions-without-panics"]

# The files that move, per commit: none (sideway's own fixes, all diffs).
MOVES = {}

# What a moved file, or a line a diff adds, must not say (also this crate's workarounds).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["state_from_raw", "decode_status", "status_raw", "opcode_raw", "state_table.rs"]

# The most it may change: lines, and lines of sideway's existing files (all of it, its unit
# tests included).
LIMITS = (250, 250)

# Its unit tests, and those of the conversions it changes: no device, so on the host.
HOST_TESTS = [
    "ibverbs::completion::tests",
    "ibverbs::device_context::tests::test_link_layer_conversion",
]
