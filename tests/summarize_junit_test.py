#!/usr/bin/python3
"""tests/summarize_junit.py counts what meson says, not what a stale XML says.

Each case writes a JUnit log and meson's testlog.json beside it, as meson
1.0 writes them, and checks the line. Exit status 0 if every case holds.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def junit(suites):
    body = "".join(suites)
    return f'<?xml version="1.0" encoding="utf-8"?>\n<testsuites>{body}</testsuites>\n'


def gtest_suite(test, suite, cases):
    inner = "".join(
        f'<testcase name="{name}" classname="{suite}">{"<failure/>" if failed else ""}</testcase>'
        for name, failed in cases)
    return f'<testsuite name="netfold.{test}.{suite}" tests="{len(cases)}">{inner}</testsuite>'


def plain_suite(tests):
    inner = "".join(f'<testcase name="{t}" classname="netfold"/>' for t in tests)
    return f'<testsuite name="netfold" tests="{len(tests)}">{inner}</testsuite>'


def summarize(xml, results):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "testlog.junit.xml"), "w") as f:
            f.write(xml)
        if results is not None:
            with open(os.path.join(d, "testlog.json"), "w") as f:
                for name, result in results.items():
                    f.write(json.dumps({"name": name, "result": result}) + "\n")
        r = subprocess.run([sys.executable, os.path.join(HERE, "summarize_junit.py"),
                            os.path.join(d, "testlog.junit.xml")],
                           capture_output=True, text=True, timeout=60)
        return r.stdout.strip().splitlines()[-1], r.returncode


CASES = [
    ("every test passed",
     junit([gtest_suite("unit / a_test", "A", [("x", False), ("y", False)]),
            plain_suite(["unit / script_test"])]),
     {"unit / a_test": "OK", "unit / script_test": "OK"},
     ("3 passed, 0 failed", 0)),
    ("a gtest case failed",
     junit([gtest_suite("unit / a_test", "A", [("x", False), ("y", True)])]),
     {"unit / a_test": "FAIL"},
     ("1 passed, 1 failed", 1)),
    # A gtest executable that timed out: meson copied the XML an earlier
    # run left behind, every case "passed".
    ("a timed-out gtest with a stale XML",
     junit([gtest_suite("mpi / b_test", "B", [("x", False), ("y", False)]),
            gtest_suite("unit / a_test", "A", [("x", False)])]),
     {"mpi / b_test": "TIMEOUT", "unit / a_test": "OK"},
     ("1 passed, 1 failed", 1)),
    # meson writes no <failure> for the timeout of a test without cases.
    ("a timed-out script",
     junit([plain_suite(["testbed / testbed_test", "unit / script_test"])]),
     {"testbed / testbed_test": "TIMEOUT", "unit / script_test": "OK"},
     ("1 passed, 1 failed", 1)),
    ("a crashed test missing from the JUnit log",
     junit([plain_suite(["unit / script_test"])]),
     {"unit / script_test": "OK", "unit / crashed_test": "ERROR"},
     ("1 passed, 1 failed", 1)),
    ("no testlog.json beside the JUnit log",
     junit([plain_suite(["unit / script_test"])]),
     None,
     ("0 passed, 1 failed", 1)),
]


def main():
    failed = 0
    for name, xml, results, want in CASES:
        got = summarize(xml, results)
        ok = got == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {got[0]!r} exit {got[1]}"
              + ("" if ok else f", want {want[0]!r} exit {want[1]}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
