"""The tool's two exceptions and its one way of telling the user something.

TestbedError carries a message for the user (main prints it, no traceback);
Interrupted stands for SIGTERM/SIGHUP while `up` builds, handled like Ctrl-C.
"""

import sys


class TestbedError(Exception):
    """A failure with a message for the user (no traceback)."""


class Interrupted(BaseException):
    """SIGTERM/SIGHUP while building: treated like Ctrl-C."""


def log(message):
    print(f"netfold-testbed: {message}", file=sys.stderr, flush=True)
