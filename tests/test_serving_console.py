"""The Speculation pane and `specdeck serve` against a real vLLM on the CPU (the tiny target and
the drafter edited to agree with it, tests/serving_fixtures.py), on the local agent: two servers
for the whole module, started the way a user starts them. The first dies while starting, for a
real reason (a drafter whose `midlayer.hidden_norm.weight` has 255 values where vLLM's layer has
256: the engine core's AssertionError, ~70 lines above vLLM's "See root cause above"); the
second runs, under the interpreter `specdeck config local --ml-python` names, and a request
loop keeps it drafting while the pane is read. A mix of prompts (some end in a spoiler token)
makes accept length move between 1 and K+1, so equal figures are not equal by chance.

Also here: the alert wording (a download whose verification fails, in the GPU pane's
notification) and the GPU pane's top line after a failed connection."""

import asyncio
import json
import os
import re
import subprocess
import threading

import pytest
from textual.widgets import Static

from tests import serving_fixtures
from tests.helpers.cli import run_cli, stop_daemon
from tests.helpers.waits import wait_for
from tests.helpers.waits import wait_until
from tui.transport.connection import open_client
from tui.serving.pane import SpeculationPane
from tests.helpers.pilot import OnePane
from tests.helpers.vllm import free_port

pytestmark = pytest.mark.timeout(1200)  # the module's two vLLM starts come first
K = 3
ROOT_CAUSE = "AssertionError: Attempted to load weight (torch.Size([255])) into parameter (torch.Size([256]))"
BREAK_DRAFTER = """
import sys, torch
from safetensors.torch import load_file, save_file
path = sys.argv[1]
state = load_file(path)
state["midlayer.hidden_norm.weight"] = torch.ones(255)
save_file(state, path, metadata={"format": "pt"})
"""


def engine_options():
    options = []
    for key, value in serving_fixtures.SERVER_ENV.items():
        options += ["--env", "%s=%s" % (key, value)]
    return options + ["--k", str(K), "--"] + serving_fixtures.ENGINE_ARGS


class Host:
    """The module's agent home, laptop config, models and the two servers."""

    def __init__(self, root, python, models):
        self.root = root
        self.python = python
        self.models = models
        self.config_env = {"XDG_CONFIG_HOME": str(root / "config")}
        self.dead = self.live = None
        self.dead_serve = None

    def cli(self, *args, **kwargs):
        return run_cli(*args, env=self.config_env, **kwargs)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    python = serving_fixtures.require_vllm()
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)
    root = tmp_path_factory.mktemp("speculation")
    agent_home = root / "specdeck-home"
    agent_home.mkdir(mode=0o700)
    broken = root / "drafter-broken"
    subprocess.run(["cp", "-a", models["drafter_agree"], str(broken)], check=True)
    subprocess.run([python, "-c", BREAK_DRAFTER, str(broken / "model.safetensors")], check=True, capture_output=True, timeout=300)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECDECK_HOME", str(agent_home))
        host = Host(root, python, models)
        client = open_client("local")
        try:
            host.cli("config", "local", "--ml-python", python, check=0)
            # No --python anywhere: the engine must run under the remembered ML interpreter.
            host.dead_serve = host.cli("serve", "local", models["target"], "--drafter", broken, "--force", "--port", free_port(), "--wait",
                                       "--json", *engine_options(), timeout=600)
            host.dead = json.loads(host.dead_serve.stdout)["id"]
            started = host.cli("serve", "local", models["target"], "--drafter", models["drafter_agree"], "--port", free_port(),
                               "--wait", *engine_options(), timeout=600)
            assert started.returncode == 0, started.stderr[-3000:]
            host.live = started.stdout.split()[0]
            host.started = started
            host.client = client
            yield host
        finally:
            for job in client.call("jobs.list")["jobs"]:
                if job["process_state"] in ("running", "starting"):
                    client.call("jobs.stop", {"id": job["id"], "grace_s": 5})
                    wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["process_state"] not in ("running", "starting"), 60)
            client.close()
            stop_daemon(agent_home)


