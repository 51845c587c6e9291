"""SGLang wired in, through the real agent: a server job started with `serve --engine sglang`
(SGLang's recorded answers and decode lines, tests/sglang_server.py, where SGLang cannot run)
gives `spec --json` its accept length as the mean of its log's decode lines, its gauges as the
latest value with their age, and the speculative settings its /get_server_info says; the same
server attached by URL with no log gives only its gauges, said to be the latest value, not a window."""

import json
import sys

import pytest

from tests import sglang_server
from tests.helpers.cli import REPO_ROOT, run_cli
from tests.helpers.vllm import free_port
from tests.helpers.waits import wait_for

TARGET = "meta-llama/Llama-3.1-8B-Instruct"  # hub ids: nothing on disk to check, as on a GPU host
DRAFTER = "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
LOGGED = [2.84, 3.12, 3.00, 2.50, 2.70, 3.40]  # accept len of tests/data/sglang/decode.log's decode lines
SETTINGS = {"algorithm": "EAGLE3", "draft_model_path": DRAFTER, "num_steps": 5, "eagle_topk": 8, "num_draft_tokens": 32,
            "avg_accept_length": 2.93, "version": "0.5.3rc2"}


def test_an_sglang_server_job_and_an_attached_url(client, tmp_path):
    standin = sglang_server.install(str(tmp_path / "engine"))
    port = free_port()
    started = run_cli("serve", "local", TARGET, "--engine", "sglang", "--drafter", DRAFTER, "--port", port, "--python", sys.executable,
                      "--env", "PYTHONPATH=%s:%s" % (standin, REPO_ROOT), "--wait", "--force", "--json", check=0)
    job_id = json.loads(started.stdout)["id"]
    try:
        windowed = wait_for(lambda: (lambda f: f if f.get("reading") == "window" and f.get("lines") == 6 else None)(
            client.call("serving.stats", {"id": job_id})), 30)
        assert windowed["source"] == "log windows" and windowed["log_age_s"] >= 0
        as_json = json.loads(run_cli("spec", "local", job_id, "--json", check=0).stdout)
        assert as_json["engine"] == "sglang" and as_json["reading"] == "window"
        assert as_json["accept_length"] == pytest.approx(sum(LOGGED) / len(LOGGED))  # the lines' mean, not the gauge's 3.4
        assert sum(w["lines"] for w in as_json["windows"]) == 6
        assert as_json["speculative"] == SETTINGS
        assert as_json["gauges"]["accept_length"] == 3.4 and as_json["gauges"]["age_s"] < 5
        assert as_json["stale"] is False

        # The same server by URL, no log: its gauges, each the latest value with its age.
        url = "http://127.0.0.1:%d" % port
        # Its settings come from its server info, read beside the first scrape: waited for.
        attached = wait_for(lambda: (lambda reply: reply if reply.get("speculative") else None)(
            json.loads(run_cli("spec", "local", "--url", url, "--json", check=0).stdout)), 30,
            message="the attached server's settings")
        assert attached["reading"] == "latest" and attached["source"] == "gauges" and attached["window_s"] is None
        assert attached["accept_length"] == 3.4 and attached["draft_acceptance_rate"] == 0.6
        assert attached["gauges"]["age_s"] is not None and "windows" not in attached
        assert attached["speculative"] == SETTINGS
        shown = run_cli("spec", "local", "--url", url, check=0).stdout
        assert "engine: sglang   speculative: {algorithm: EAGLE3, num_steps: 5, eagle_topk: 8, num_draft_tokens: 32, draft model: %s}" % DRAFTER in shown
        assert "the latest value of its gauges (" in shown and "not a window" in shown, shown
    finally:
        client.call("jobs.stop", {"id": job_id, "grace_s": 2})
        wait_for(lambda: client.call("jobs.get", {"id": job_id})["process_state"] not in ("running", "stopping"), 30)
