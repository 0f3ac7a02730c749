# An optional request: asynchronous events. Read by scripts/upstream-pr (see upstream/README.md).

# Its commit: the folder beside this file.
COMMITS = ["1-async-events"]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-async-events": [
        {
            "from": "src/ibverbs/async_event.rs",
            "to": "src/ibverbs/async_event.rs",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# What a moved file, or a line a diff adds, must not say.
FORBIDDEN = GLUE + ["SharedReceiveQueuePair", "mlx5"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (800, 300)

# Asynchronous events need only the shared receive queues and their queue pairs, but sit beside
# the mission path's lines in sideway's files: they apply on its last request.
BASE = "pr3c-1"

# The helpers of src/ibverbs/mod.rs that its moved file calls.
SHARED = {
    "1-async-events": [("wait_readable", [])],
}
