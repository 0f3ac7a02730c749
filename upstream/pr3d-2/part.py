# Pull request 3d-2: an RDMA READ whose responses would not reach the DC initiator, refused
# before the provider. Read by scripts/upstream-pr (see upstream/README.md).
#
# A DC target answers a READ in packets of its own path MTU, whatever initiator reads: the guard
# holds a READ to the path MTUs of its two ends (path_mtus.rs, new), which the DC initiator
# knows (its own, and its target's from the address handle a DC endpoint makes). The files it
# grows moved with earlier parts and move again, with the rewrites that hold from here on: the
# guard's (upstream/pr1c-2/part.py, GUARD_REWRITES), the address handle's
# (upstream/pr1c-1/part.py, ADDRESS_HANDLE_REWRITES), the DC endpoint's
# (upstream/pr3b-1/part.py, ENDPOINT_REWRITES) and the DC initiator's (upstream/pr3c-1/part.py,
# INITIATOR_REWRITES): this part's commit is their difference and path_mtus.rs.
import runpy
from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent


def _read(part):
    return runpy.run_path(str(_HERE / part / "part.py"), init_globals={"GLUE": GLUE, "DC_DATA_PLANE": DC_DATA_PLANE})


_GUARD = _read("pr1c-2")
_ADDRESS_HANDLE = _read("pr1c-1")
_ENDPOINTS = _read("pr3b-1")
_INITIATOR = _read("pr3c-1")

# Its commits, in order: the folders beside this file.
COMMITS = ["1-read-path-mtus"]

# The guard's test of the decision, held here to cases worked by hand (the crate's device tests
# hold it to the software ConnectX's, for every pair of MTUs).
_DECISION_TEST = '''    #[test]
    fn a_read_fits_where_the_responder_is_no_larger_or_the_read_is_one_packet() {
        for (requester, responder, length, fits) in [
            (Mtu::Mtu1024, Mtu::Mtu4096, 1024, true),
            (Mtu::Mtu1024, Mtu::Mtu4096, 1025, false),
            (Mtu::Mtu256, Mtu::Mtu512, 257, false),
            (Mtu::Mtu256, Mtu::Mtu4096, 0, true),
            (Mtu::Mtu2048, Mtu::Mtu2048, 4 << 20, true),
            (Mtu::Mtu4096, Mtu::Mtu1024, 4 << 20, true),
        ] {
            let mtus = PathMtus::new(requester, responder);
            assert_eq!(mtus.read_fits(length), fits, "{requester:?} reading {length} bytes from {responder:?}");
            assert_eq!((mtus.requester(), mtus.responder()), (requester, responder));
        }
        assert_eq!(ALL.map(mtu_bytes), [256, 512, 1024, 2048, 4096]);
    }
'''


def _initiator(name):
    path = "src/mlx5/dc/initiator/" + name
    return {"from": path, "to": path, "helpers": [], "rewrites": _INITIATOR["INITIATOR_REWRITES"](name, "pr3d-2")}


def _guard(name):
    path = "src/ibverbs/post_send_guard/" + name
    return {"from": path, "to": path, "helpers": [], "rewrites": _GUARD["GUARD_REWRITES"](name, "pr3d-2")}


# The files that move, per commit (see MOVES in scripts/upstream-pr). The guard's mod.rs lines
# are post_send_guard_mod.diff.
MOVES = {
    "1-read-path-mtus": [
        {
            "from": "src/ibverbs/post_send_guard/path_mtus.rs",
            "to": "src/ibverbs/post_send_guard/path_mtus.rs",
            "helpers": [],
            "rewrites": [
                # The doctest is a user of sideway: COMMON made its path the crate's.
                ("/// use crate::ibverbs::device_context::Mtu;", "/// use sideway::ibverbs::device_context::Mtu;", 1),
                ("/// use sideway_ext::ibverbs::post_send_guard::PathMtus;", "/// use sideway::ibverbs::post_send_guard::PathMtus;", 1),
                (("    /// The rule itself is held to the device's", "    }\n\n    #[test]\n"),
                 _DECISION_TEST + "\n    #[test]\n", 1),
            ],
        },
        _guard("data.rs"),
        _guard("guard.rs"),
        _guard("error.rs"),
        {
            "from": "src/ibverbs/address_handle.rs",
            "to": "src/ibverbs/address_handle.rs",
            "helpers": [],
            "rewrites": _ADDRESS_HANDLE["ADDRESS_HANDLE_REWRITES"]("pr3d-2"),
        },
        {
            "from": "src/mlx5/dc/endpoint.rs",
            "to": "src/mlx5/dc/endpoint.rs",
            "helpers": [],
            "rewrites": _ENDPOINTS["ENDPOINT_REWRITES"]("pr3d-2"),
        },
        _initiator("transport.rs"),
        _initiator("mod.rs"),
        _initiator("addressed.rs"),
        _initiator("bring_up.rs"),
    ],
}

# What a moved file, or a line a diff adds, must not say: this crate's names and glue, and the DC
# words of the last part (3e: stream reset, example).
FORBIDDEN = GLUE + ["library::", "library.rs", "DcVerbs", "QueuePairCore", "TransitionTable", "modelled",
                    "SharedReceiveQueuePair", "extension::", "test_support",
                    "reset_stream", "stream_reset", "dc_hello", "dc_selftest"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (700, 10)

# Its unit tests (the decision, and the guard's and the DC transport's recording tables): run on
# the host.
HOST_TESTS = [
    "ibverbs::post_send_guard::",
]
