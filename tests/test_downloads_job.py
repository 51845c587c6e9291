"""The download job (remote/downloads/download.py) against a real HTTP fake hub (tests/hubserver.py).

Every job runs as its own process, as on the host: `remote.downloads.download.main([STEP, JOB_DIR])`
under this interpreter, JOB_DIR holding spec.json as the wire method writes it, with HF_ENDPOINT
pointing at the fake hub and HF_HOME in a temp dir. No test asserts a duration.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.downloads.output import fmt_size
from tests.hub_fixtures import blob
from tests.hubserver import FakeHub

REPO_ROOT = Path(__file__).resolve().parents[1]
# The interpreter the jobs run under, as the user names one on the host (e.g. a venv with another
# huggingface_hub): SPECDECK_TEST_JOB_PYTHON=/path/to/python pytest tests/test_downloads_job.py
JOB_PYTHON = os.environ.get("SPECDECK_TEST_JOB_PYTHON") or sys.executable
RUNNER = "import sys; from remote.downloads.download import main; sys.exit(main(sys.argv[1:]))"
SECRET = "hf_SpecdeckTestSecret7f3a9c21d4e8b6a0"
MB = 1024 * 1024


class Result:
    def __init__(self, code, stdout, stderr, job_dir):
        self.code = code
        self.stdout = stdout
        self.stderr = stderr
        self.job_dir = job_dir

    @property
    def progress(self):
        return read_progress(self.job_dir)

    @property
    def plan(self):
        with open(os.path.join(self.job_dir, "plan.json")) as f:
            return json.load(f)

    @property
    def json_line(self):
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return json.loads(lines[-1])

    def __repr__(self):
        return "Result(code=%r)\n--- stdout\n%s\n--- stderr\n%s" % (self.code, self.stdout, self.stderr[-3000:])


class Runner:
    def __init__(self, hub, tmp_path):
        self.hub = hub
        self.tmp = tmp_path
        self.count = 0

    def spec(self, repo, **kw):
        spec = {"repo": repo, "repo_type": "model", "revision": None, "files": [], "include": [], "exclude": [],
                "local_dir": str(self.tmp / "out"), "endpoint": None}
        spec.update(kw)
        return spec

    def env(self, job_dir, token=None, extra=None):
        env = {k: v for k, v in os.environ.items()
               if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_TOKEN_PATH", "HF_ENDPOINT")}
        env.update(HF_ENDPOINT=self.hub.url, HF_HOME=str(self.tmp / "hf_home"), HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        if token is not None:
            env["HF_TOKEN"] = token
        env.update(extra or {})
        return env

    def _prepare(self, spec):
        """A job directory with spec.json in it, as download.start leaves it."""
        self.count += 1
        job_dir = self.tmp / ("job%d" % self.count)
        job_dir.mkdir()
        (job_dir / "spec.json").write_text(json.dumps(spec))
        return str(job_dir)

    def run(self, cmd, spec, token=None, env=None, code=None, job_dir=None):
        """Run one step; `job_dir`: a step after another one in the same job (download after its plan)."""
        job_dir = job_dir or self._prepare(spec)
        p = subprocess.run([JOB_PYTHON, "-c", RUNNER, cmd, job_dir], cwd=str(self.tmp),
                           env=self.env(job_dir, token, env), capture_output=True, text=True)
        r = Result(p.returncode, p.stdout, p.stderr, job_dir)
        if code is not None:
            assert r.code == code, r
        return r

    def start(self, cmd, spec, token=None, env=None):
        job_dir = self._prepare(spec)
        out = open(self.tmp / ("job%d.log" % self.count), "w+")
        p = subprocess.Popen([JOB_PYTHON, "-c", RUNNER, cmd, job_dir], cwd=str(self.tmp),
                             env=self.env(job_dir, token, env), stdout=out, stderr=subprocess.STDOUT, text=True)
        p.job_dir = job_dir
        p.log = out
        return p


def read_progress(job_dir):
    """progress.json (the summary) with `files`: every file's entry, from files.jsonl beside it."""
    try:
        with open(os.path.join(job_dir, "progress.json")) as f:
            prog = json.load(f)
    except FileNotFoundError:
        return None
    prog["files"] = []
    try:
        with open(os.path.join(job_dir, "files.jsonl")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return prog
    keys = ("path", "bytes_total", "bytes_done", "bytes_checked", "state")
    prog["files"] = [dict(zip(keys, json.loads(line))) for line in lines[1:]]
    assert json.loads(lines[0])["total"] == len(prog["files"])
    return prog


def wait_for(proc, predicate):
    """Poll progress.json until predicate(progress) holds; None if the process ended first."""
    while True:
        prog = read_progress(proc.job_dir)
        if prog is not None and predicate(prog):
            return prog
        if proc.poll() is not None:
            return None
        time.sleep(0.02)


def file_progress(prog, path):
    return next(f for f in prog["files"] if f["path"] == path)


def all_text(root):
    """Every byte under root, decoded loosely: for grepping secrets."""
    chunks = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            if os.path.getsize(p) < 4 * MB:
                with open(p, "rb") as f:
                    chunks.append(f.read().decode("utf-8", "replace"))
    return "\n".join(chunks)


@pytest.fixture
def dl(hub, tmp_path):  # noqa: F811
    return Runner(hub, tmp_path)


def safetensors_bytes(n_bytes, seed):
    """A valid safetensors file with about n_bytes of pseudo-random float16 weights."""
    import numpy as np
    from safetensors.numpy import save

    rows = n_bytes // (2 * 1024)
    fc = np.frombuffer(blob(rows * 1024 * 2, seed), dtype=np.float16).reshape(rows, 1024)
    return save({"fc.weight": fc, "d2t": np.arange(32, dtype=np.int64)})


WEIGHTS = safetensors_bytes(6 * MB, 1)
CONFIG = b'{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168}\n'
TOKENIZER = blob(20000, 2)


def make_repo(hub, repo="org/drafter", **kw):  # noqa: F811
    files = {"config.json": CONFIG, "model.safetensors": WEIGHTS, "tok/tokenizer.json": TOKENIZER}
    return hub.add_repo(repo, files, **kw)


def check_tree(local_dir, files):
    for name, data in files.items():
        assert (Path(local_dir) / name).read_bytes() == data, name


# --------------------------------------------------------------------------- the happy path


def test_full_download_is_verified_and_identical(dl, hub):  # noqa: F811
    sha = make_repo(hub)
    spec = dl.spec("org/drafter")
    r = dl.run("download", spec, code=0)
    check_tree(spec["local_dir"], {"config.json": CONFIG, "model.safetensors": WEIGHTS,
                                   "tok/tokenizer.json": TOKENIZER})
    prog = r.progress
    assert prog["state"] == "verified"
    assert prog["verdict"]["status"] == "verified"
    assert prog["error"] is None
    assert prog["revision"] == sha
    total = len(CONFIG) + len(WEIGHTS) + len(TOKENIZER)
    assert prog["bytes_total"] == prog["bytes_done"] == total
    assert prog["eta_s"] == 0.0
    assert prog["rate_bytes_per_s"] > 0
    assert isinstance(prog["updated_at"], float)
    assert sorted(f["path"] for f in prog["files"]) == ["config.json", "model.safetensors", "tok/tokenizer.json"]
    for f in prog["files"]:
        assert f["state"] == "verified"
        assert f["bytes_done"] == f["bytes_total"]
        assert set(f) >= {"path", "bytes_total", "bytes_done", "state"}
    assert "verified 3 files" in r.stdout
    # The same local_dir records huggingface_hub writes, so hf tools see the files as current.
    meta = Path(spec["local_dir"]) / ".cache/huggingface/download/model.safetensors.metadata"
    commit, etag = meta.read_text().splitlines()[:2]
    assert commit == sha and etag == hashlib.sha256(WEIGHTS).hexdigest()
    assert not list(Path(spec["local_dir"]).rglob("*.incomplete"))


def test_plan_lists_files_sizes_hashes_and_space(dl, hub):  # noqa: F811
    sha = make_repo(hub)
    r = dl.run("download-plan", dl.spec("org/drafter"), code=0)
    plan = r.plan
    assert plan["ok"] is True and plan["revision"] == sha
    files = {f["path"]: f for f in plan["files"]}
    assert files["model.safetensors"]["size"] == len(WEIGHTS)
    assert files["model.safetensors"]["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert "sha256" not in files["config.json"]  # not in LFS: the hub gives a git blob id
    assert plan["total_bytes"] == len(CONFIG) + len(WEIGHTS) + len(TOKENIZER)
    assert plan["free_bytes"] > plan["total_bytes"]
    assert not os.path.exists(dl.spec("x")["local_dir"])  # a plan writes nothing


def test_include_exclude_and_explicit_files(dl, hub):  # noqa: F811
    make_repo(hub)
    spec = dl.spec("org/drafter", include=["*.json", "tok/"], exclude=["tok/*"])
    plan = dl.run("download-plan", spec, code=0).plan
    assert [f["path"] for f in plan["files"]] == ["config.json"]

    spec = dl.spec("org/drafter", files=["model.safetensors", "tok/tokenizer.json"])
    r = dl.run("download", spec, code=0)
    assert sorted(f["path"] for f in r.progress["files"]) == ["model.safetensors", "tok/tokenizer.json"]
    assert not (Path(spec["local_dir"]) / "config.json").exists()
    assert any(q["method"] == "POST" and "/paths-info/" in q["path"] for q in hub.requests)


def test_dataset_repo_and_pinned_revision(dl, hub):  # noqa: F811
    old = hub.add_repo("org/samples", {"data/train.jsonl": b'{"a": 1}\n' * 1000}, repo_type="dataset")
    hub.add_repo("org/samples", {"data/train.jsonl": b'{"a": 2}\n' * 1000}, repo_type="dataset")
    spec = dl.spec("org/samples", repo_type="dataset", revision=old)
    r = dl.run("download", spec, code=0)
    assert r.progress["revision"] == old
    assert (Path(spec["local_dir"]) / "data/train.jsonl").read_bytes() == b'{"a": 1}\n' * 1000


def test_a_paginated_tree_is_read_to_the_end(dl, hub):  # noqa: F811
    files = {"shard-%02d.bin" % i: blob(100 + i, 10 + i) for i in range(7)}
    hub.add_repo("org/many", files)
    hub.tree_page_size = 3
    spec = dl.spec("org/many", include=["shard-*"], exclude=["shard-00.bin"])
    r = dl.run("download", spec, code=0)
    assert len(r.progress["files"]) == 6
    check_tree(spec["local_dir"], {k: v for k, v in files.items() if k != "shard-00.bin"})
    assert len([q for q in hub.requests if "/tree/" in q["path"]]) == 3


def test_two_jobs_into_one_folder_take_turns(dl, hub):  # noqa: F811
    make_repo(hub)
    hub.throttle(256 * 1024)  # slow until the second job is seen waiting
    spec = dl.spec("org/drafter", files=["model.safetensors"])
    first = dl.start("download", spec)
    assert wait_for(first, lambda p: p["bytes_done"] > 0) is not None
    second = dl.start("download", spec)
    log = ""
    while "waiting for another process" not in log and second.poll() is None:
        time.sleep(0.05)
        second.log.seek(0)
        log = second.log.read()
    hub.throttle(None)
    assert first.wait() == 0 and second.wait() == 0
    second.log.seek(0)
    log = second.log.read()
    assert "waiting for another process" in log and "already here and intact" in log
    assert hub.bytes_served("org/drafter", "model.safetensors") == len(WEIGHTS)
    assert (Path(spec["local_dir"]) / "model.safetensors").read_bytes() == WEIGHTS


def test_spec_endpoint_wins_over_environment(dl, hub, tmp_path):  # noqa: F811
    # Two hubs with the same repo: the spec names one, HF_ENDPOINT the other. The bytes must
    # come from the one the spec names, and the other must not be asked anything.
    make_repo(hub)
    decoy = FakeHub(root=str(tmp_path / "decoy")).start()
    try:
        make_repo(decoy)
        spec = dl.spec("org/drafter", endpoint=hub.url, files=["config.json"])
        r = dl.run("download", spec, env={"HF_ENDPOINT": decoy.url}, code=0)
        assert r.progress["state"] == "verified"
        assert hub.bytes_served("org/drafter", "config.json") == len(CONFIG)
        assert [q for q in hub.requests if "/api/" in q["path"]]
        assert decoy.requests == []
    finally:
        decoy.stop()


def test_download_reuses_the_plan_without_asking_the_hub_again(dl, hub):  # noqa: F811
    sha = make_repo(hub)
    spec = dl.spec("org/drafter")
    planned = dl.run("download-plan", spec, code=0)
    asked_by_plan = len(hub.requests)
    assert any("/api/" in q["path"] for q in hub.requests)
    r = dl.run("download", spec, job_dir=planned.job_dir, code=0)
    assert r.progress["state"] == "verified" and r.progress["revision"] == sha
    assert "(as planned)" in r.stdout
    # Only file bytes were asked for: no repo info, no tree listing, no HEAD probe.
    asked_by_download = hub.requests[asked_by_plan:]
    assert asked_by_download and all(q["method"] == "GET" and "/resolve/" in q["path"] for q in asked_by_download)
    check_tree(spec["local_dir"], {"config.json": CONFIG, "model.safetensors": WEIGHTS,
                                   "tok/tokenizer.json": TOKENIZER})


def test_complete_files_are_not_fetched_again(dl, hub):  # noqa: F811
    make_repo(hub)
    spec = dl.spec("org/drafter")
    dl.run("download", spec, code=0)
    before = hub.bytes_served("org/drafter", "model.safetensors")
    r = dl.run("download", spec, code=0)
    assert hub.bytes_served("org/drafter", "model.safetensors") == before
    assert {f["state"] for f in r.progress["files"]} == {"verified"}
    assert "already here and intact" in r.stdout
    assert r.progress["rate_bytes_per_s"] == 0


def test_snapshot_download_sees_our_files_as_current(dl, hub):  # noqa: F811
    sha = make_repo(hub)
    spec = dl.spec("org/drafter")
    dl.run("download", spec, code=0)
    gets = len([q for q in hub.requests if q["method"] == "GET" and q.get("file")])
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "snapshot_download(sys.argv[1], revision=sys.argv[2], local_dir=sys.argv[3])")
    subprocess.run([JOB_PYTHON, "-c", code, "org/drafter", sha, spec["local_dir"]], check=True,
                   env=dl.env(str(dl.tmp / "unused")), capture_output=True)
    assert len([q for q in hub.requests if q["method"] == "GET" and q.get("file")]) == gets


# --------------------------------------------------------------------------- resume


def test_dropped_connection_is_resumed_in_the_same_run(dl, hub):  # noqa: F811
    make_repo(hub)
    hub.drop_connection("org/drafter", "model.safetensors", after_bytes=2 * MB, times=1)
    spec = dl.spec("org/drafter")
    r = dl.run("download", spec, code=0)
    assert (Path(spec["local_dir"]) / "model.safetensors").read_bytes() == WEIGHTS
    starts = hub.range_starts("org/drafter", "model.safetensors")
    assert starts[0] == 0 and len(starts) == 2 and starts[1] == 2 * MB
    assert hub.bytes_served("org/drafter", "model.safetensors") < 2 * len(WEIGHTS)
    assert "retrying from byte 2,097,152" in r.stdout


def test_a_link_that_drops_every_connection_still_finishes(dl, hub):  # noqa: F811
    make_repo(hub)
    hub.drop_connection("org/drafter", "model.safetensors", after_bytes=MB, times=None)
    spec = dl.spec("org/drafter", files=["model.safetensors"])
    dl.run("download", spec, code=0)
    starts = hub.range_starts("org/drafter", "model.safetensors")
    assert starts == sorted(starts) and len(starts) >= 7
    assert hub.bytes_served("org/drafter", "model.safetensors") == len(WEIGHTS)


def test_second_run_resumes_from_the_bytes_it_had(dl, hub):  # noqa: F811
    make_repo(hub)
    cut = 3 * MB + 17
    hub.drop_connection("org/drafter", "model.safetensors", after_bytes=cut, times=None)
    spec = dl.spec("org/drafter")
    first = dl.run("download", spec, env={"SPECDECK_DOWNLOAD_RETRIES": "0"}, code=2)
    prog = first.progress
    assert prog["state"] == "failed" and prog["verdict"] is None
    assert "model.safetensors" in prog["error"] and "\n" not in prog["error"]
    assert file_progress(prog, "model.safetensors")["bytes_done"] == cut
    etag = hashlib.sha256(WEIGHTS).hexdigest()
    partial = list(Path(spec["local_dir"]).rglob("*.%s.incomplete" % etag))
    assert len(partial) == 1 and partial[0].stat().st_size == cut

    hub.reset_knobs()
    served_before = hub.bytes_served("org/drafter", "model.safetensors")
    second = dl.run("download", spec, code=0)
    assert second.progress["state"] == "verified"
    assert hub.range_starts("org/drafter", "model.safetensors")[-1] == cut
    assert hub.bytes_served("org/drafter", "model.safetensors") - served_before == len(WEIGHTS) - cut
    assert hub.bytes_served("org/drafter", "model.safetensors") < 2 * len(WEIGHTS)
    assert (Path(spec["local_dir"]) / "model.safetensors").read_bytes() == WEIGHTS
    assert "resuming at byte 3,145,745" in second.stdout


def test_killed_job_resumes_on_the_next_run(dl, hub):  # noqa: F811
    make_repo(hub)
    hub.throttle(2 * MB)
    spec = dl.spec("org/drafter", files=["model.safetensors"])
    proc = dl.start("download", spec)
    prog = wait_for(proc, lambda p: p["files"] and file_progress(p, "model.safetensors")["bytes_done"] >= MB)
    assert prog is not None, "the job ended before 1 MiB arrived"
    proc.kill()
    proc.wait()
    hub.reset_knobs()
    partial = list(Path(spec["local_dir"]).rglob("*.incomplete"))
    assert len(partial) == 1
    have = partial[0].stat().st_size
    assert 0 < have < len(WEIGHTS)
    r = dl.run("download", spec, code=0)
    assert hub.range_starts("org/drafter", "model.safetensors")[-1] == have
    assert hub.bytes_served("org/drafter", "model.safetensors") < 2 * len(WEIGHTS)
    assert r.progress["verdict"]["status"] == "verified"
    assert (Path(spec["local_dir"]) / "model.safetensors").read_bytes() == WEIGHTS


def test_sigterm_stops_and_keeps_the_partial_file(dl, hub):  # noqa: F811
    make_repo(hub)
    hub.throttle(MB)
    spec = dl.spec("org/drafter", files=["model.safetensors"])
    proc = dl.start("download", spec)
    assert wait_for(proc, lambda p: p["state"] == "downloading" and p["bytes_done"] > 0) is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait() == 2
    prog = read_progress(proc.job_dir)
    # A stop that was asked for is no failure: it says so, and what is kept on disk.
    assert prog["state"] == "stopped" and prog["final"] and prog["error"] is None, prog
    partial = list(Path(spec["local_dir"]).rglob("*.incomplete"))
    assert len(partial) == 1
    kept = partial[0].stat().st_size
    assert prog["verdict"]["status"] == "stopped" and prog["verdict"]["kept_bytes"] == kept > 0
    assert prog["verdict"]["message"] == "%s on disk kept for the next run" % fmt_size(kept)


def test_progress_is_live_while_downloading_and_its_eta_counts_only_the_transfer(dl, hub):  # noqa: F811
    make_repo(hub)
    rate = 3 * MB
    hub.throttle(rate)
    hub.first_byte_delay(2.0)  # the hub thinks before its first byte, as a cold CDN does
    spec = dl.spec("org/drafter", files=["model.safetensors"])
    proc = dl.start("download", spec)
    seen = []

    def watch(p):
        seen.append(p)
        return p["state"] == "downloading" and 0 < p["bytes_done"] < p["bytes_total"] and p["rate_bytes_per_s"] > 0 \
            and p["eta_s"] is not None

    first = wait_for(proc, watch)
    assert first is not None
    # No figure while nothing moves; the first ETA is of the transfer (the hub sends at most
    # `rate`, so the truth is at least remaining / rate), not of the wait averaged in.
    assert all(p["eta_s"] is None and not p["rate_bytes_per_s"] for p in seen if not p["bytes_done"])
    remaining_s = (first["bytes_total"] - first["bytes_done"]) / rate
    assert first["eta_s"] < 4 * remaining_s, first
    assert first["rate_bytes_per_s"] > rate / 4, first
    assert proc.wait() == 0
    states = [p["state"] for p in seen]
    assert states.index("downloading") < len(states)
    final = read_progress(proc.job_dir)
    assert final["state"] == "verified"
    updates = [p["updated_at"] for p in seen]
    assert updates == sorted(updates)


# --------------------------------------------------------------------------- wrong bytes


def test_corrupted_bytes_give_a_mismatch_naming_the_file(dl, hub):  # noqa: F811
    make_repo(hub)
    hub.corrupt("org/drafter", "model.safetensors", offset=4 * MB, length=3)
    spec = dl.spec("org/drafter")
    proc = dl.start("download", spec)
    states = set()
    while proc.poll() is None:
        p = read_progress(proc.job_dir)
        if p:
            states.add(p["state"])
        time.sleep(0.01)
    assert proc.returncode == 1
    prog = read_progress(proc.job_dir)
    states.add(prog["state"])
    assert "verified" not in states
    assert prog["state"] == "mismatch"
    v = prog["verdict"]
    assert v["status"] == "mismatch" and v["file"] == "model.safetensors"
    expected = hashlib.sha256(WEIGHTS).hexdigest()
    assert v["message"].startswith("mismatch in model.safetensors: sha256 %s.. expected, " % expected[:12])
    assert v["message"].endswith(".. found")
    assert file_progress(prog, "model.safetensors")["state"] == "mismatch"
    assert file_progress(prog, "config.json")["state"] == "verified"
    proc.log.seek(0)
    assert "mismatch in model.safetensors" in proc.log.read()

    # The next run notices the bad file, fetches it again, and the good bytes verify.
    hub.reset_knobs()
    r = dl.run("download", spec, code=0)
    assert "fetching it again" in r.stdout
    assert (Path(spec["local_dir"]) / "model.safetensors").read_bytes() == WEIGHTS


def test_corrupted_small_file_fails_its_git_blob_id(dl, hub):  # noqa: F811
    make_repo(hub)
    hub.corrupt("org/drafter", "config.json", offset=2, length=1)
    r = dl.run("download", dl.spec("org/drafter"), code=1)
    v = r.progress["verdict"]
    assert v["file"] == "config.json" and "git blob id" in v["message"]


def test_verify_subcommand_finds_local_damage(dl, hub):  # noqa: F811
    make_repo(hub)
    spec = dl.spec("org/drafter")
    dl.run("download", spec, code=0)
    r = dl.run("verify", spec, code=0)
    assert r.json_line["status"] == "verified" and r.progress["state"] == "verified"

    weights = Path(spec["local_dir"]) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[12345] ^= 1
    weights.write_bytes(bytes(data))
    r = dl.run("verify", spec, code=1)
    assert r.json_line["status"] == "mismatch" and r.json_line["file"] == "model.safetensors"
    assert "sha256" in r.json_line["message"]
    assert r.progress["state"] == "mismatch"

    weights.write_bytes(WEIGHTS[:1000])
    r = dl.run("verify", spec, code=1)
    assert r.json_line["message"] == "mismatch in model.safetensors: %s bytes expected, 1,000 found" % format(
        len(WEIGHTS), ",")

    weights.unlink()
    r = dl.run("verify", spec, code=1)
    assert "missing" in r.json_line["message"]
    assert file_progress(r.progress, "model.safetensors")["state"] == "missing"


def test_verify_without_the_hub_uses_recorded_hashes(dl, hub):  # noqa: F811
    make_repo(hub)
    spec = dl.spec("org/drafter")
    dl.run("download", spec, code=0)
    offline = dict(spec, endpoint="http://127.0.0.1:9")
    r = dl.run("verify", offline, code=0)
    assert r.json_line["status"] == "verified"
    assert "local metadata" in r.json_line["message"]
    (Path(spec["local_dir"]) / "config.json").write_bytes(b"{}")
    r = dl.run("verify", offline, code=1)
    assert r.json_line["file"] == "config.json"


# --------------------------------------------------------------------------- plan errors


def _plan_error(dl, spec, **kw):
    r = dl.run("download-plan", spec, code=2, **kw)
    answer = r.plan
    assert answer["ok"] is False
    err = answer["error"]
    assert "\n" not in err["message"] and err["message"].strip() == err["message"] and err["message"]
    return err


@pytest.mark.parametrize("case, etype, words", [
    ("no_repo", "RepoNotFound", "org/nothing"),
    ("no_file", "FileNotFound", "weights.bin"),
    ("no_file_glob", "FileNotFound", "*.gguf"),
    ("no_revision", "RevisionNotFound", "v9.9"),
    ("gated", "AuthRequired", "gated"),
    ("gated_wrong_token", "AuthRequired", "gated"),
    ("anonymous_refused", "AuthRequired", "refused an anonymous request for org/private (HTTP 401): the repository is "
                                          "gated or private, and this host sends no token; set HF_TOKEN"),
    ("unreachable", "NetworkUnreachable", "127.0.0.1:9"),
    ("bad_spec", "BadRequest", "repo_type"),
    ("folder_as_file", "BadRequest", 'use include ["tok/"]'),
])
def test_plan_errors(dl, hub, case, etype, words):  # noqa: F811
    make_repo(hub)
    make_repo(hub, "org/gated", gated=True)
    make_repo(hub, "org/private", private="credentials")  # a mirror's answer to a request without a token
    spec = {
        "no_repo": dl.spec("org/nothing"),
        "no_file": dl.spec("org/drafter", files=["config.json", "weights.bin"]),
        "no_file_glob": dl.spec("org/drafter", include=["*.gguf"]),
        "no_revision": dl.spec("org/drafter", revision="v9.9"),
        "gated": dl.spec("org/gated"),
        "gated_wrong_token": dl.spec("org/gated"),
        "anonymous_refused": dl.spec("org/private"),
        "unreachable": dl.spec("org/drafter", endpoint="http://127.0.0.1:9"),
        "bad_spec": dl.spec("org/drafter", repo_type="space"),
        "folder_as_file": dl.spec("org/drafter", files=["tok"]),
    }[case]
    token = SECRET if case == "gated_wrong_token" else None
    err = _plan_error(dl, spec, token=token)
    assert err["type"] == etype, err
    assert words in err["message"], err
    assert "token (invalid credentials)" not in err["message"]  # no token was sent: none was refused
    assert SECRET not in json.dumps(err)


def test_gated_repo_with_the_right_token_plans_and_downloads(dl, hub):  # noqa: F811
    make_repo(hub, "org/gated", gated=True)
    spec = dl.spec("org/gated")
    assert dl.run("download-plan", spec, token=hub.token, code=0).plan["ok"] is True
    dl.run("download", spec, token=hub.token, code=0)


def test_download_of_a_missing_repo_fails_with_one_line(dl, hub):  # noqa: F811
    r = dl.run("download", dl.spec("org/nothing"), code=2)
    prog = r.progress
    assert prog["state"] == "failed" and prog["error"].startswith("RepoNotFound: ")
    assert "\n" not in prog["error"]
    assert prog["error"] in r.stdout
    assert not os.path.exists(dl.spec("x")["local_dir"])


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % p.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_not_enough_disk_says_no_space_and_writes_nothing(dl, hub, tiny_fs):  # noqa: F811
    make_repo(hub)
    spec = dl.spec("org/drafter", local_dir=str(tiny_fs / "models" / "drafter"))
    err = _plan_error(dl, spec)
    assert err["type"] == "NoSpace"
    need = len(CONFIG) + len(WEIGHTS) + len(TOKENIZER)
    # A few MB say so in MB (never "0.00631 GB"), with the exact count beside.
    assert err["message"].startswith("needs %.2f MB (%s bytes) on %s, " % (need / 1e6, format(need, ","), tiny_fs))
    assert err["message"].endswith(" free")
    assert err["needed_bytes"] == need
    assert err["free_bytes"] <= MB
    r = dl.run("download", spec, code=2)
    assert r.progress["error"].startswith("NoSpace: needs ")
    assert os.listdir(tiny_fs) == []
    # What fits still downloads.
    small = dict(spec, files=["config.json"])
    dl.run("download", small, code=0)


def test_the_token_never_leaves_the_process(dl, hub):  # noqa: F811
    make_repo(hub, "org/gated", gated=True, tokens=[SECRET])
    hub.lfs_redirect = True  # LFS bytes come from another host name, like a CDN
    spec = dl.spec("org/gated")
    outputs = []
    r = dl.run("download-plan", spec, token=SECRET, code=0)
    outputs += [r.stdout, r.stderr]
    r = dl.run("download", spec, token=SECRET, code=0)
    outputs += [r.stdout, r.stderr, all_text(r.job_dir), all_text(spec["local_dir"])]
    r = dl.run("verify", spec, token=SECRET, code=0)
    outputs += [r.stdout, r.stderr, all_text(r.job_dir)]
    # Failures too: a wrong revision, a missing file, a failing link.
    outputs.append(json.dumps(_plan_error(dl, dict(spec, revision="nope"), token=SECRET)))
    outputs.append(json.dumps(_plan_error(dl, dict(spec, files=["nope.bin"]), token=SECRET)))
    hub.drop_connection("org/gated", "model.safetensors", after_bytes=MB, times=None)
    r = dl.run("download", dict(spec, local_dir=str(dl.tmp / "out2")), token=SECRET,
               env={"SPECDECK_DOWNLOAD_RETRIES": "0"}, code=2)
    outputs += [r.stdout, r.stderr, all_text(r.job_dir)]
    for text in outputs:
        assert SECRET not in text
        assert SECRET[3:20] not in text
    resolve = [q for q in hub.requests if "/resolve/" in q["path"]]
    cdn = [q for q in hub.requests if q.get("cdn")]
    assert resolve and all(q["auth"] for q in resolve)
    assert cdn and not any(q["auth"] for q in cdn)  # the token is not sent to another host


# --------------------------------------------------------------------------- without huggingface_hub, with a checkpoint inspector


def test_module_imports_and_plans_without_huggingface_hub(dl, hub, tmp_path):  # noqa: F811
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text("import sys\nsys.modules['huggingface_hub'] = None\n")
    env = {"PYTHONPATH": "%s:%s" % (block, REPO_ROOT)}
    err = _plan_error(dl, dl.spec("org/drafter"), env=env)
    assert err["type"] == "MissingDependency" and "huggingface_hub" in err["message"]
    r = dl.run("download", dl.spec("org/drafter"), env=env, code=2)
    assert r.progress["error"].startswith("MissingDependency")


INSPECTOR = r"""
import sys, types, json
report = json.loads(sys.argv.pop(1))
mod = types.ModuleType("remote.checkpoints.report")
mod.calls = []
def inspect(path, sha256=False):
    mod.calls.append(path)
    print("inspect called on", path, "sha256=%s" % sha256)
    return report
mod.inspect = inspect
import remote.checkpoints
sys.modules["remote.checkpoints.report"] = mod
remote.checkpoints.report = mod
from remote.downloads.download import main
sys.exit(main(sys.argv[1:]))
"""


def _run_with_inspector(dl, spec, report):
    job_dir = dl._prepare(spec)
    p = subprocess.run([JOB_PYTHON, "-c", INSPECTOR, json.dumps(report), "download", job_dir],
                       env=dl.env(job_dir), capture_output=True, text=True)
    return Result(p.returncode, p.stdout, p.stderr, job_dir)


def test_checkpoint_errors_make_the_verdict_corrupt(dl, hub):  # noqa: F811
    make_repo(hub)
    spec = dl.spec("org/drafter")
    report = {"problems": [{"level": "warning", "message": "no embed_tokens (shared with the target)"},
                           {"level": "error", "message": "model.safetensors: data ends at byte 100, header says 200"}]}
    r = _run_with_inspector(dl, spec, report)
    assert r.code == 1, r
    assert "inspect called on %s sha256=False" % spec["local_dir"] in r.stdout
    prog = r.progress
    assert prog["state"] == "corrupt"
    assert prog["verdict"] == {"status": "corrupt",
                               "message": "corrupt: model.safetensors: data ends at byte 100, header says 200"}


def test_checkpoint_warnings_keep_it_verified(dl, hub):  # noqa: F811
    make_repo(hub)
    spec = dl.spec("org/drafter")
    report = {"problems": [{"level": "warning", "message": "no embed_tokens (shared with the target)"}]}
    r = _run_with_inspector(dl, spec, report)
    assert r.code == 0, r
    assert r.progress["verdict"]["status"] == "verified"
    assert "no embed_tokens" in r.progress["verdict"]["message"]


def test_checkpoint_inspection_skipped_for_a_partial_shard_set(dl, hub):  # noqa: F811
    hub.add_repo("org/sharded", {"model-00001-of-00002.safetensors": blob(1000, 3),
                                 "model-00002-of-00002.safetensors": blob(1000, 4)})
    spec = dl.spec("org/sharded", files=["model-00001-of-00002.safetensors"])
    r = _run_with_inspector(dl, spec, {"problems": [{"level": "error", "message": "shard 2 missing"}]})
    assert r.code == 0, r
    assert "inspect called" not in r.stdout
    assert "skipped" in r.progress["verdict"]["message"]


def test_truncated_safetensors_served_consistently_is_corrupt(dl, hub):  # noqa: F811
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    good = st.save({"fc.weight": np.ones((64, 192), dtype=np.float32), "d2t": np.zeros((32,), dtype=np.int64)})
    hub.add_repo("org/broken", {"config.json": CONFIG, "model.safetensors": good[:-1000]})
    spec = dl.spec("org/broken")
    r = dl.run("download", spec)
    assert r.code == 1, r
    assert r.progress["state"] == "corrupt"
    assert r.progress["verdict"]["message"].startswith("corrupt: ")
