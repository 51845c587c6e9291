"""Training runs as a hostile user writes them, against the real local agent: each a real job
writing a real log. A 4 MiB line, 1 MB lines of every shape that made a pattern backtrack,
binary bytes, a JSON line nested 5,000 deep: cut or refused, the run's later steps shown while it
still runs, one notice, the daemon answering pings meanwhile. A data generation printing a
60,000-digit line. A burst of 250,000 records (every one in the curves, none stamped in the
future, no point of the history store dropped). A fast run (20 steps/s, speculators' rich output
at 80 columns) whose curves give every step. 10,000 checkpoint directories (the journal grows by
one line per checkpoint), checkpoint links out of the save directory (never read) and a FIFO in a
checkpoint (named, never opened: the later checkpoints and steps still come). A run
whose reading fails shows its error and leaves the other runs alone."""

import glob
import json
import os
import sys
import textwrap
import threading

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for

pytestmark = pytest.mark.timeout(600)
LOG = os.path.join(os.path.dirname(__file__), "data", "speculators-train-80cols.log")
MB = 1000 * 1000


def start(client, tmp_path, name, body, *args, **params):
    script = tmp_path / ("%s.py" % name)
    script.write_text(textwrap.dedent(body))
    argv = [sys.executable, "-u", str(script)] + [str(a) for a in args]
    return client.call("training.start", dict({"argv": argv, "name": name}, **params))["id"]


@pytest.fixture
def release(tmp_path):
    """A file the tests' jobs wait for before they end: written when the test ends, pass or fail,
    so no job outlives its test."""
    path = tmp_path / "release"
    yield path
    path.write_text("")


def curves(client, job_id, points=2000):
    return client.call("training.curves", {"id": job_id, "points": points})


def job_dir(home, job_id):
    return glob.glob(os.path.join(str(home), "**", job_id), recursive=True)[0]


def training_service(client):
    return next(s for s in client.call("daemon.services", {})["services"] if s["name"] == "training")


class Pinger:
    """Pings the daemon over its own connection while a test waits: every ping must be answered."""

    def __init__(self):
        from tui.transport.connection import open_client

        self.client = open_client("local")
        self.answered, self.failed = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.05):
            try:
                self.client.call("ping", {}, timeout=30.0)
                self.answered += 1
            except Exception as exc:  # noqa: BLE001 - any failure is what the test reports
                self.failed.append(repr(exc))

    def stop(self):
        self._stop.set()
        self._thread.join(60)
        self.client.close()
        return self.answered, self.failed


HOSTILE = """
    import os, random, sys, time
    release, count = sys.argv[1], int(sys.argv[2])
    out = sys.stdout
    def step(n):
        out.write("step=%d loss=%.4f acc_0=0.5\\n" % (n, 10.0 / (n + 1)))
        out.flush()
    MB = 1000 * 1000
    shapes = ["9" * MB, " " * MB, "k=" + "1" * MB + "x", "a=1 " * (MB // 4), "1/" * (MB // 2), "=" * MB, "\\t " * (MB // 2),
              "[12:00:00] INFO" + " " * MB + "x", "INFO " + "a.py:1 " * (MB // 7), "[" * MB,
              "Train Epoch [1/2], position 0, " * (MB // 32), '{"a":"' + '\\\\"' * (MB // 2) + '"}',
              "{" + '"a":{' * 5000 + "}" * 5001]
    n = 0
    for shape in shapes:
        step(n); n += 1
        out.write(shape + "\\n")
    step(n); n += 1
    random.seed(7)
    sys.stdout.buffer.write(bytes(random.choice([b for b in range(256) if b not in (10, 13)]) for _ in range(MB)) + b"\\n")
    sys.stdout.buffer.flush()
    # 4 MiB in pieces, the reader meeting it half written, then the steps after it, slowly.
    for _ in range(16):
        out.write("x" * (256 << 10)); out.flush(); time.sleep(0.02)
    out.write("\\n")
    while n < count:
        step(n); n += 1
        time.sleep(0.02)
    while not os.path.exists(release):
        time.sleep(0.05)
"""


