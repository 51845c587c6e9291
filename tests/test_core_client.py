"""The client of a headless command (no `reconnect`) reads the link on the thread that calls
(tui/transport/client.py): what that must not change, against a real agent on this machine.
Calls from several threads each get their own answer; a host that stops answering is still
noticed by the heartbeat, within `dead_after_s` rather than the call's own timeout; a stream
opened on such a client still delivers."""

import os
import signal
import threading

import pytest

from tui.transport.client import AgentClient, Disconnected
from tui.transport.connection import LocalLink


@pytest.fixture
def headless(agent_home):
    links = []

    def connect(reconnecting=False):
        links.append(LocalLink())
        return links[-1]

    client = AgentClient(connect, heartbeat_s=0.4, dead_after_s=1.5).start()
    yield client, links
    for link in links:
        try:
            os.kill(link.process.pid, signal.SIGCONT)
        except OSError:
            pass
    client.close()


def test_calls_from_several_threads_each_get_their_own_answer(headless, tmp_path):
    client, _ = headless
    folders = []
    for index in range(4):
        folder = tmp_path / ("folder-%d" % index)
        folder.mkdir()
        (folder / ("only-in-%d" % index)).write_text("x")
        folders.append(folder)
    answers, failures = {index: [] for index in range(4)}, []

    def ask(index):
        try:
            for _ in range(25):
                listing = client.call("fs.list", {"path": str(folders[index])})
                answers[index].append([entry["name"] for entry in listing["entries"]])
        except Exception as exc:  # the assertion below names it
            failures.append(repr(exc))

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    for index in range(4):
        assert answers[index] == [["only-in-%d" % index]] * 25


def test_a_host_that_stops_answering_is_noticed_by_the_heartbeat(headless):
    client, links = headless
    assert "time" in client.call("ping")
    os.kill(links[0].process.pid, signal.SIGSTOP)  # the link stays open and says nothing
    with pytest.raises(Disconnected, match="no answer from the host for"):
        client.call("daemon.info", timeout=60)
    assert client.state == "failed"


def test_a_stream_on_a_headless_client_delivers(headless, tmp_path):
    client, _ = headless
    assert client.call("ping")  # read on this thread first: the stream's reader takes over from here
    records, arrived = [], threading.Event()

    def on_data(data, seq):
        records.extend(data.get("records") or [])
        arrived.set()

    client.subscribe("jobs.events", {}, on_data)
    job = client.call("jobs.submit", {"argv": ["true"], "cwd": str(tmp_path)})
    for _ in range(60):
        if any(record.get("id") == job["id"] for record in records):
            break
        arrived.clear()
        arrived.wait(0.5)
    assert job["id"] in [record.get("id") for record in records]
