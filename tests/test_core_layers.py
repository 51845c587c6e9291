"""The split between the two sides holds: the host side (every module of remote/, subpackages
included) needs nothing beyond the standard library when it loads, and imports the libraries
its zipapp carries (pynvml, prometheus_client's parser) only lazily; a daemon does not outlive
its home; no test module imports another (what tests share is in tests/helpers/)."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import REPO_ROOT, daemon_pid, python39
from tests.helpers.waits import wait_for
from tui.transport.bootstrap import CARRIED
from tui.transport.connection import open_client

# Libraries of the host's own that a download step imports, lazily, under the interpreter the
# user named for downloads (never in the daemon): where each may be imported.
HOST_LIBRARIES = {"huggingface_hub": "remote/downloads/", "certifi": "remote/downloads/",
                  "transformers": "remote/checkpoints/coverage_job.py",  # a job under the ML interpreter
                  "torch": "remote/scoring/", "pyarrow": "remote/scoring/score_job.py"}  # the score job, under it too


def carried_modules():
    """What rides in the agent's zipapp beside remote/ (tui/transport/bootstrap.py's CARRIED), as module names."""
    names = set()
    for package, files in CARRIED.items():
        names |= {package} if not files else {"%s.%s" % (package, f[:-3]) for f in files}
    return names


def host_modules(root):
    """Every module of root/remote, packages and subpackages included: what ships in the zipapp."""
    names = []
    for path in sorted((Path(root) / "remote").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def static_import_problems(root):
    """Every import statement of root/remote that names something beyond the standard library and
    remote itself, unless it is a carried module or a host library where one is allowed, imported
    inside a function (lazily)."""
    stdlib, carried, problems = set(sys.stdlib_module_names), carried_modules(), []

    def imported(node):
        """(the name an import statement shows, the module names it may load), or None."""
        if isinstance(node, ast.Import):
            return [(alias.name, [alias.name]) for alias in node.names]
        if isinstance(node, ast.ImportFrom) and node.level == 0:  # `from x import y`: y may be a module
            return [(node.module, [node.module] + ["%s.%s" % (node.module, alias.name) for alias in node.names])]
        return []

    def visit(node, path, in_function):
        for child in ast.iter_child_nodes(node):
            for name, modules in imported(child):
                top = name.split(".")[0]
                if top in stdlib or top == "remote":
                    continue
                carried_or_host = any(m in carried for m in modules) or str(path).startswith(HOST_LIBRARIES.get(top, "\0"))
                if not carried_or_host:
                    problems.append("%s:%d imports %s, which is not the standard library" % (path, child.lineno, name))
                elif not in_function:
                    problems.append("%s:%d imports %s when the module loads, not lazily" % (path, child.lineno, name))
            visit(child, path, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    for path in sorted((Path(root) / "remote").rglob("*.py")):
        relative = path.relative_to(root)
        visit(ast.parse(path.read_text(encoding="utf-8"), str(relative)), relative, False)
    return problems


# Imports each module in turn and says which top-level modules each one added.
IMPORT_EACH = """
import importlib, json, sys
added = {}
for name in json.loads(sys.argv[1]):
    before = set(sys.modules)
    try:
        importlib.import_module(name)
    except BaseException as exc:  # a module that cannot load here is named too
        added[name] = "%s: %s" % (type(exc).__name__, exc)
        continue
    added[name] = sorted(set(m.split(".")[0] for m in sys.modules if m not in before))