class RequestLoop:
    """Completions to the live server, one after another, until stopped: a mix of prompts, some
    ending in a spoiler token (their first draft is rejected)."""

    def __init__(self, url, model):
        spoiler = serving_fixtures.SPOILER_TOKENS[0]
        self.prompts = [[5, 6, 7, 8], [9, 10, spoiler], [20, 21, 22], [30, 31, spoiler + 1]]
        self.url, self.model = url, model
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            serving_fixtures.complete(self.url, self.model, self.prompts[self.done % len(self.prompts)], max_tokens=24)
            self.done += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(300)


def summary_of(pane):
    return str(pane.query_one("#spec-summary", Static).render())


def shown_figures(pane):
    """(accept length, generated tok/s) as the screen shows them ("-" when none)."""
    accept = re.search(r"accept length now (\S+)", summary_of(pane)).group(1)
    generated = re.search(r"generated (\S+) tok/s", str(pane.query_one("#spec-throughput-text", Static).render())).group(1)
    return accept, generated


def test_serve_runs_the_engine_under_the_configured_ml_python(host):
    job = host.client.call("jobs.get", {"id": host.live})
    assert job["meta"]["python"] == host.python
    assert job["argv"][:3] == [host.python, "-m", "vllm.entrypoints.cli.main"] and job["argv"][3] == "serve"
    # The engine's own arguments, typed after --, reached its command line as they were.
    engine_args = serving_fixtures.ENGINE_ARGS
    assert any(job["argv"][i:i + len(engine_args)] == engine_args for i in range(len(job["argv"])))


def test_serve_wait_says_ready_without_the_engines_start_on_stderr(host):
    lines = host.started.stdout.strip().splitlines()
    assert lines[0].startswith("%s  http://" % host.live) and lines[-1].startswith("%s ready at http://" % host.live)
    assert host.started.stderr == ""  # the engine's hundred lines of start stay in `specdeck logs`


def test_a_dead_server_quotes_the_engines_first_error_line(host):
    # serve --wait: the reason is the root cause, not "See root cause above".
    assert host.dead_serve.returncode == 1
    assert "died while starting: %s" % ROOT_CAUSE in host.dead_serve.stderr
    assert json.loads(host.dead_serve.stdout)["reason"] == ROOT_CAUSE
    # spec on it: one line, how it ended and why.
    spec = host.cli("spec", "local", host.dead)
    assert spec.returncode == 1 and spec.stderr.strip() == "specdeck: server %s is not running: it exited 1: %s" % (host.dead, ROOT_CAUSE)
    # The job's error, wherever the job is shown.
    job = wait_for(lambda: (lambda j: j if (j.get("progress") or {}).get("error") else None)(host.client.call("jobs.get", {"id": host.dead})), 30)
    assert job["progress"]["error"] == "exited 1: %s" % ROOT_CAUSE
    # The alert names the kind of job and quotes the same line.
    alerts = wait_for(lambda: [a for a in host.client.call("telemetry.alerts")["alerts"] if a.get("job_id") == host.dead], 30)
    assert alerts[0]["source"] == "server %s" % host.dead and alerts[0]["title"] == "server failed"
    assert alerts[0]["message"].startswith("server %s exited 1: %s at " % (host.dead, ROOT_CAUSE))


