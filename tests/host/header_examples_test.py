#!/usr/bin/python3
"""Compiles the usage examples of the public headers and of docs/host.md.

The example at the top of netfold.h and netfold.hpp (the first block of
lines indented by three spaces inside the opening comment) and every ```c
block of docs/host.md are pasted into a small harness that declares the
names they use (ranks, OOB callbacks, buffers) and compiled with -Werror.
An example that does not compile (a wrong signature, an undeclared
variable) fails the test.

Usage: header_examples_test.py SOURCE_ROOT C_COMPILER... -- CXX_COMPILER...
"""
import os
import re
import subprocess
import sys
import tempfile

C_HARNESS = """#include <stdio.h>
#include <stddef.h>
#include "netfold/netfold.h"
static int my_allgather(void* c, const void* s, void* r, size_t b) {{ (void)c; (void)s; (void)r; (void)b; return 0; }}
static int my_bcast(void* c, void* buf, size_t b, int root) {{ (void)c; (void)buf; (void)b; (void)root; return 0; }}
static int my_barrier(void* c) {{ (void)c; return 0; }}
int example(int my_rank, int rank, int n, void* my_comm, const float* in, float* out,
            size_t count) {{
  (void)my_rank; (void)rank; (void)n; (void)my_comm; (void)in; (void)out; (void)count;
{body}
  return 0;
}}
"""

CXX_HARNESS = """#include <cstddef>
#include <span>
#include <vector>
#include "netfold/netfold.hpp"
int example(const netfold_init_spec_t& spec, const netfold_group_spec_t& group_spec, size_t n) {{
{body}
  return rc;
}}
"""


def opening_example(path, prefix):
    """The first run of lines `prefix` + three spaces in the file's opening comment."""
    lines, started = [], False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(prefix + "   "):
                lines.append(line[len(prefix):])
                started = True
            elif started:
                break
    if not lines:
        raise SystemExit(f"{path}: no usage example found in the opening comment")
    return "\n".join(lines)


def markdown_blocks(path, language):
    with open(path) as f:
        text = f.read()
    blocks = re.findall(r"```" + language + r"\n(.*?)```", text, re.S)
    if not blocks:
        raise SystemExit(f"{path}: no ```{language} block")
    return blocks


def compile_snippet(compiler, flags, harness, body, name, include):
    with tempfile.TemporaryDirectory() as tmp:
        ext = ".c" if harness is C_HARNESS else ".cc"
        src = os.path.join(tmp, "example" + ext)
        with open(src, "w") as f:
            f.write(harness.format(body=body))
        cmd = compiler + flags + ["-I", include, "-fsyntax-only", src]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: the example of {name} does not compile:\n{body}\n{r.stderr}")
            return False
        print(f"ok: the example of {name} compiles")
        return True


def main():
    args = sys.argv[1:]
    if len(args) < 4 or "--" not in args:
        raise SystemExit(__doc__)
    root = args[0]
    split = args.index("--")
    cc, cxx = args[1:split], args[split + 1:]
    include = os.path.join(root, "host", "include")
    warn = ["-Wall", "-Wextra", "-Werror"]
    ok = True
    header = os.path.join(include, "netfold", "netfold.h")
    ok &= compile_snippet(cc, ["-std=c11"] + warn, C_HARNESS,
                          opening_example(header, " *"), "netfold.h", include)
    hpp = os.path.join(include, "netfold", "netfold.hpp")
    ok &= compile_snippet(cxx, ["-std=c++20"] + warn, CXX_HARNESS,
                          opening_example(hpp, "//"), "netfold.hpp", include)
    for i, block in enumerate(markdown_blocks(os.path.join(root, "docs", "host.md"), "c")):
        ok &= compile_snippet(cc, ["-std=c11"] + warn, C_HARNESS, block,
                              f"docs/host.md (block {i + 1})", include)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
