#!/usr/bin/python3
"""Counts test cases in meson's JUnit logs and prints 'N passed, N failed[, N skipped]'.

gtest executables are counted per test case (meson expands them in the
JUnit file); other tests count once each. A test case is failed if it has a
<failure> or <error> element, skipped if it has <skipped>, passed otherwise.
A log that is missing or unreadable counts as one failure, so a build that
never ran its tests cannot look green. Exit status 1 if anything failed.
"""
import re
import sys
import xml.etree.ElementTree as ET

# Characters XML 1.0 forbids. meson copies a test's output into the log as
# is, so one control character printed by a test (a VM's console, a
# terminal reset) would make the whole log unreadable.
INVALID_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def count(path):
    passed = failed = skipped = 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            root = ET.fromstring(INVALID_XML.sub("?", f.read()))
    except (OSError, ET.ParseError) as e:
        print(f"summarize_junit: cannot read {path}: {e}", file=sys.stderr)
        return 0, 1, 0
    for suite in root.iter("testsuite"):
        cases = suite.findall("testcase")
        for case in cases:
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped


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