async def test_pane_shows_the_hosts_figures_opens_on_the_running_server_and_keeps_break_even(host, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", host.config_env["XDG_CONFIG_HOME"])  # the module's laptop config
    app = OnePane(SpeculationPane(), client=host.client)
    async with app.run_test(size=(130, 40)) as pilot:
        pane = app.query_one(SpeculationPane)
        pane.focus()
        # Opened on the running server, though an older dead one is listed.
        await wait_until(pilot, lambda: pane.selected == host.live and host.dead in pane.servers, message="the running server")
        with RequestLoop(host.client.call("jobs.get", {"id": host.live})["meta"]["url"], host.models["target"]) as loop:
            bars = pane.query_one("#spec-bars", Static)
            await wait_until(pilot, lambda: "pos %d" % (K - 1) in str(bars.render()), timeout_s=120, message="per-position bars")
            assert loop.done < 10_000  # the bars came while the loop ran
            await wait_until(pilot, lambda: shown_figures(pane)[0] != "-", timeout_s=60, message="an accept length")
            matched = []
            for _attempt in range(8):
                seen = {}

                def note():
                    if pane.shown.get("time") is not None:
                        seen.setdefault(pane.shown["time"], shown_figures(pane))
                    return False

                spec = asyncio.ensure_future(asyncio.to_thread(
                    host.cli, "spec", "local", host.live, "--window", "10s", "--json", check=0))
                while not spec.done():
                    note()
                    await pilot.pause(0.05)
                for _ in range(30):  # the pane may show that moment just after the command read it
                    note()
                    await pilot.pause(0.05)
                reply = json.loads(spec.result().stdout)
                if reply["time"] in seen and reply["accept_length"] is not None:
                    matched.append((seen[reply["time"]], reply))
                    if len(matched) >= 2:
                        break
            assert len(matched) >= 2, "the pane never showed the moment `spec` read"
            for (accept, generated), reply in matched:
                assert accept == "%.2f" % reply["accept_length"] and generated == "%.1f" % reply["generation_tps"]
                assert 1.0 < reply["accept_length"] <= K + 1 and reply["generation_tps"] > 0 and 0 < reply["window_s"] <= 10.0

        # The dead one, a key away, marked dead with the engine's first error line.
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: ROOT_CAUSE in summary_of(pane), timeout_s=30, message="the dead server's first error")
        assert "DEAD: the server exited 1: " + ROOT_CAUSE in summary_of(pane)
        await pilot.press("right_square_bracket")
        assert pane.selected == host.live

        # Break-even for the target: every server of it, kept on the host.
        await pilot.press("b")
        await pilot.pause()
        app.screen.query_one("Input").value = "40@87.5"  # 0.040 s x 87.5 tok/s = 3.50
        await pilot.press("enter")
        await wait_until(pilot, lambda: "break-even 3.50 (set: 40 ms x 87.5 tok/s)" in summary_of(pane), message="the break-even")
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: pane.selected == host.dead and "break-even 3.50" in summary_of(pane), message="the same target's line")
    line = host.client.call("serving.status", {"id": host.dead})["break_even"]  # the host's, for the target's every server
    assert line == {"accept_length": 3.5, "source": "set", "how": "40 ms x 87.5 tok/s"}
    # Another console, later: the target's break-even is still there for its running server.
    app = OnePane(SpeculationPane(), client=host.client)
    async with app.run_test(size=(130, 40)) as pilot:
        pane = app.query_one(SpeculationPane)
        await wait_until(pilot, lambda: pane.selected == host.live and "break-even 3.50 (set: 40 ms x 87.5 tok/s)" in summary_of(pane),
                         message="break-even remembered for the target")


def test_a_target_path_that_is_not_on_the_host_is_refused_in_one_line(agent_home, tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    missing = tmp_path / "models" / "no-such-target"
    result = run_cli("serve", "local", missing, "--port", free_port(), env=env)
    assert result.returncode == 1 and result.stderr.strip() == "specdeck: no target model at %s on the host" % missing
    target = tmp_path / "target"
    target.mkdir()
    result = run_cli("serve", "local", target, "--drafter", "~/no-such-drafter", env=env)
    assert result.returncode == 1 and result.stderr.strip() == "specdeck: no drafter at ~/no-such-drafter on the host"
    assert run_cli("jobs", "local", "--json", env=env, check=0).stdout.strip() == "[]"  # nothing was started
