"""The state directory: the state file (testbed.json: the plan, what was
created, the daemons' pids and addresses), the pointer to a --state-dir
elsewhere, and the fabric credential.
"""

import json
import os

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
    path = state_path(state["state_dir"])
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, path)


def credential_file(state_dir):
    """The fabric credential of the testbed (docs/security.md): every call to
    the manager and the switches' admin APIs presents it."""
    return os.path.join(state_dir, "credential")


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
        with open(state_path(state_dir)) as f:
            state = json.load(f)
            if os.path.exists(credential_file(state_dir)):
                os.environ["NETFOLD_CREDENTIAL_FILE"] = credential_file(state_dir)
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
