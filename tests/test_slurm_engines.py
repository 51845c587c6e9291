"""Servers, benchmarks and training runs through a real Slurm (tests/slurm_fixtures.py), driven
as a user drives them over the real sshd: `serve --slurm --wait` waits in Slurm's queue with
Slurm's reason, then answers at the address of the node Slurm gave it (a real vLLM on the
CPU, tests/serving_fixtures.py), with its accept length in `specdeck spec` and the live stream;
`bench --slurm` runs its servers and prompts in one allocation and gives its result; `train
--slurm` (a real speculators training on the CPU) gives its curves and checkpoints from the
Slurm job's output file, written through `srun --label` as a multi-node run writes it."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from remote.training import logparse
from tests import serving_fixtures
from tests.helpers.cli import REPO_ROOT, run_cli, ssh_config_env
from tests.helpers.training import MAKER, PATCH
from tests.helpers.vllm import free_port
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client

pytestmark = pytest.mark.timeout(900)
K = 3
READY_TIMEOUT_S = 600  # bounds on a hang: vLLM starts in ~55 s on an idle machine
ENDED_TIMEOUT_S = 600


def engine_options():
    """The serving tests' vLLM settings as `serve`/`bench` flags (before `--`) and engine arguments."""
    flags = []
    for name, value in serving_fixtures.SERVER_ENV.items():
        flags += ["--env", "%s=%s" % (name, value)]
    return flags, ["--", *serving_fixtures.ENGINE_ARGS]


def node_address(cluster, node):
    """The node's NodeAddr as Slurm has it, asked here, apart from the agent."""
    shown = cluster.run(["scontrol", "show", "node", "-o", node]).stdout
    return re.search(r"\bNodeAddr=(\S+)", shown).group(1)


@pytest.fixture
def host(slurm_host, laptop):
    """(cluster, laptop HOME, a client of the host's agent); the engine's interpreter is the
    vLLM venv, remembered for the host as a user does (`config --ml-python`)."""
    run_cli("config", "gpuhost", "--ml-python", serving_fixtures.require_vllm(), home=laptop, check=0)
    client = open_client("gpuhost")
    try:
        yield slurm_host, laptop, client
    finally:
        for job in client.call("jobs.list")["jobs"]:
            if job["process_state"] in ("running", "starting") and not job.get("foreign"):
                client.call("jobs.stop", {"id": job["id"], "grace_s": 5})
        client.close()


