# Pull request 3d: DC posting on the post guard. Read by scripts/upstream-pr (see
# upstream/README.md).
#
# The DC initiator's module, creation and recovery move again, with the rewrites that hold from
# here on (upstream/pr3c-1/part.py, INITIATOR_REWRITES): this part's commit is their difference and
# the post guard.
import runpy
from pathlib import Path

_SHARED = runpy.run_path(str(Path(__file__).resolve().parent.parent / "pr3c-1" / "part.py"),
                         init_globals={"GLUE": GLUE, "DC_DATA_PLANE": DC_DATA_PLANE})

# Its commits, in order: the folders beside this file.
COMMITS = ["1-dc-posting"]


def _move(name, helpers=()):
    path = "src/mlx5/dc/initiator/" + name
    return {"from": path, "to": path, "helpers": list(helpers), "rewrites": _SHARED["INITIATOR_REWRITES"](name, "pr3d")}


# The files that move, per commit (see MOVES in scripts/upstream-pr): the DC post guard, whole;
# the DC initiator's views it posts through, read at creation and at a rebuild.
MOVES = {
    "1-dc-posting": [
        _move("mod.rs"),
        _move("creation.rs", helpers=["query_device_attr"]),
        _move("recovery.rs"),
        _move("post_send.rs"),
    ],
}

# What a moved file, or a line a diff adds, must not say: this crate's names and glue, and the DC
# words of the later part (3e: stream reset, example), and of what stays this crate's (READs held
# to path MTUs, in its DC pool).
FORBIDDEN = GLUE + ["library::", "library.rs", "DcVerbs", "QueuePairCore", "TransitionTable", "modelled",
                    "SharedReceiveQueuePair", "extension::", "test_support",
                    "reset_stream", "stream_reset", "dc_hello", "dc_selftest",
                    "PathMtus", "ReadResponsesTooLarge", "destination_path_mtu", "set_path_mtus", "with_path_mtu"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1250, 10)

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_initiator"], "counters": {"DC targets created": 1, "requests": 1}}
