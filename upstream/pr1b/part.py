# Pull request 1b: queue pairs on an SRQ. Read by scripts/upstream-pr (see upstream/README.md).

# Its commit: the folder beside this file.
COMMITS = ["1-queue-pairs-on-an-srq"]

# No file moves: the changes are to sideway's own files (its *.diff) and a test.
MOVES = {}

# What a moved file, or a line a diff adds, must not say.
FORBIDDEN = GLUE + ["SharedReceiveQueuePair", "mlx5"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (800, 300)