def test_serve_through_slurm_waits_with_slurms_reason_then_answers_at_its_nodes_address(host, models, tmp_path):
    cluster, laptop, client = host
    port = free_port()
    flags, engine_args = engine_options()
    stderr_path = tmp_path / "serve.stderr"
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(ssh_config_env(laptop))
    env.update(PYTHONPATH=str(REPO_ROOT))
    with open(stderr_path, "w") as stderr:
        # Held at submit, so the wait goes through Slurm's queue whatever the machine's load.
        serve = subprocess.Popen([sys.executable, "-m", "tui.cli", "serve", "gpuhost", models["target"], "--drafter", models["drafter_agree"],
                                  "--k", str(K), "--port", str(port), "--slurm", "--sbatch-arg=--hold", "--wait", *flags, *engine_args],
                                 stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=str(REPO_ROOT))
    try:
        # This test's server (the host user's daemon may keep other tests' servers): the one on its port.
        servers = wait_for(lambda: [j for j in client.call("jobs.list", {"kind": "server"})["jobs"]
                                    if not j.get("foreign") and (j.get("meta") or {}).get("port") == port],
                           message="the server job listed")
        job = servers[-1]
        assert (job["engine"], job["meta"]["url"], job["meta"]["listen"]) == ("slurm", None, "0.0.0.0")
        assert job["argv"][job["argv"].index("--host") + 1] == "0.0.0.0"  # the login node must reach it on its node
        held = "waiting in Slurm's queue: JobHeldUser"
        pending = wait_for(lambda: (lambda s: s["reason"] == held and s)(client.call("serving.status", {"id": job["id"]})),
                           message="Slurm's reason")
        assert (pending["state"], pending["url"], pending["node"], pending["ready"]) == ("starting", None, None, False)
        wait_for(lambda: "is waiting in Slurm's queue: JobHeldUser" in stderr_path.read_text(), message="serve --wait saying why it waits")
        cluster.run(["scontrol", "release", job["slurm_id"]])
        out, _ = serve.communicate(timeout=READY_TIMEOUT_S)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert serve.returncode == 0, stderr_path.read_text()[-3000:]
    job = client.call("jobs.get", {"id": job["id"]})
    (node,) = job["nodes"]
    url = "http://%s:%d" % (node_address(cluster, node), port)
    assert out.splitlines() == ["%s  Slurm job %s  (waiting for it to answer)" % (job["id"], job["slurm_id"]),
                                "%s ready at %s (node %s)" % (job["id"], url, node)]
    assert cluster.job(job["slurm_id"])["JobState"] == "RUNNING" and cluster.job(job["slurm_id"])["NodeList"] == node
    status = client.call("serving.status", {"id": job["id"]})
    assert (status["state"], status["url"], status["node"]) == ("ready", url, node)

    # The feed reads the server at its node: once it has (a window of two reads), what comes next is counted.
    wait_for(lambda: client.call("serving.stats", {"id": job["id"]}).get("window_s") is not None, 60, message="the feed reading the server")
    records = []
    subscription = client.subscribe("serving.follow", {}, lambda data, seq: records.extend(data.get("records", [])))
    try:
        for prompt in ([5, 6, 7, 8], [9, 10, 11, 12, 13], [20, 21, 22]):
            serving_fixtures.complete(url, models["target"], prompt)
        live = wait_for(lambda: [r for r in records if r["server"] == job["id"] and r.get("accept_length")], 60,
                        message="the live stream's figures of the Slurm server")
    finally:
        subscription.cancel()
    assert live[-1]["source"] == "metrics" and live[-1]["accept_length"] == K + 1

    def spec():
        reply = json.loads(run_cli("spec", "gpuhost", job["id"], "--json", home=laptop, check=0).stdout)
        return reply if reply["num_drafts"] else None

    figures = wait_for(spec, 60, message="specdeck spec's figures")
    assert figures["source"] == "metrics" and figures["accept_length"] == K + 1 and figures["per_position"] == [1.0] * K
    # vLLM ends cleanly on TERM (exit 0): stopped all the same, as a local job, and gone from its node.
    run_cli("stop", "gpuhost", job["id"], "--wait", home=laptop, check=0)
    assert client.call("serving.status", {"id": job["id"]})["state"] == "died"
    assert client.call("jobs.get", {"id": job["id"]})["state"] == "stopped"
    assert cluster.job(job["slurm_id"])["JobState"] in ("COMPLETED", "CANCELLED")


