"""The jobs methods' replies, shaped like the rest of the wire: every reply an object
(`jobs.list` -> {jobs}, `jobs.forget` -> {forgotten, not_found}), `jobs.follow` opening with
{stream, seq, snapshot} like every follow, null taken as the default, and the interpreter
called `python` as downloads, serving and training call it. The real daemon and CLI."""

import json
import sys
import threading

from remote.core.words import LIVE_STATES as LIVE
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for



def ended(client, job_id):
    return wait_for(lambda: (lambda job: job["process_state"] not in LIVE and job)(client.call("jobs.get", {"id": job_id})), 30)


def test_list_and_forget_reply_with_objects_and_forget_names_an_unknown_id(client, agent_home):
    jobs = [client.call("jobs.submit", {"argv": ["true"]}) for _ in range(3)]
    for job in jobs:
        ended(client, job["id"])
    listed = client.call("jobs.list")
    assert list(listed) == ["jobs"] and [job["id"] for job in listed["jobs"]] == [job["id"] for job in jobs]
    first, second, kept = (job["id"] for job in jobs)
    reply = client.call("jobs.forget", {"ids": [first, "j99", "nonsense"]})
    assert reply == {"forgotten": [first], "not_found": ["j99", "nonsense"]}
    # The CLI forgets what it can, names what is not there, and says so in its exit code.
    result = run_cli("forget", "local", second, "j98", "j99")
    assert result.returncode == 1
    assert result.stdout.strip() == "forgot %s" % second
    assert result.stderr.strip() == "specdeck: no jobs j98, j99 on this host"
    assert [job["id"] for job in client.call("jobs.list")["jobs"]] == [kept]
    result = run_cli("forget", "local", "j97", "--json")
    assert result.returncode == 1 and json.loads(result.stdout) == {"forgotten": [], "not_found": ["j97"]}
    assert [job["id"] for job in json.loads(run_cli("jobs", "local", "--json", check=0).stdout)] == [kept]


def test_follow_opens_with_stream_seq_and_snapshot(client, agent_home):
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "echo one; echo two"]})
    ended(client, job["id"])
    reply = client.call("jobs.follow", {"id": job["id"], "stream": "log", "after": 4})
    assert reply == {"stream": "log", "seq": 4, "snapshot": False}
    # A client's subscription follows on from that seq: only what came after byte 4.
    texts, done = [], threading.Event()
    client.subscribe("jobs.follow", {"id": job["id"], "after": 4}, lambda data, seq: texts.append(data["text"]), lambda data: done.set())
    assert done.wait(30)
    assert "".join(texts) == "two\n"


def test_null_parameters_take_their_defaults(client, agent_home):
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "echo hello; sleep 300"], "env": None, "cwd": None})
    wait_for(lambda: "hello" in client.call("jobs.tail", {"id": job["id"]})["text"], 30)
    window = client.call("jobs.tail", {"id": job["id"], "offset": None, "max_bytes": None})
    assert window["offset"] == 0 and window["text"] == "hello\n"
    stopping = client.call("jobs.stop", {"id": job["id"], "grace_s": None})
    assert stopping["state"] in ("stopping", "stopped")
    assert ended(client, job["id"])["state"] == "stopped"


def test_submit_takes_the_interpreter_as_python(client, agent_home, tmp_path):
    script = tmp_path / "where.py"
    script.write_text("import sys; print(sys.executable)\n")  # not executable: it needs the interpreter
    job = client.call("jobs.submit", {"argv": [str(script)], "python": sys.executable})
    assert job["argv"] == [sys.executable, str(script)]
    assert ended(client, job["id"])["exit_code"] == 0
    assert client.call("jobs.tail", {"id": job["id"]})["text"].strip() == sys.executable
    # The CLI's --interpreter (--python names the agent's own interpreter) sends it so.
    result = run_cli("run", "local", "--interpreter", sys.executable, "--json", "--", str(script), check=0)
    job_id = json.loads(result.stdout)["id"]
    assert ended(client, job_id)["argv"] == [sys.executable, str(script)]
