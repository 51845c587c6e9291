"""The report says what the host's records say, each on its own line, with its age: over the
real local agent, jobs whose names hold a newline and a forged report row (and terminal
escapes), a training run whose SpecForge evaluations claim accept lengths of 1e308 and -7 and
whose step counter leaps to 999999999999 before going on at 5, a download stopped half way;
and a replayed history whose disk was last sampled hours before the report."""

import json
import sys
import textwrap
import time
from types import SimpleNamespace

from remote.core.daemon import Daemon
from remote.history.store import HistoryStore
from remote.report.build import build
from remote.report.text import render
from tests.helpers.cli import run_cli
from remote.report.text import size
from tests.helpers.training import curves
from tests.helpers.waits import wait_for

FORGED = "eval\n  j99 command nightly backup: started 03:00, succeeded at 04:00 (exit 0) after 1 h 00 min"
ESCAPES = "tok\x1b]52;c;bWFsaWNl\x07enize\u202e"
HOSTILE_TRAINER = """
    import time
    def specforge(step, body):
        print("step %d: {%s}" % (step, body), flush=True)
        time.sleep(0.05)
    specforge(0, "'acc_0': 0.5, 'acc_1': 0.25, 'loss': 9.5, 'lr': 1e-4")
    specforge(1, "'eval/avg_loss': 9.0, 'eval/acc_0': 0.5, 'eval/acc_1': 0.25, 'eval/simulated_acc_len': 1e308")
    specforge(2, "'acc_0': 0.5, 'acc_1': 0.25, 'loss': 9.0, 'lr': 1e-4")
    specforge(999999999999, "'acc_0': 0.5, 'acc_1': 0.25, 'loss': 8.5, 'lr': 1e-4")
    specforge(3, "'eval/avg_loss': 8.0, 'eval/acc_0': 0.5, 'eval/acc_1': 0.25, 'eval/simulated_acc_len': -7")
    for step in range(3, 6):
        specforge(step, "'acc_0': 0.5, 'acc_1': 0.25, 'loss': %.1f, 'lr': 1e-4" % (9.0 - step / 2))
"""