def test_bench_through_slurm_runs_its_servers_in_one_allocation_and_gives_its_result(host, models):
    cluster, laptop, client = host
    flags, engine_args = engine_options()
    result = run_cli("bench", "gpuhost", models["target"], "--drafter", models["drafter_agree"], "--k", str(K), "--port", free_port(),
                     "--requests", "2", "--max-tokens", "24", "--slurm", "--json", *flags, *engine_args, home=laptop, timeout=ENDED_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    assert figures["accept_length"] == K + 1 and figures["baseline_tps"] > 0 and figures["spec_tps"] > 0
    # This test's benchmark: the newest through Slurm (the daemon may keep other tests' local ones).
    job = max((j for j in client.call("jobs.list", {"kind": "benchmark"})["jobs"] if j.get("engine") == "slurm" and not j.get("foreign")),
              key=lambda j: j["submitted_at"])
    assert job["engine"] == "slurm" and job["state"] == "done" and job["exit_code"] == 0 and len(job["nodes"]) == 1
    assert cluster.job(job["slurm_id"])["JobState"] == "COMPLETED"
    assert job["progress"]["result"]["accept_length"] == K + 1
    # Both servers ran inside the allocation, on its node's loopback: their logs are in the job's
    # directory, beside its progress (the job was told it, as a local job is).
    job_dir = Path(job["slurm"]["output"]).parent
    assert {"baseline.log", "speculative.log", "progress.json"} <= {p.name for p in job_dir.iterdir()}
    assert "--host 127.0.0.1" in (job_dir / "speculative.log").read_text()


def test_train_through_slurm_gives_its_curves_and_checkpoints_from_the_output_file(slurm_host, laptop, host_user, speculators_python):
    directory = Path(tempfile.mkdtemp(prefix="specdeck-slurm-train-"))  # the host user reads it
    try:
        made = subprocess.run([str(speculators_python), str(MAKER), str(directory / "run"), "24"], capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        paths = json.loads(made.stdout.strip().splitlines()[-1])
        save = directory / "save"
        save.mkdir()
        # The host user's: speculators caches its vocabulary mapping beside the data.
        subprocess.run(["chown", "-R", "%d:%d" % (host_user.uid, host_user.gid), str(directory)], check=True)
        train = [str(speculators_python.parent / "speculators"), "train", "--verifier-name-or-path", paths["target"], "--data-path", paths["data"],
                 "--draft-vocab-size", "128", "--target-layer-ids", "0", "1", "2", "--total-seq-len", "96", "--num-workers", "0",
                 "--loss-implementation", "eager", "--draft-attn-impl", "eager", "--epochs", "2", "--log-freq", "1",
                 "--save-path", str(save), "--logger", "", "--hidden-states-dtype", "float32"]
        # One task through srun --label, as each rank of a multi-node run writes the output file.
        started = run_cli("train", "gpuhost", "--slurm", "--save-dir", str(save), "--target", paths["target"], "--break-even", "2.46",
                          "--env", "SPECDECK_TEST_CPU_PATCH=1", "--env", "PYTHONPATH=%s" % PATCH, "--env", "COLUMNS=80", "--json",
                          "--", "srun", "--label", "--ntasks", "1", *train, home=laptop, check=0)
        job_id = json.loads(started.stdout)["id"]

        def ended():
            listed = run_cli("jobs", "gpuhost", "--json", home=laptop)
            if listed.returncode != 0:
                return None
            job = next(j for j in json.loads(listed.stdout) if j["id"] == job_id)
            return job if job["process_state"] not in ("running", "starting") else None

        job = wait_for(ended, ENDED_TIMEOUT_S, interval_s=1.0, message="the Slurm training job ended")
        log = run_cli("logs", "gpuhost", job_id, home=laptop, check=0).stdout
        assert job["exit_code"] == 0 and job["engine"] == "slurm" and len(job["nodes"]) == 1, log[-3000:]
        assert re.search(r"^0: .*global_step=0", log, re.MULTILINE)  # Slurm's output file, each line labelled by its rank

        def curves_done():
            answered = run_cli("curves", "gpuhost", job_id, "--json", home=laptop)
            if answered.returncode != 0:
                return None
            reply = json.loads(answered.stdout)
            return reply if len(reply["steps"]) == 22 and len(reply["validation"]) == 2 and len(reply["checkpoints"]) == 2 else None

        reply = wait_for(curves_done, 60, interval_s=1.0, message="the curves and checkpoints")
        unlabelled = re.sub(r"^0: ", "", log, flags=re.MULTILINE)
        want = [r for r in logparse.parse_text(unlabelled) if r["kind"] == "step"]
        assert [s["step"] for s in reply["steps"]] == [r["step"] for r in want] == list(range(22))
        for got, record in zip(reply["steps"], want):
            assert got["loss"] == pytest.approx(record["loss"]) and got["full_acc"] == pytest.approx(record["full_acc"])
        assert [c["name"] for c in reply["checkpoints"]] == ["0", "1"]
        assert all(c["format"] == "speculators" for c in reply["checkpoints"])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