def test_hostile_lines_are_cut_or_refused_and_the_curves_keep_up(client, agent_home, tmp_path, release):
    pinger = Pinger()
    try:
        job_id = start(client, tmp_path, "hostile", HOSTILE, release, 40)
        healthy = start(client, tmp_path, "healthy", "import time\nfor n in range(30):\n    print('step=%d loss=1.0' % n, flush=True)\n"
                                                     "    time.sleep(0.02)\n")

        def all_steps():
            reply = curves(client, job_id)
            return reply if [s["step"] for s in reply["steps"]] == list(range(40)) else None

        reply = wait_for(all_steps, 300, interval_s=0.5)
    finally:
        answered, failed = pinger.stop()
    # Read while the job still runs (it waits for the release file), not at its end.
    assert reply["process_state"] == "running"
    assert [s["loss"] for s in reply["steps"]] == pytest.approx([round(10.0 / (n + 1), 4) for n in range(40)])
    assert reply["error"] is None
    assert reply["notices"] == ["1 line(s) of the log longer than 1 MiB were cut, not read (the first at byte %d)" % reply_cut_at(agent_home, job_id)]
    assert failed == [] and answered > 0
    assert training_service(client)["state"] == "running"
    other = wait_for(lambda: (lambda r: r if len(r["steps"]) == 30 else None)(curves(client, healthy)), 60)
    assert [s["step"] for s in other["steps"]] == list(range(30))


def reply_cut_at(home, job_id):
    """Where the 4 MiB line starts in the job's log (the one cut line)."""
    with open(os.path.join(job_dir(home, job_id), "output.log"), "rb") as f:
        return f.read().index(b"x" * 1000)


DATAGEN = """
    import sys, time
    print("Processing 50 samples", flush=True)
    print("9" * 60000, flush=True)
    print("1/" * 30000 + "/" + "2" * 30000, flush=True)
    for n in range(1, 51):
        sys.stderr.write("\\rGenerating: %d/50 [00:01<00:02, 25.0it/s]" % n)
        sys.stderr.flush()
        time.sleep(0.01)
    sys.stderr.write("\\n")
"""


def test_datagen_with_a_60000_digit_line_keeps_its_progress_and_the_daemon_answers(client, tmp_path):
    pinger = Pinger()
    try:
        job_id = start(client, tmp_path, "digits", DATAGEN, kind="datagen")

        def done():
            job = client.call("jobs.get", {"id": job_id})
            return job if (job.get("progress") or {}).get("done") == 50 else None

        job = wait_for(done, 120, interval_s=0.2)
    finally:
        answered, failed = pinger.stop()
    assert job["progress"]["total"] == 50 and job["progress"]["rate"] == pytest.approx(25.0)
    assert failed == [] and answered > 0


BURST = """
    import os, sys, time
    write = sys.stdout.write
    for n in range(250000):
        write("step=%d loss=%.6f\\n" % (n, 1.0 / (n + 1)))
    sys.stdout.flush()
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
"""


def test_a_burst_of_a_quarter_million_records_keeps_every_one_and_none_in_the_future(client, tmp_path, release):
    job_id = start(client, tmp_path, "burst", BURST, release)

    def read():
        reply = curves(client, job_id, points=5000)
        return reply if sum(s["count"] for s in reply["steps"]) == 250000 else None

    reply = wait_for(read, 540, interval_s=2.0)
    now = client.call("ping", {})["time"]
    steps = reply["steps"]
    assert len(steps) == 5000 and all(s["count"] == 50 for s in steps)
    assert [s["step_min"] for s in steps] == list(range(0, 250000, 50))
    assert steps[-1]["step"] == 249999 and steps[0]["loss_max"] == 1.0
    assert max(s["time"] for s in steps) <= now
    times = [s["time"] for s in steps]
    assert times == sorted(times)
    history = client.call("history.status", {})
    assert history["dropped_points"] == 0
    latest = [p for p in client.call("history.latest", {"source": "training", "name": "step"})["series"] if p["labels"]["job"] == job_id]
    assert latest and latest[0]["time"] <= now


FAST = """
    import sys, time
    template = open(sys.argv[1]).read()
    began = time.time()
    for step in range(40):
        time.sleep(max(0.0, began + step / 20.0 - time.time()))
        text = template.replace("global_step=0 ", ("global_step=%d" % step).ljust(14))
        sys.stdout.write("[%s]" % time.strftime("%H:%M:%S") + text[10:])
        sys.stdout.flush()
"""


def speculators_record():
    lines = open(LOG).read().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if "train/loss_0=" in line)
    last = next(i for i in range(first, len(lines)) if "global_step=" in lines[i])
    return "".join(lines[first:last + 1])