print(json.dumps(added))
"""


def loaded_import_problems(root):
    """Importing every module of root/remote (isolated: this interpreter's standard library and
    site only) loads nothing beyond the standard library: what a module imports when it loads."""
    # Only what importing the host side adds counts: site hooks of this interpreter load a few
    # modules of their own before any code runs.
    code = "import sys; sys.path.insert(0, %r)\n" % str(root) + IMPORT_EACH
    out = subprocess.run([sys.executable, "-I", "-c", code, json.dumps(host_modules(root))], capture_output=True, text=True,
                         check=True, cwd=str(root))
    stdlib, problems = set(sys.stdlib_module_names) | {"remote", "__main__"}, []
    for name, added in json.loads(out.stdout).items():
        if isinstance(added, str):
            problems.append("importing %s fails: %s" % (name, added))
        elif set(added) - stdlib:
            problems.append("importing %s loads %s" % (name, ", ".join(sorted(set(added) - stdlib))))
    return problems


def test_host_side_imports_only_the_standard_library():
    modules = host_modules(REPO_ROOT)
    assert {"remote.core.daemon", "remote.telemetry.nvml", "remote.downloads.download", "remote.__main__"} <= set(modules)
    assert len(modules) > 90  # every package's modules, not only the top level's
    assert static_import_problems(REPO_ROOT) == []
    assert loaded_import_problems(REPO_ROOT) == []


def test_the_guard_names_a_planted_import(tmp_path):
    shutil.copytree(REPO_ROOT / "remote", tmp_path / "remote", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "remote" / "serving" / "planted.py").write_text('"""Planted by the test."""\n\nimport requests\n')
    (tmp_path / "remote" / "telemetry" / "eager.py").write_text('"""Planted by the test."""\n\nimport pynvml\n')
    assert static_import_problems(tmp_path) == [
        "remote/serving/planted.py:3 imports requests, which is not the standard library",
        "remote/telemetry/eager.py:3 imports pynvml when the module loads, not lazily",
    ]
    # Loaded for real, each planted module is named (requests loads, or fails where it is not installed).
    planted, eager = loaded_import_problems(tmp_path)
    assert (planted.startswith("importing remote.serving.planted loads ") and "requests" in planted
            or planted == "importing remote.serving.planted fails: ModuleNotFoundError: No module named 'requests'"), planted
    assert eager == "importing remote.telemetry.eager loads pynvml"


def imports_of_test_modules(root):
    """Every import of a test module (tests/test_*.py) by another file under root/tests: what they
    share belongs in tests/helpers/."""
    found = []
    paths = sorted((Path(root) / "tests").rglob("*.py")) + sorted((Path(root) / "benchmarks").glob("conftest.py"))
    for path in paths:
        relative = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), relative)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + ["%s.%s" % (node.module, alias.name) for alias in node.names]
            else:
                continue
            if any(name.startswith("tests.test_") for name in names):
                found.append("%s:%d imports a test module" % (relative, node.lineno))
            if any(name == "tests.conftest" or name.startswith("tests.conftest.") for name in names):
                found.append("%s:%d imports tests.conftest" % (relative, node.lineno))
            if path.name == "conftest.py" and isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                found.append("%s:%d star-imports fixtures (name them in pytest_plugins)" % (relative, node.lineno))
    return found


def test_no_test_module_imports_another():
    found = imports_of_test_modules(REPO_ROOT)
    assert found == [], "import from tests/helpers/ instead:\n" + "\n".join(found)


def test_the_guard_names_a_test_module_imported_by_another(tmp_path):
    (tmp_path / "tests" / "helpers").mkdir(parents=True)
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "tests" / "test_b.py").write_text("from tests.helpers.waits import wait_for\nfrom tests.test_a import test_a\n")
    (tmp_path / "tests" / "helpers" / "c.py").write_text("def f():\n    from tests import test_a\n")
    (tmp_path / "tests" / "test_d.py").write_text("from tests.conftest import run_cli\n")
    (tmp_path / "tests" / "conftest.py").write_text("from tests.sshd_fixtures import *\n")
    assert imports_of_test_modules(tmp_path) == [
        "tests/conftest.py:1 star-imports fixtures (name them in pytest_plugins)", "tests/helpers/c.py:2 imports a test module",
        "tests/test_b.py:2 imports a test module", "tests/test_d.py:1 imports tests.conftest",
    ]


def test_daemon_stops_when_its_home_is_removed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    open_client("local").close()
    pid = daemon_pid(home)
    assert pid
    shutil.rmtree(home)
    wait_for(lambda: not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split()[2] == "Z", 30)


@pytest.mark.skipif(python39() is None, reason="no Python 3.9 on this machine")
def test_agent_and_jobs_run_on_python_3_9(agent_home):
    client = open_client("local", python=python39())
    assert client.hello["capabilities"]["python"]["version"].startswith("3.9.")
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "echo on 3.9; exit 4"]})
    done = wait_for(lambda: (lambda j: j["exit_code"] is not None and j)(client.call("jobs.get", {"id": job["id"]})), 30)
    assert done["exit_code"] == 4 and client.call("jobs.tail", {"id": job["id"]})["text"] == "on 3.9\n"
    client.close()


def _resolved_imports(path, name, is_package):
    """(line, absolute module, [imported names]) of every import statement of one module;
    relative imports resolved, at any depth (a lazy import inside a function counts too)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            yield node.lineno, module, [alias.name for alias in node.names]


