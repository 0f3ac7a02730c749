# Pull request 1c-2: the post guard with the RC transport, and the provider-entry check. Read by
# scripts/upstream-pr (see upstream/README.md).

# Its commits, in order: the folders beside this file.
COMMITS = ["1-post-send-guard"]

_GUARD = "src/ibverbs/post_send_guard/"


def _move(name, rewrites=()):
    return {"from": _GUARD + name, "to": _GUARD + name, "helpers": [], "rewrites": list(rewrites)}


# The files that move, per commit (see MOVES in scripts/upstream-pr): the whole guard, RC and UD.
MOVES = {
    "1-post-send-guard": [
        _move("mod.rs"),
        _move("guard.rs"),
        _move("request.rs"),
        _move("data.rs"),
        _move("error.rs"),
        _move("operation.rs"),
        _move("provider_entries.rs"),
        _move("transport.rs"),
        _move("unreliable_datagram.rs"),
    ],
}


# What a moved file, or a line a diff adds, must not say: this crate's names, DC's data plane.
FORBIDDEN = GLUE + DC_DATA_PLANE + ["test_support"]

# The most it may change: lines, and lines of sideway's existing files.
LIMITS = (1600, 100)

# Its unit tests (the provider entries read from a table, no device): run on the host.
HOST_TESTS = [
    "ibverbs::post_send_guard::",
]