def test_a_fast_run_gives_every_step(client, tmp_path):
    template = tmp_path / "record.txt"
    template.write_text(speculators_record())
    job_id = start(client, tmp_path, "fast", FAST, template)
    reply = wait_for(lambda: (lambda r: r if len(r["steps"]) >= 40 else None)(curves(client, job_id)), 120, interval_s=0.5)
    assert [s["step"] for s in reply["steps"]] == list(range(40))
    assert all(s["count"] == 1 and s["full_acc"] for s in reply["steps"])
    assert reply["bucket_steps"] == 1


def write_checkpoint(path):
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        f.write('{"architectures": ["LlamaForCausalLMEagle3"]}')
    header = b'{"__metadata__":{}}'
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)


WAIT = """
    import os, sys, time
    print("step=0 loss=1.0", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
"""


def journal(home, job_id):
    path = os.path.join(job_dir(home, job_id), "checkpoints.jsonl")
    if not os.path.exists(path):
        return 0, 0
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n"), len(data)


def test_ten_thousand_checkpoints_journal_one_line_each(client, agent_home, tmp_path, release):
    save = tmp_path / "save"
    for number in range(10000):
        write_checkpoint(str(save / str(number)))
    job_id = start(client, tmp_path, "many", WAIT, release, save_dir=str(save))
    first = wait_for(lambda: (lambda j: j if j[0] >= 200 else None)(journal(agent_home, job_id)), 300, interval_s=0.2)
    second = wait_for(lambda: (lambda j: j if j[0] >= first[0] + 1000 else None)(journal(agent_home, job_id)), 300, interval_s=0.2)
    # One line per checkpoint announced: the bytes written per announcement stay one entry's,
    # however many entries the journal holds (the whole list was rewritten each time before).
    per_entry = (second[1] - first[1]) / (second[0] - first[0])
    assert per_entry == pytest.approx(first[1] / first[0], rel=0.2)
    assert per_entry < 2048
    with open(os.path.join(job_dir(agent_home, job_id), "checkpoints.jsonl")) as f:
        names = [json.loads(line)["name"] for line in f]
    assert len(names) == len(set(names))
    # A healthy run beside it is read all the while.
    healthy = start(client, tmp_path, "beside", "for n in range(20):\n    print('step=%d loss=1.0' % n, flush=True)\n")
    wait_for(lambda: len(curves(client, healthy)["steps"]) == 20, 120, interval_s=0.2)


def test_links_out_of_the_save_directory_are_never_read(client, tmp_path, release):
    save, outside = tmp_path / "save", tmp_path / "outside"
    write_checkpoint(str(save / "0"))
    # Outside, weights that block whoever opens them (a FIFO): a checkpoint read through a link
    # would hang its run's reading, and its entry would never come.
    os.makedirs(str(outside / "ckpt"))
    (outside / "ckpt" / "config.json").write_text("{}")
    os.mkfifo(str(outside / "ckpt" / "model.safetensors"))
    os.symlink(str(outside / "ckpt"), str(save / "1"))
    os.makedirs(str(save / "2"))
    (save / "2" / "config.json").write_text("{}")
    os.symlink(str(outside / "ckpt" / "model.safetensors"), str(save / "2" / "model.safetensors"))
    job_id = start(client, tmp_path, "links", WAIT, release, save_dir=str(save))

    def listed():
        entries = client.call("training.checkpoints", {"id": job_id})["checkpoints"]
        return entries if len(entries) == 2 else None

    entries = {e["name"]: e for e in wait_for(listed, 60, interval_s=0.2)}
    assert sorted(entries) == ["0", "2"]
    assert entries["2"]["verdict"] == "unreadable" and "links out of the save directory" in entries["2"]["reasons"][0]
    assert entries["0"]["format"] is not None or entries["0"]["verdict"] in ("broken", "unreadable")
    reply = wait_for(lambda: (lambda r: r if r["notices"] else None)(curves(client, job_id)), 30, interval_s=0.2)
    assert reply["notices"] == ["checkpoint directory 1 -> %s leads out of the save directory: not read" % (outside / "ckpt")]


STEP_AFTER_GO = """
    import os, sys, time
    print("step=0 loss=1.0", flush=True)
    while not os.path.exists(sys.argv[1]) and not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
    print("step=1 loss=0.5", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
"""


