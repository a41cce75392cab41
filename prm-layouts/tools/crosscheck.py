#!/usr/bin/env python3
"""Compare spec offsets with gcc's view of mlx5_ifc.h (development check).

usage: crosscheck.py path/to/mlx5_ifc.h [spec_dir]

Builds a C program that prints sizeof/offsetof for every layout and named
member of the spec that also exists in the header, and compares them with
the offsets obtained by summing spec widths. DEVX names that the header
leaves reserved are skipped (they have no C member).
"""
import os
import re
import subprocess
import sys
import tempfile

SHIM = """
#include <stdio.h>
#include <stddef.h>
typedef unsigned char u8;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
#define BIT(n) (1UL << (n))
#define BIT_ULL(n) (1ULL << (n))
#define __packed __attribute__((packed))
"""


def parse_spec(spec_dir):
    layouts = {}
    for fn in sorted(os.listdir(spec_dir)):
        if not fn.endswith(".spec"):
            continue
        cur = None
        for line in open(os.path.join(spec_dir, fn)):
            line = line.split("#")[0].rstrip()
            if not line.strip():
                continue
            t = line.split()
            if not line.startswith(" "):
                cur = layouts[t[1]] = {"union": t[0] == "union", "size": int(t[2]), "members": []}
            else:
                cur["members"].append(t)
    return layouts


def member_bits(layouts, t):
    name, ty = t[0], t[1]
    if name.endswith("[]"):
        return 0
    m = re.match(r"\w+\[(\d+)\]$", name)
    count = int(m.group(1)) if m else 1
    w = int(ty) if ty.isdigit() else layouts[ty]["size"]
    return w * count


def main():
    header = sys.argv[1]
    spec_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "spec")
    layouts = parse_spec(spec_dir)
    htext = open(header).read()
    decl = {m.group(2): m.group(1) for m in re.finditer(r"^(struct|union) mlx5_ifc_(\w+)_bits \{", htext, re.M)}
    for inc in re.findall(r'#include\s+"(mlx5_ifc_\w+\.h)"', htext):
        sib = os.path.join(os.path.dirname(header), inc)
        if os.path.exists(sib):
            for m in re.finditer(r"^(struct|union) mlx5_ifc_(\w+)_bits \{", open(sib).read(), re.M):
                decl[m.group(2)] = m.group(1)
    expect = []
    body = []
    for name, lay in sorted(layouts.items()):
        if name not in decl:
            continue
        ctype = "%s mlx5_ifc_%s_bits" % (decl[name], name)
        body.append('printf("%s %%zu\\n", sizeof(%s));' % (name, ctype))
        expect.append("%s %d" % (name, lay["size"]))
        off = 0
        for t in lay["members"]:
            fname = re.sub(r"\[.*", "", t[0])
            if fname != "reserved" and re.search(r"\b%s\s*(\[|;)" % re.escape(fname), htext):
                body.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, fname, ctype, fname))
                expect.append("%s.%s %d" % (name, fname, 0 if lay["union"] else off))
            if not lay["union"]:
                off += member_bits(layouts, t)
    src = SHIM + '#include "%s"\nint main(void) {\n%s\nreturn 0;\n}\n' % (os.path.abspath(header), "\n".join(body))
    with tempfile.TemporaryDirectory() as d:
        c = os.path.join(d, "x.c")
        open(c, "w").write(src)
        inc = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(header))))
        exe = os.path.join(d, "x")
        r = subprocess.run(["gcc", "-w", "-I", inc, "-o", exe, c], capture_output=True, text=True)
        if r.returncode:
            # Members that the header does not have (DEVX names) fail to compile; drop them.
            bad = set(re.findall(r"has no member named '(\w+)'", r.stderr))
            keep = [(b, e) for b, e in zip(body, expect) if not any("offsetof" in b and b.rstrip(");").endswith(", " + x) for x in bad)]
            body, expect = [b for b, _ in keep], [e for _, e in keep]
            src = SHIM + '#include "%s"\nint main(void) {\n%s\nreturn 0;\n}\n' % (os.path.abspath(header), "\n".join(body))
            open(c, "w").write(src)
            r = subprocess.run(["gcc", "-w", "-I", inc, "-o", exe, c], capture_output=True, text=True)
            if r.returncode:
                sys.stderr.write(r.stderr[:4000])
                sys.exit(2)
        got = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n")
    bad = [(e, g) for e, g in zip(expect, got) if e != g]
    for e, g in bad[:50]:
        print("MISMATCH spec=%s gcc=%s" % (e, g))
    print("%d checks, %d mismatches" % (len(expect), len(bad)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
