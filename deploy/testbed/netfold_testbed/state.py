"""The state directory: the state file (testbed.json: the plan, what was
created, the daemons' pids and addresses), the pointer to a --state-dir
elsewhere, and the fabric credential.

The state file is trusted only if no other user could have written it (see
open_trusted): status, counters, fault and mpirun run the binaries it
names, as root.
"""

import errno
import json
import os
import stat

from .errors import TestbedError

RUN_DIR = "/run/netfold-testbed"


def default_state_dir(prefix):
    pointer = os.path.join(RUN_DIR, f"{prefix}.dir")
    try:
        with open(pointer) as f:
            d = f.read().strip()
            if d:
                return d
    except OSError:
        pass
    return os.path.join(RUN_DIR, prefix)


def state_path(state_dir):
    return os.path.join(state_dir, "testbed.json")


def save_state(state):
    """Replaces testbed.json whole; the file is 0644 whatever the umask
    (load_state refuses one that a group or other user may write)."""
    path = state_path(state["state_dir"])
    tmp = path + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, path)


def open_trusted(path):
    """Opens path for reading if no other user could have written it: a
    regular file, not a symlink, owned by root or the effective user,
    writable by no group or other user. Another user who can write a
    --state-dir could otherwise plant a testbed.json naming binaries for root
    to run. OSError if it cannot be opened (e.g. it does not exist);
    TestbedError if it is not to be trusted."""
    try:
        # O_NONBLOCK: a planted FIFO must not hang the open (fstat refuses it).
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise TestbedError(f"{path} is a symbolic link; refusing to use it (run down to "
                               "clean up by prefix)")
        raise
    st = os.fstat(fd)
    problem = ""
    if not stat.S_ISREG(st.st_mode):
        problem = "is not a regular file"
    elif st.st_uid not in (0, os.geteuid()):
        problem = f"is owned by uid {st.st_uid}, neither root nor this user"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"is writable by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        os.close(fd)
        raise TestbedError(f"{path} {problem}: another user could have written it; refusing "
                           "to use it (run down to clean up by prefix)")
    return os.fdopen(fd)


def credential_file(state_dir):
    """The fabric credential of the testbed (docs/security.md): every call to
    the manager and the switches' admin APIs presents it."""
    return os.path.join(state_dir, "credential")


def tls_ca_file(state_dir):
    """The testbed's CA certificate (netfold certs writes it with the daemons'
    server.pem and server.key): every client of the testbed trusts it alone."""
    return os.path.join(state_dir, "ca.pem")


def make_credential(state_dir):
    """A new random credential, mode 0600, never on a command line."""
    path = credential_file(state_dir)
    tmp = path + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.replace(tmp, path)
    # testbed_query, netfold status and the ranks find it here.
    os.environ["NETFOLD_CREDENTIAL_FILE"] = path


def load_state(state_dir):
    try:
        with open_trusted(state_path(state_dir)) as f:
            state = json.load(f)
            if os.path.exists(credential_file(state_dir)):
                os.environ["NETFOLD_CREDENTIAL_FILE"] = credential_file(state_dir)
            if os.path.exists(tls_ca_file(state_dir)):
                os.environ["NETFOLD_TLS_CA"] = tls_ca_file(state_dir)
            return state
    except OSError:
        return None
    except ValueError:
        raise TestbedError(f"{state_path(state_dir)} is corrupt; run down to clean up by prefix")


def require_state(args):
    state_dir = args.state_dir or default_state_dir(args.prefix)
    state = load_state(state_dir)
    if state is None or not state.get("ready"):
        raise TestbedError(f"no testbed with prefix '{args.prefix}' is up (no {state_path(state_dir)}"
                           f"); start one with: netfold-testbed up TOPOLOGY.yaml")
    return state
