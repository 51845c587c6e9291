"""The import arrows between the host side's packages (remote.core, remote.jobs, remote.serving, ...),
read from the source with ast, and the lines of remote/, so a change to the layering can be measured
before and after by rerunning it:

  python benchmarks/import_graph.py            # arrows, back-arrows (pairs that import each other), lines
  python benchmarks/import_graph.py --modules  # also each importing module beside each arrow

An arrow A -> B counts the modules of A that import something of B (at load or lazily, inside a
function: both are a dependency). A back-arrow is a pair of packages that each import the other.
"""

import argparse
import ast
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def module_name(root, path):
    """remote/serving/bench.py -> remote.serving.bench; a package's __init__ is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree, name, is_package):
    """The absolute names every import statement of one module names (relative ones resolved):
    for `from x import y` both x and x.y, since y may be a module."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found += [module] + ["%s.%s" % (module, alias.name) for alias in node.names]
    return found


def package_of(name):
    """The area a module belongs to: remote.serving.bench -> remote.serving; remote.areas -> remote."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and parts[1] in AREA_PACKAGES) else parts[0]


AREA_PACKAGES = set()


def graph(root):
    """{(from package, to package): sorted importing modules} over root/remote."""
    remote = Path(root) / "remote"
    AREA_PACKAGES.clear()
    AREA_PACKAGES.update(p.name for p in remote.iterdir() if (p / "__init__.py").exists())
    arrows = defaultdict(set)
    for path in sorted(remote.rglob("*.py")):
        name = module_name(root, path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        source = package_of(name)
        for target in imported_modules(tree, name, path.name == "__init__.py"):
            if not target.startswith("remote."):
                continue
            to = package_of(target)
            if to != source and to != "remote":
                arrows[(source, to)].add(name)
    return {arrow: sorted(modules) for arrow, modules in arrows.items()}


def lines_of(root):
    """Lines of every .py file under root/remote."""
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (Path(root) / "remote").rglob("*.py"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT), help="the checkout to read (default: this one)")
    parser.add_argument("--modules", action="store_true", help="name the importing modules of each arrow")
    args = parser.parse_args(argv)
    arrows = graph(args.root)
    print("arrows (%d):" % len(arrows))
    for (source, to), modules in sorted(arrows.items()):
        print("  %-20s -> %-20s %3d module(s)%s" % (source, to, len(modules), ("  " + ", ".join(modules)) if args.modules else ""))
    back = sorted({tuple(sorted(pair)) for pair in arrows if (pair[1], pair[0]) in arrows})
    print("back-arrows (%d):" % len(back))
    for a, b in back:
        print("  %s <-> %s" % (a, b))
    core_out = sorted(to for (source, to) in arrows if source == "remote.core")
    print("remote.core imports areas: %s" % (", ".join(core_out) or "none"))
    print("lines of remote/: %d" % lines_of(args.root))


if __name__ == "__main__":
    sys.exit(main())
