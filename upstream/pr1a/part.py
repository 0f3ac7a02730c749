# Pull request 1a: shared receive queues. Read by scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-shared-receive-queue"]

# The files that move, per commit (see MOVES in scripts/upstream-pr).
MOVES = {
    "1-shared-receive-queue": [
        # The module folder src/ibverbs/shared_receive_queue/, file by file (every file of src/
        # must be placed: see `every_file_placed` in scripts/upstream-pr).
        {
            "from": "src/ibverbs/shared_receive_queue/mod.rs",
            "to": "src/ibverbs/shared_receive_queue/mod.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            "from": "src/ibverbs/shared_receive_queue/queue.rs",
            "to": "src/ibverbs/shared_receive_queue/queue.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            "from": "src/ibverbs/shared_receive_queue/attributes.rs",
            "to": "src/ibverbs/shared_receive_queue/attributes.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            "from": "src/ibverbs/shared_receive_queue/guard.rs",
            "to": "src/ibverbs/shared_receive_queue/guard.rs",
            "helpers": [],
            "rewrites": [],
        },
        {
            "from": "src/ibverbs/zeroed.rs",
            "to": "src/ibverbs/zeroed.rs",
            "helpers": [],
            "rewrites": [],
        },
    ],
}

# The helpers of src/ibverbs/mod.rs that moved files of this and later parts call.
SHARED = {
    "1-shared-receive-queue": [
        ("check_destroy", []),
        ("query_device_attr", []),
    ],
}

# What a moved file, or a line a diff adds, must not say.
# The mlx5 API comes with pull request 2 (naming libmlx5's post function as a reference is no use of it).
FORBIDDEN = GLUE + ["SharedReceiveQueuePair", "mlx5dv", "mlx5::", "libmlx5", "Mlx5"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1000, 300)