def _public_modules(area_dir):
    """The modules an area declares importable by others: its __init__'s PUBLIC tuple."""
    for node in ast.parse((area_dir / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PUBLIC" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def layer_problems(root):
    """The layering of root/remote: the core (remote/core) imports no area; an area (any other
    package of remote/) imports the core freely and, of another area, only that area's package
    (`remote.serving`: the names its __init__ gives) and the modules its __init__ lists in PUBLIC,
    and never a private name (one starting with `_`). The composition root (remote/areas.py,
    remote/__main__.py) may import anything."""
    remote = Path(root) / "remote"
    areas = {p.name: _public_modules(p) for p in remote.iterdir() if (p / "__init__.py").exists() and p.name != "core"}
    problems, arrows = [], {}
    for path in sorted(remote.rglob("*.py")):
        relative = path.relative_to(root)
        parts = list(relative.with_suffix("").parts)
        if len(parts) < 3:
            continue  # remote/areas.py, remote/__main__.py, remote/__init__.py
        name, own = ".".join(parts[:-1] if parts[-1] == "__init__" else parts), parts[1]
        for line, module, names in _resolved_imports(path, name, path.name == "__init__.py"):
            target = module.split(".")
            if target[0] != "remote" or len(target) < 2 or target[1] in ("core", own) or target[1] not in areas:
                continue
            where = "%s:%d" % (relative.as_posix(), line)
            arrows.setdefault((own, target[1]), where)
            if own == "core":
                problems.append("%s imports %s: the core imports no area" % (where, module))
                continue
            public = areas[target[1]]
            if len(target) > 2:  # from remote.serving.bench import x: bench must be public
                if target[2] not in public:
                    problems.append("%s imports %s, a private module of the %s area" % (where, module, target[1]))
                    continue
            else:  # from remote.serving import bench, location: each module named must be public
                for imported in names:
                    if (remote / target[1] / (imported + ".py")).exists() and imported not in public:
                        problems.append("%s imports %s.%s, a private module of the %s area" % (where, module, imported, target[1]))
            for imported in names:
                if imported.startswith("_"):
                    problems.append("%s imports %s from %s, a private name" % (where, imported, module))
    for (a, b), where in sorted(arrows.items()):  # an arrow running back up: two areas that lean on each other
        if a < b and (b, a) in arrows:
            problems.append("the %s and %s areas import each other (%s, %s): one asks the other through the service registry"
                            % (a, b, where, arrows[b, a]))
    return problems


def test_the_core_imports_no_area_and_areas_only_each_others_public_modules():
    assert {"jobs", "history"} <= {p.name for p in (REPO_ROOT / "remote").iterdir() if (p / "__init__.py").exists()}
    assert layer_problems(REPO_ROOT) == []


def test_the_layer_guard_names_planted_imports(tmp_path):
    shutil.copytree(REPO_ROOT / "remote", tmp_path / "remote", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "remote" / "core" / "planted.py").write_text('"""Planted."""\n\nfrom ..jobs.store import JobStore\n')
    (tmp_path / "remote" / "fleet" / "planted.py").write_text(
        '"""Planted."""\n\nfrom ..jobs import store, supervisor\n\n\ndef f():\n    from remote.history.upkeep import HistoryReader\n'
        '    from ..jobs.store import _events\n')
    assert layer_problems(tmp_path) == [
        "remote/core/planted.py:3 imports remote.jobs.store: the core imports no area",
        "remote/fleet/planted.py:3 imports remote.jobs.supervisor, a private module of the jobs area",
        "remote/fleet/planted.py:7 imports remote.history.upkeep, a private module of the history area",
        "remote/fleet/planted.py:8 imports _events from remote.jobs.store, a private name",
    ]
    (tmp_path / "remote" / "jobs" / "planted.py").write_text('"""Planted."""\n\nfrom ..fleet import methods\n')
    assert layer_problems(tmp_path)[-1].startswith("the fleet and jobs areas import each other (remote/fleet/planted.py:3, "
                                                   "remote/jobs/planted.py:3)")
