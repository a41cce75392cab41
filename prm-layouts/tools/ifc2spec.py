#!/usr/bin/env python3
"""Convert the kernel's mlx5_ifc.h into the prm-layouts spec files.

Development tool only: the crate builds from the committed spec/*.spec files.

usage: ifc2spec.py path/to/mlx5_ifc.h out_dir
       ifc2spec.py --check path/to/mlx5_ifc.h spec_dir   (exit 1 if out of date)
"""
import os
import re
import sys

# Commands whose *_in / *_out mailboxes (and everything they reference) are emitted.
COMMANDS = """
query_hca_cap set_hca_cap query_adapter query_issi set_issi
enable_hca disable_hca init_hca teardown_hca query_pages manage_pages
alloc_pd dealloc_pd alloc_transport_domain dealloc_transport_domain
alloc_uar dealloc_uar
create_cq query_cq modify_cq destroy_cq
create_qp query_qp destroy_qp rst2init_qp init2init_qp init2rtr_qp rtr2rts_qp
rts2rts_qp sqerr2rts_qp qp_2err qp_2rst mad_ifc
create_mkey query_mkey destroy_mkey
create_srq query_srq destroy_srq arm_xrc_srq
create_rmp query_rmp modify_rmp destroy_rmp
create_xrc_srq query_xrc_srq destroy_xrc_srq
create_dct query_dct destroy_dct
create_sq modify_sq query_sq destroy_sq
create_rq modify_rq query_rq destroy_rq arm_rq
create_tir modify_tir query_tir destroy_tir
create_tis modify_tis query_tis destroy_tis
create_rqt modify_rqt query_rqt destroy_rqt
create_flow_table query_flow_table destroy_flow_table
create_flow_group query_flow_group destroy_flow_group
set_fte query_fte delete_fte
alloc_flow_counter dealloc_flow_counter query_flow_counter
alloc_q_counter dealloc_q_counter query_q_counter
query_vport_state query_nic_vport_context modify_nic_vport_context
query_hca_vport_context query_hca_vport_gid query_roce_address
attach_to_mcg detach_from_mcg
create_eq query_eq destroy_eq nop alloc_xrcd dealloc_xrcd
create_umem destroy_umem access_register
""".split()

EXTRA_ROOTS = """
general_obj_in_cmd_hdr general_obj_out_cmd_hdr umem
cqc qpc ads mkc srqc xrc_srqc rmpc wq sqc rqc tirc tisc rqtc eqc dctc
flow_table_context fte_match_param flow_context
cmd_hca_cap per_protocol_networking_offload_caps roce_cap flow_table_nic_cap
atomic_caps hca_cap_union nic_vport_context hca_vport_context
roce_addr_layout traffic_counter query_adapter_param_block
""".split()

# DEVX fields that the 6.1 header leaves reserved: (layout, name, bit offset, width).
DEVX_NAMES = [
    ("create_cq_in", "cq_umem_offset", 0x280, 64),
    ("create_cq_in", "cq_umem_id", 0x2C0, 32),
    # A resize names the new ring the way CREATE_CQ names the first one.
    ("modify_cq_in", "cq_umem_offset", 0x280, 64),
    ("modify_cq_in", "cq_umem_id", 0x2C0, 32),
    ("cqc", "dbr_umem_id", 0x20, 32),
    ("create_qp_in", "wq_umem_offset", 0x800, 64),
    ("create_qp_in", "wq_umem_id", 0x840, 32),
    ("qpc", "dbr_umem_id", 0x720, 32),
    ("wq", "dbr_umem_id", 0x140, 32),
    ("wq", "wq_umem_id", 0x160, 32),
    ("wq", "wq_umem_offset", 0x180, 64),
    ("create_mkey_in", "mkey_umem_id", 0x320, 32),
    ("create_mkey_in", "mkey_umem_offset", 0x340, 64),
]

# Named fields split into smaller pieces: (layout, field, [(new name or None, width), ...]).
# None today: the spec keeps the header's fields whole (cqc.c_eqn_or_apu_element
# is one 32-bit EQ number, as the kernel sets it).
SPLITS = []


def die(msg):
    sys.stderr.write("ifc2spec: " + msg + "\n")
    sys.exit(1)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_constants(text):
    consts = {}
    for m in re.finditer(r"#define\s+(\w+)\s+\(?\s*(0x[0-9a-fA-F]+|\d+)\s*\)?\s*$", text, re.M):
        consts[m.group(1)] = int(m.group(2), 0)
    for body in re.findall(r"enum\s*\w*\s*\{(.*?)\}", text, re.S):
        for m in re.finditer(r"(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", body):
            consts.setdefault(m.group(1), int(m.group(2), 0))
    return consts


class Member:
    def __init__(self, name, kind, width=None, ref=None, count=None, bytes_=False):
        self.name = name
        self.kind = kind  # scalar | reserved | nested | tail
        self.width = width  # element width in bits for scalars
        self.ref = ref  # referenced layout name
        self.count = count  # None: single, int: array
        self.bytes = bytes_


