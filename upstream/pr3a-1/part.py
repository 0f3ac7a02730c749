# Pull request 3a-1: QueuePairType::Driver and the transition table taken from the queue pair.
# Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-driver-queue-pairs"]

# The files that move, per commit: none (sideway's own fixes, all diffs).
MOVES = {}

# What a moved file, or a line a diff adds, must not say (also this crate's workarounds).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["state_from_raw", "decode_status", "status_raw", "opcode_raw", "state_table.rs"]

# The most it may change: lines, and lines of sideway's existing files (all of it is in
# queue_pair.rs, its unit tests included).
LIMITS = (300, 300)

# Its unit tests, and those of the transition tables it changes: no device, so on the host.
HOST_TESTS = ["ibverbs::queue_pair::tests::state_table_tests"]
