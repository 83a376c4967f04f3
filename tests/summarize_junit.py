#!/usr/bin/python3
"""Counts test cases in meson's JUnit logs and prints 'N passed, N failed[, N skipped]'.

gtest executables are counted per test case (meson expands them in the
JUnit file); other tests count once each. A test case is failed if it has a
<failure> or <error> element, skipped if it has <skipped>, passed otherwise.
A log that is missing or unreadable counts as one failure, so a build that
never ran its tests cannot look green. Exit status 1 if anything failed.

The JUnit log alone can say "passed" for a test that did not pass: meson
(1.0) writes no failure for a TIMEOUT of a test without its own cases, and
for a gtest executable that timed out or crashed before writing its XML
it copies whatever XML an earlier run left in the build directory. So each
test's result in meson's own log beside it (testlog.json) is the word: a
test meson did not call OK, SKIP or EXPECTEDFAIL counts as one failure, and
its cases in the JUnit log count neither way (they are stale, or a
placeholder).
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

# Characters XML 1.0 forbids. meson copies a test's output into the log as
# is, so one control character printed by a test (a VM's console, a
# terminal reset) would make the whole log unreadable.
INVALID_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
GOOD_RESULTS = {"OK", "SKIP", "EXPECTEDFAIL"}


def meson_results(junit_path):
    """{test name: meson's result} from testlog.json beside the JUnit log, or None."""
    path = os.path.join(os.path.dirname(junit_path), "testlog.json")
    results = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    entry = json.loads(line)
                    results[entry["name"]] = entry["result"]
    except (OSError, ValueError, KeyError) as e:
        print(f"summarize_junit: cannot read {path}: {e}", file=sys.stderr)
        return None
    return results


def count(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            root = ET.fromstring(INVALID_XML.sub("?", f.read()))
    except (OSError, ET.ParseError) as e:
        print(f"summarize_junit: cannot read {path}: {e}", file=sys.stderr)
        return 0, 1, 0
    # Per test: [passed, failed, skipped]. A gtest suite is named
    # "<project>.<test name>.<gtest suite>"; other tests are one case each,
    # named after the test, in a suite named after the project. (Neither
    # netfold's project name nor its test names have a dot in them.)
    per_test = {}
    for suite in root.iter("testsuite"):
        parts = suite.get("name", "").split(".", 2)
        for case in suite.findall("testcase"):
            test = parts[1] if len(parts) == 3 else case.get("name", "")
            n = per_test.setdefault(test, [0, 0, 0])
            if case.find("failure") is not None or case.find("error") is not None:
                n[1] += 1
            elif case.find("skipped") is not None:
                n[2] += 1
            else:
                n[0] += 1
    results = meson_results(path)
    if results is None:
        return 0, 1, 0
    for test, result in results.items():
        n = per_test.setdefault(test, [0, 0, 0])
        if result not in GOOD_RESULTS and n[1] == 0:
            print(f"summarize_junit: {test}: {result}", file=sys.stderr)
            per_test[test] = [0, 1, 0]
    totals = [sum(n[i] for n in per_test.values()) for i in range(3)]
    return tuple(totals)


def main(paths):
    if not paths:
        print("0 passed, 1 failed (no test logs)")
        return 1
    total = [0, 0, 0]
    for p in paths:
        for i, n in enumerate(count(p)):
            total[i] += n
    line = f"{total[0]} passed, {total[1]} failed"
    if total[2]:
        line += f", {total[2]} skipped"
    print(line)
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