def test_a_fifo_in_a_checkpoint_is_named_and_later_checkpoints_and_steps_still_come(client, tmp_path, release):
    save, go = tmp_path / "save", tmp_path / "go"
    write_checkpoint(str(save / "0"))
    # A shard index that is a FIFO (opening it for reading waits for a writer, for good), and a
    # checkpoint after it.
    os.makedirs(str(save / "1"))
    (save / "1" / "config.json").write_text("{}")
    os.mkfifo(str(save / "1" / "model.safetensors.index.json"))
    write_checkpoint(str(save / "2"))
    job_id = start(client, tmp_path, "fifo", STEP_AFTER_GO, go, release, save_dir=str(save))

    def listed():
        entries = client.call("training.checkpoints", {"id": job_id})["checkpoints"]
        return entries if len(entries) == 3 else None

    entries = {e["name"]: e for e in wait_for(listed, 60, interval_s=0.2)}
    assert sorted(entries) == ["0", "1", "2"]
    assert entries["1"]["verdict"] == "broken"
    assert "cannot read model.safetensors.index.json: it is a FIFO, not a regular file" in entries["1"]["reasons"]
    go.write_text("")
    steps = wait_for(lambda: (lambda r: r if len(r["steps"]) == 2 else None)(curves(client, job_id)), 60, interval_s=0.2)
    assert [s["step"] for s in steps["steps"]] == [0, 1]


def test_a_run_whose_reading_fails_shows_its_error_and_the_others_go_on(client, agent_home, tmp_path, release):
    go = tmp_path / "go"
    broken = start(client, tmp_path, "broken", "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\n"
                                               "print('step=0 loss=1.0', flush=True)\nwhile not os.path.exists(sys.argv[2]):\n"
                                               "    time.sleep(0.05)\n", go, release)
    # Where the run keeps how far it read is a directory now: every save of it fails.
    state = os.path.join(job_dir(agent_home, broken), "training-state.json")
    if os.path.exists(state):
        os.remove(state)
    os.mkdir(state)
    go.write_text("")
    reply = wait_for(lambda: (lambda r: r if r["error"] else None)(curves(client, broken)), 60, interval_s=0.2)
    assert "training-state.json" in reply["error"]
    healthy = start(client, tmp_path, "fine", "for n in range(25):\n    print('step=%d loss=1.0' % n, flush=True)\n")
    other = wait_for(lambda: (lambda r: r if len(r["steps"]) == 25 else None)(curves(client, healthy)), 60, interval_s=0.2)
    assert other["error"] is None
    assert training_service(client)["state"] == "running"
    job = client.call("jobs.get", {"id": broken})
    assert "training-state.json" in (job["progress"] or {}).get("error", "")


def test_train_without_a_command_is_a_json_error(agent_home):
    answered = run_cli("train", "local", "--json", home=agent_home)
    assert answered.returncode == 2 and answered.stdout == ""
    error = json.loads(answered.stderr.strip().splitlines()[-1])["error"]
    assert error["type"] == "UsageError" and "after --" in error["message"]


def test_curves_of_a_failed_run_exit_1_with_the_curves(client, agent_home, tmp_path):
    job_id = start(client, tmp_path, "fails", "for n in range(5):\n    print('step=%d loss=1.0' % n, flush=True)\nraise SystemExit(3)\n")
    wait_for(lambda: client.call("jobs.get", {"id": job_id})["process_state"] == "failed", 60, interval_s=0.2)
    wait_for(lambda: len(curves(client, job_id)["steps"]) == 5, 60, interval_s=0.2)
    answered = run_cli("curves", "local", job_id, home=agent_home)
    assert answered.returncode == 1
    assert answered.stdout.startswith("step 4 ")
    assert answered.stderr.strip() == "specdeck: run %s failed (exit code 3)" % job_id
    answered = run_cli("curves", "local", job_id, "--json", home=agent_home)
    assert answered.returncode == 1 and len(json.loads(answered.stdout)["steps"]) == 5
    assert json.loads(answered.stderr)["error"]["type"] == "RunFailed"


def test_a_number_in_the_argv_is_a_one_line_bad_request_naming_it(client, tmp_path):
    from remote.core.protocol import RemoteError

    for argv in ([sys.executable, "train.py", "--epochs", 3], [sys.executable, "train.py", "--lr", 0.5], [sys.executable, None]):
        with pytest.raises(RemoteError) as caught:
            client.call("training.start", {"argv": argv, "name": "numbers"})
        assert caught.value.type == "BadRequest" and "not a string" in caught.value.message and "\n" not in caught.value.message
        assert "argv item %d" % (len(argv) - 1) in caught.value.message
    assert not [j for j in client.call("jobs.list", {})["jobs"] if j.get("name") == "numbers"]