class Layout:
    def __init__(self, name, is_union, members):
        self.name = name
        self.is_union = is_union
        self.members = members


def split_top(body):
    """Split a struct body into member declarations at brace depth 0."""
    out, depth, cur = [], 0, []
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == ";" and depth == 0:
            s = "".join(cur).strip()
            if s:
                out.append(s)
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        die("trailing text in body: " + "".join(cur))
    return out


def num(tok, consts):
    tok = tok.strip()
    if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", tok):
        return int(tok, 0)
    if tok in consts:
        return consts[tok]
    raise KeyError(tok)


def parse_body(owner, body, consts, layouts, pending):
    members = []
    for decl in split_top(body):
        decl = " ".join(decl.split())
        m = re.fullmatch(r"(union|struct) \{(.*)\} (\w+)", decl, re.S)
        if m:
            sub = owner + "_" + m.group(3)
            layouts[sub] = Layout(sub, m.group(1) == "union",
                                  parse_body(sub, m.group(2), consts, layouts, pending))
            members.append(Member(m.group(3), "nested", ref=sub))
            continue
        m = re.fullmatch(r"(?:struct|union) mlx5_ifc_(\w+?)(?:_bits)? (\w+)(?:\[([^\]]*)\])?", decl)
        if m:
            ref, name, cnt = m.group(1), m.group(2), m.group(3)
            if cnt is None:
                members.append(Member(name, "nested", ref=ref))
            elif cnt.strip() == "":
                members.append(Member(name, "tail", ref=ref))
            else:
                members.append(Member(name, "nested", ref=ref, count=("expr", cnt)))
            continue
        m = re.fullmatch(r"u8 (\w+)((?:\[[^\]]*\])+)", decl)
        if not m:
            die("%s: cannot parse member %r" % (owner, decl))
        name = m.group(1)
        dims = re.findall(r"\[([^\]]*)\]", m.group(2))
        reserved = name.startswith("reserved")
        if len(dims) == 1:
            members.append(Member(name, "reserved" if reserved else "scalar", width=("expr", dims[0])))
        elif len(dims) == 2:
            if dims[0].strip() == "":
                members.append(Member(name, "tail", width=("expr", dims[1])))
            else:
                members.append(Member(name, "reserved" if reserved else "scalar",
                                      width=("expr", dims[1]), count=("expr", dims[0])))
        else:
            die("%s: too many dimensions in %r" % (owner, decl))
    return members


def parse_header(path):
    raw = open(path).read()
    # Sibling IFC headers pulled in with #include "..." (e.g. the FPGA caps).
    for inc in re.findall(r'#include\s+"(mlx5_ifc_\w+\.h)"', raw):
        sib = os.path.join(os.path.dirname(path), inc)
        if os.path.exists(sib):
            raw += "\n" + open(sib).read()
    text = strip_comments(raw)
    consts = parse_constants(text)
    layouts = {}
    pending = []
    for m in re.finditer(r"^(struct|union) mlx5_ifc_(\w+?)(?:_bits)? \{", text, re.M):
        start = m.end()
        depth, i = 1, start
        while depth:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        body = text[start:i - 1]
        name = m.group(2)
        layouts[name] = Layout(name, m.group(1) == "union",
                               parse_body(name, body, consts, layouts, pending))
    return layouts, consts


def resolve(layouts, consts, name, seen):
    """Evaluate widths/counts of `name` and everything it references."""
    if name in seen:
        return
    if name not in layouts:
        die("unknown layout " + name)
    seen.add(name)
    for mem in layouts[name].members:
        if isinstance(mem.width, tuple):
            mem.width = num(mem.width[1], consts)
        if isinstance(mem.count, tuple):
            mem.count = num(mem.count[1], consts)
        if mem.kind in ("scalar", "reserved") and mem.count is not None and mem.width == 8:
            # u8 x[N][0x8] is a byte string, kept as one field.
            mem.width, mem.count, mem.bytes = mem.count * 8, None, True
        if mem.kind == "reserved" and mem.count is not None:
            mem.width, mem.count = mem.width * mem.count, None
        if mem.ref:
            resolve(layouts, consts, mem.ref, seen)


def size_of(layouts, name, memo={}):
    if name in memo:
        return memo[name]
    lay = layouts[name]
    sizes = [member_bits(layouts, m) for m in lay.members]
    size = max(sizes) if lay.is_union else sum(sizes)
    memo[name] = size
    return size


def member_bits(layouts, m):
    if m.kind == "tail":
        return 0
    elem = size_of(layouts, m.ref) if m.ref else m.width
    return elem * (m.count or 1)


def offsets(layouts, lay):
    off, out = 0, []
    for m in lay.members:
        out.append(0 if lay.is_union else off)
        if not lay.is_union:
            off += member_bits(layouts, m)
    return out