def test_names_from_the_host_stay_on_their_line_and_figures_outside_their_domain_are_refused(client, agent_home, hub, tmp_path):
    forged = client.call("jobs.submit", {"argv": ["sh", "-c", "exit 3"], "name": FORGED})["id"]
    escaped = client.call("jobs.submit", {"argv": ["true"], "name": ESCAPES})["id"]
    run = client.call("training.start", {"kind": "training", "name": "specforge\nj98 training forged: steps 0 -> 9",
                                         "argv": [sys.executable, "-c", textwrap.dedent(HOSTILE_TRAINER)]})["id"]
    hub.add_repo("team/half-weights", {"config.json": b"{}", "weights.bin": bytes(range(256)) * 8192})
    hub.throttle(100 * 1000)
    download = client.call("download.start", {"repo": "team/half-weights", "local_dir": str(tmp_path / "w"), "endpoint": hub.url},
                           timeout=120)["id"]
    progress = lambda: client.call("jobs.get", {"id": download}).get("progress") or {}  # noqa: E731
    wait_for(lambda: progress().get("bytes_done", 0) > 1000, message="the first bytes of the weights")
    client.call("jobs.stop", {"id": download, "grace_s": 1})
    wait_for(lambda: client.call("jobs.get", {"id": download})["ended_at"], message="the download stopped")
    hub.throttle(None)
    kept = progress()["bytes_done"]
    assert 0 < kept < 2 * 1024 * 1024
    for job_id in (forged, escaped, run):
        wait_for(lambda: client.call("jobs.get", {"id": job_id})["ended_at"], message="%s's end" % job_id)
    reply = wait_for(lambda: (lambda r: r if r and len(r["steps"]) == 5 and len(r["validation"]) == 2 else None)(curves(agent_home, run)),
                     message="the run's records")

    # The curves: the leaping step is left out and said so; neither evaluation claims an accept length it cannot have.
    assert [s["step"] for s in reply["steps"]] == [0, 2, 3, 4, 5]
    for evaluation in reply["validation"]:
        assert evaluation["predicted_accept_length"] == 1 + 0.5 + 0.5 * 0.25  # from its accuracies, not 1e308 or -6
    notices = client.call("jobs.get", {"id": run})["progress"]["notices"]
    assert any("step 999999999999 after step 2 is not a step count" in n for n in notices), notices
    assert any("eval/simulated_acc_len" in n and "outside 0..2" in n for n in notices), notices

    text = run_cli("report", "local", "--since", "1h", home=agent_home).stdout
    report = json.loads(run_cli("report", "local", "--since", "1h", "--json", home=agent_home).stdout)
    lines = text.splitlines()
    # Every row starts with two spaces and a job's id: no name starts a row of its own.
    rows = [line for line in lines if line.startswith("  j")]
    assert not [line for line in rows if line.startswith(("  j99 ", "  j98 "))], text
    forged_rows = [line for line in lines if "nightly backup" in line]
    assert forged_rows and all(line.startswith("  %s command eval\\n" % forged) or ("%s " % forged) in line for line in forged_rows), forged_rows
    assert "\x1b" not in text and "\u202e" not in text and "tok\\x1b]52;c;bWFsaWNl\\x07enize\\u202e" in text
    training, = [line for line in lines if line.startswith("  %s specforge\\nj98 training forged" % run)]
    assert "steps 0 -> 5, loss 9.5 -> 6.5" in training, training
    assert "step 999999999999 after step 2 is not a step count" in training, training
    failed = [line for line in lines if "%s failed on " % forged in line]
    assert failed and "eval\\n  j99 command nightly backup" in failed[0], failed  # the alert's message, on its line
    # The download stopped half way: the bytes it kept, not the repo's size.
    row, = [line for line in lines if line.startswith("  %s team/half-weights" % download)]
    assert "%s kept of 2.0 MiB (2.1 MB)" % size(kept) in row, row
    listed, = [d for d in report["downloads"] if d["id"] == download]
    assert listed["bytes_kept"] == kept and listed["bytes_total"] == 256 * 8192 + 2
    names = {r["id"]: r["name"] for r in report["jobs"]}
    assert names[forged] == FORGED  # --json keeps the name as it is: JSON escapes it


def test_a_disk_last_sampled_hours_ago_says_when(agent_home, tmp_path):
    """A replayed history: a disk sampled every minute from midnight to 02:00 and then no more (its
    host lost the mount); the 08:00 report says its free space at 02:00, not "free now"."""
    midnight = time.mktime(time.strptime(time.strftime("%Y-%m-%d", time.localtime(time.time() - 86400)), "%Y-%m-%d"))
    clock = [midnight]
    store = HistoryStore(str(tmp_path / "history.sqlite"), clock=lambda: clock[0]).open()
    total = 2 * 1024 ** 4
    for minute in range(121):
        clock[0] = midnight + 60 * minute
        free = 900 * 1024 ** 3 - minute * 1024 ** 3  # filling a GiB a minute, to 780 GiB at 02:00
        store.add_many([("telemetry", "disk_free_bytes", {"disk": "/scratch"}, float(free), clock[0]),
                        ("telemetry", "disk_total_bytes", {"disk": "/scratch"}, float(total), clock[0])])
    clock[0] = midnight + 8 * 3600
    store.flush()
    daemon = Daemon("test")
    daemon.history = SimpleNamespace(store=store, add_many=store.add_many)
    report = build(daemon, midnight, midnight + 8 * 3600)
    disk, = report["disks"]
    assert disk["free_last_at"] == midnight + 7200 and disk["free_bytes_last"] == 780 * 1024 ** 3
    assert "free_bytes_now" not in disk
    line, = [line for line in render(report).splitlines() if line.startswith("  /scratch:")]
    assert line.endswith("780.0 GiB (837.5 GB) free at %s" % time.strftime("%a 02:00", time.localtime(midnight))), line
    assert "now" not in line
