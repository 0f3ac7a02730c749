# Pull request 1c-3: the UD transport of the post guard, `setup_qkey`, and the old extended guard
# deprecated. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-unreliable-datagram"]

_GUARD = "src/ibverbs/post_send_guard/"

# Nothing moves: the UD transport came with the guard (1c-2); this part changes sideway's files.
MOVES = {}

# What a moved file, or a line a diff adds, must not say: this crate's names and DC's data plane
# (DC's destination step is pull request 3d).
FORBIDDEN = GLUE + DC_DATA_PLANE + ["test_support", "setup_dc_addr"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (500, 150)

# Its unit tests (the attribute's Q_Key; no device): on the host.
HOST_TESTS = [
    "ibverbs::queue_pair::tests::test_qkey_and_mask",
]