def tail_of(layouts, name):
    lay = layouts[name]
    if lay.is_union or not lay.members:
        return None
    last = lay.members[-1]
    if last.kind == "tail":
        return last
    if last.kind == "nested" and last.count is None:
        return tail_of(layouts, last.ref)
    return None


def apply_devx_names(layouts):
    for lname, fname, at, width in DEVX_NAMES:
        lay = layouts[lname]
        offs = offsets(layouts, lay)
        for idx, (m, o) in enumerate(zip(lay.members, offs)):
            w = member_bits(layouts, m)
            if o <= at and at + width <= o + w:
                if m.kind != "reserved":
                    die("%s.%s at 0x%x overlaps named field %s" % (lname, fname, at, m.name))
                repl = []
                if at > o:
                    repl.append(Member("reserved", "reserved", width=at - o))
                repl.append(Member(fname, "scalar", width=width))
                if o + w > at + width:
                    repl.append(Member("reserved", "reserved", width=o + w - at - width))
                lay.members[idx:idx + 1] = repl
                break
        else:
            die("no reserved range for %s.%s" % (lname, fname))
    for lname, fname, pieces in SPLITS:
        lay = layouts[lname]
        for idx, m in enumerate(lay.members):
            if m.name == fname:
                if sum(w for _, w in pieces) != m.width:
                    die("split of %s.%s does not add up" % (lname, fname))
                lay.members[idx:idx + 1] = [
                    Member(n, "scalar", width=w) if n else Member("reserved", "reserved", width=w)
                    for n, w in pieces
                ]
                break
        else:
            die("no field %s.%s to split" % (lname, fname))


def area(name, layouts):
    if name.endswith("_in") or name.endswith("_out") or name.endswith("_cmd_hdr"):
        return "commands"
    if "cap" in name or name.startswith("flow_table_prop") or name.startswith("flow_table_fields"):
        return "caps"
    return "contexts"


def render(layouts, name):
    lay = layouts[name]
    size = size_of(layouts, name)
    lines = ["%s %s %d" % ("union" if lay.is_union else "layout", name, size)]
    offs = offsets(layouts, lay)
    for m, o in zip(lay.members, offs):
        note = "  # 0x%x" % o
        if m.kind == "reserved":
            if lay.is_union:
                continue  # union padding: the declared size covers it
            lines.append("  reserved %d%s" % (m.width, note))
        elif m.kind == "scalar":
            n = m.name if m.count is None else "%s[%d]" % (m.name, m.count)
            lines.append("  %s %d%s%s" % (n, m.width, " bytes" if m.bytes else "", note))
        elif m.kind == "nested":
            n = m.name if m.count is None else "%s[%d]" % (m.name, m.count)
            lines.append("  %s %s%s" % (n, m.ref, note))
        elif m.kind == "tail":
            lines.append("  %s[] %s%s" % (m.name, m.ref if m.ref else m.width, note))
    return "\n".join(lines)


def main():
    args = sys.argv[1:]
    check = bool(args) and args[0] == "--check"
    if check:
        args = args[1:]
    if len(args) != 2:
        die("usage: ifc2spec.py [--check] mlx5_ifc.h out_dir")
    header, out_dir = args
    layouts, consts = parse_header(header)
    roots = list(EXTRA_ROOTS)
    for c in COMMANDS:
        for suffix in ("_in", "_out"):
            if c + suffix in layouts:
                roots.append(c + suffix)
            else:
                sys.stderr.write("ifc2spec: note: %s%s not in header\n" % (c, suffix))
    seen = set()
    for r in roots:
        resolve(layouts, consts, r, seen)
    apply_devx_names(layouts)
    # Tail members must be last and may not appear inside arrays or unions.
    for name in sorted(seen):
        lay = layouts[name]
        for i, m in enumerate(lay.members):
            if m.kind == "tail" and (i != len(lay.members) - 1 or lay.is_union):
                die("%s: flexible member %s is not last" % (name, m.name))
            if m.kind == "nested" and tail_of(layouts, m.ref) and (
                    i != len(lay.members) - 1 or m.count is not None or lay.is_union):
                die("%s: member %s has a tail but is not last" % (name, m.name))
    files = {}
    for name in sorted(seen):
        files.setdefault(area(name, layouts), []).append(render(layouts, name))
    stale = []
    if not check:
        os.makedirs(out_dir, exist_ok=True)
    for fname, blocks in sorted(files.items()):
        text = ("# mlx5 PRM layouts (%s). Widths in bits, fields in wire order,\n" % fname
                + "# MSB-first within big-endian dwords. Comments give the bit offset.\n\n"
                + "\n\n".join(blocks) + "\n")
        path = os.path.join(out_dir, fname + ".spec")
        if check:
            old = open(path).read() if os.path.exists(path) else None
            if old != text:
                stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    if check:
        if stale:
            die("out of date: " + ", ".join(stale))
        print("%d layouts up to date" % len(seen))
    else:
        print("wrote %d layouts" % len(seen))


if __name__ == "__main__":
    main()
