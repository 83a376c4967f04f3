"""How the verbs tests report: say() a line, debug() one only with -v (set
VERBOSE), and check(), which raises CheckFailed with the first failed check.
"""

import os
import sys
import time

VERBOSE = False
# The running test's name, e.g. rc_responder_test.
NAME = os.path.splitext(os.path.basename(sys.argv[0]))[0]


class CheckFailed(Exception):
    pass


def say(message):
    print(f"[{NAME} {time.strftime('%H:%M:%S')}] {message}", flush=True)


def debug(message):
    if VERBOSE:
        say(message)


def check(condition, message):
    if not condition:
        raise CheckFailed(message)
