# Pull request 3c-2: the DC initiator's bring-up and recovery. Read by scripts/upstream-pr (see
# upstream/README.md).
#
# The DC initiator's files moved with 3c-1 move again, with the rewrites that hold from here on
# (upstream/pr3c-1/part.py, INITIATOR_REWRITES): this part's commit is the difference.
import runpy
from pathlib import Path

_SHARED = runpy.run_path(str(Path(__file__).resolve().parent.parent / "pr3c-1" / "part.py"),
                         init_globals={"GLUE": GLUE, "DC_DATA_PLANE": DC_DATA_PLANE})

# Its commits, in order: the folders beside this file.
COMMITS = ["1-dc-initiator-bring-up"]


def _move(name, helpers=()):
    path = "src/mlx5/dc/initiator/" + name
    return {"from": path, "to": path, "helpers": list(helpers), "rewrites": _SHARED["INITIATOR_REWRITES"](name, "pr3c-2")}


# The files that move, per commit (see MOVES in scripts/upstream-pr): bring-up and recovery, and
# what they add to the module, the DC initiator (its attributes, kept for recover) and the DC
# queue pair (its state read from the device, and its replacement by a rebuilt one).
MOVES = {
    "1-dc-initiator-bring-up": [
        {"from": "src/mlx5/dc/queue_pair.rs", "to": "src/mlx5/dc/queue_pair.rs", "helpers": [], "rewrites": []},
        # The port checks both bring-ups make before any transition.
        {"from": "src/mlx5/dc/port.rs", "to": "src/mlx5/dc/port.rs", "helpers": [], "rewrites": []},
        _move("mod.rs"),
        _move("creation.rs"),
        _move("bring_up.rs"),
        _move("recovery.rs"),
    ],
}

# What a moved file, or a line a diff adds, must not say: this crate's names and glue, and the DC
# words of the later part (3e: stream reset).
FORBIDDEN = GLUE + ["library::", "library.rs", "DcVerbs", "QueuePairCore", "TransitionTable", "modelled",
                    "SharedReceiveQueuePair", "extension::",
                    "DynamicallyConnected", "BatchAddressed", "DcContext",
                    "reset_stream", "stream_reset", "dc_selftest"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1000, 120)

# Run at its last commit on the software ConnectX by --check (see software_connectx_tests).
SOFTMLX5 = {"tests": ["test_dc_initiator"], "counters": {"DC initiators created": 1}}

# The address attribute's unit tests: no device, so they run on the host.
HOST_TESTS = [
    "ibverbs::address::tests",
]
