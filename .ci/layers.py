#!/usr/bin/env python3
"""The crate's module map: for each file in src/ (or cli/src/, the command,
with a layer list of its own), its lines, the crate modules it imports
(`crate::...` and `super::...` paths outside its `#[cfg(test)] mod tests`; a
test-only file's imports are listed, not judged), and the imports that run
upward against the layer order below, plus any import circle between files.

Usage: .ci/layers.py [src-dir] [--check] [--no-circles]
  --check:      exit 1 on an upward import or a file in no layer
  --no-circles: exit 1 on an import circle between files too
"""
import os
import re
import sys

# Lower number = lower layer. A file may import its own layer or lower ones.
LAYERS = [
    ("leaf", ["time", "token", "sync", "defaults", "error", "info", "stats"]),
    ("mechanism", ["config", "protocol", "quorum", "backoff", "conn", "open",
                   "lease", "wake", "raw", "server"]),
    ("held", ["guard"]),
    ("api", ["locker", "semaphore", "rwlock", "operate", "election", "fence"]),
    ("entry", ["builder"]),
    ("root", ["lib"]),
]

# The command (cli/src), the same way: what it prints and parses at the
# bottom, the argument model above them, the watcher and the connection
# above that, the commands (the supervisor `run`, the operator's `operate`),
# then the entry point that dispatches to them.
CLI_LAYERS = [
    ("leaf", ["exit", "duration", "group", "verbose", "holder", "leader", "ops"]),
    ("model", ["args"]),
    ("mechanism", ["watch", "connect"]),
    ("command", ["run", "operate"]),
    ("entry", ["app"]),
    ("root", ["main"]),
]

args = [a for a in sys.argv[1:] if not a.startswith("--")]
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SRC = args[0] if args else os.path.join(ROOT, "src")
SRC = os.path.normpath(os.path.abspath(SRC))
if os.path.relpath(SRC, ROOT) == os.path.join("cli", "src"):
    LAYERS = CLI_LAYERS
LAYER = {m: i for i, (_, ms) in enumerate(LAYERS) for m in ms}
# The crate root: lib.rs for the library, main.rs for the command.
ROOT_FILE = "lib.rs" if os.path.isfile(os.path.join(SRC, "lib.rs")) else "main.rs"


def mod_of(path):
    rel = os.path.relpath(path, SRC)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def resolve(parts):
    """The longest prefix of `parts` that names a file, as a module path."""
    for n in range(len(parts), 0, -1):
        p = os.path.join(SRC, *parts[:n])
        if os.path.isfile(p + ".rs") or os.path.isfile(os.path.join(p, "mod.rs")):
            return "/".join(parts[:n])
    return None


def reexports():
    """Names lib.rs re-exports (`pub use a::{X, Y}`), to the module they come from."""
    text = open(os.path.join(SRC, ROOT_FILE)).read()
    out = {}
    for m in re.finditer(r"pub use (\w+)(?:::(\w+))*::(\{[^}]*\}|\w+);", text):
        mod = m.group(1)
        for name in re.findall(r"\w+", m.group(3)):
            out[name] = mod
    return out


def strip(text):
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests\b", text)[0]
    text = re.sub(r"//[^\n]*", "", text)
    return text


def expand(prefix, body):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    out, depth, cur = [], 0, ""
    for ch in body + ",":
        if ch == "," and depth == 0:
            cur = cur.strip()
            if cur:
                m = re.match(r"([\w:]*?)(?:::)?\{(.*)\}$", cur, re.S)
                if m:
                    out += expand(prefix + [p for p in m.group(1).split("::") if p], m.group(2))
                else:
                    out.append(prefix + [p for p in re.split(r"::|\s+as\s+", cur) if p])
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    return out


def imports(path, names):
    here = mod_of(path)
    text = strip(open(path).read())
    found = set()
    paths = []
    for m in re.finditer(r"\b(crate|super)::\{([^;]*?)\};", text, re.S):
        paths += [(m.group(1), p) for p in expand([], m.group(2))]
    for m in re.finditer(r"\b(crate|super)::((?:\w+::)*\w+)", text):
        paths.append((m.group(1), m.group(2).split("::")))
    for root, parts in paths:
        if not parts or parts[0] in ("self",):
            continue
        if root == "super":
            base = here[:-1] if os.path.basename(path) != "mod.rs" else here[:-1]
            parts = base + parts
        if parts[0] in names and len(parts) == 1 or (parts and parts[0] in names and parts[0][0].isupper()):
            parts = [names[parts[0]]]
        target = resolve(parts)
        me = "/".join(here) or ROOT_FILE[:-3]
        if target and target != me and not me.startswith(target + "/"):
            found.add(target)
    return found


def test_only():
    """Files a parent declares under `#[cfg(test)] mod name;`: their imports are a test's."""
    out = set()
    for d, _, fs in os.walk(SRC):
        for f in fs:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(d, f)
            parent = mod_of(path)
            for m in re.finditer(r"#\[cfg\(test\)\]\s*mod (\w+);", open(path).read()):
                out.add("/".join(parent + [m.group(1)]))
    return out


def layer(mod):
    return LAYER.get(mod.split("/")[0])


def sccs(graph):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    names = reexports()
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(SRC) for f in fs if f.endswith(".rs"))
    graph, upward, total, tests = {}, [], 0, test_only()
    print("%-28s %5s  %-9s %s" % ("file", "lines", "layer", "imports (crate modules)"))
    for f in files:
        me = "/".join(mod_of(f)) or ROOT_FILE[:-3]
        lines = sum(1 for _ in open(f))
        total += lines
        deps = imports(f, names)
        lm = layer(me)
        if me in tests:
            print("%-28s %5d  %-9s %s" % (os.path.relpath(f, SRC), lines, "test", ", ".join(sorted(deps))))
            continue
        graph.setdefault(me, set()).update(deps)
        marks = []
        for d in sorted(deps):
            ld = layer(d)
            up = lm is not None and ld is not None and ld > lm
            if up:
                upward.append((os.path.relpath(f, SRC), d))
            marks.append(d + ("(UP)" if up else ""))
        name = LAYERS[lm][0] if lm is not None else "?"
        print("%-28s %5d  %-9s %s" % (os.path.relpath(f, SRC), lines, name, ", ".join(marks)))
    print("%-28s %5d" % ("total", total))
    # circles between top-level modules (a folder counts as one module)
    top = {}
    for v, ds in graph.items():
        top.setdefault(v.split("/")[0], set()).update(d.split("/")[0] for d in ds if d.split("/")[0] != v.split("/")[0])
    print()
    print("upward imports: %d" % len(upward))
    for f, d in upward:
        print("  %s -> %s" % (f, d))
    print("circles between files: %s" % ("; ".join(" ".join(c) for c in sccs(graph)) or "none"))
    print("circles between top-level modules: %s" % ("; ".join(" ".join(c) for c in sccs(top)) or "none"))
    root = ROOT_FILE[:-3]
    unknown = sorted({v for v in graph if layer(v) is None and v != root})
    if unknown:
        print("files in no layer: %s" % ", ".join(unknown))
    circles = sccs(graph)
    if "--check" in sys.argv and (upward or unknown):
        sys.exit(1)
    if "--no-circles" in sys.argv and circles:
        sys.exit(1)


main()
