"""Serving: how fast a counter change on a server reaches our stream, what a scrape costs the
agent, and whether the A/B benchmark's tokens/s are those a plain HTTP client measures.

  python benchmarks/bench_serving.py            # delay and CPU (a real HTTP server, vLLM's text)
  python benchmarks/bench_serving.py --vllm     # also the A/B benchmark against a plain client

1. Delay: a real HTTP server serves the /metrics text a real vLLM wrote (632 lines, every family
   vLLM exports); at a moment we note, its spec-decode counters grow. We follow `serving.follow`
   from the local agent and note when a record with that second's accept length arrives. Target
   1.5 s (the sampler reads once a second). Ratio: our delay / the 1 s scrape interval.
2. CPU: the daemon's CPU over 20 s reading one such server every second, less its CPU over 20 s
   with none; per scrape (fetch, parse with prometheus-client's parser, the window, publish,
   the history store). Beside it: the parse alone, in this process.
3. (--vllm) The A/B benchmark job's baseline and speculative tokens/s, and the same requests
   timed here with urllib against a vLLM we start ourselves with the same arguments.
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FULL_TEXT = open(os.path.join(ROOT, "tests", "serving_data", "vllm_metrics_full.txt")).read()


def cpu_seconds(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def grown(factor):
    """FULL_TEXT with the spec-decode counters multiplied by `factor`."""
    lines = []
    for line in FULL_TEXT.splitlines():
        if line.startswith("vllm:spec_decode") and "_total" in line.split(" ")[0]:
            name, value = line.rsplit(" ", 1)
            line = "%s %r" % (name, float(value) * factor)
        lines.append(line)
    return "\n".join(lines) + "\n"


def delay_and_cpu():
    os.environ["SPECDECK_HOME"] = tempfile.mkdtemp()
    from remote.serving import metrics
    from tests.helpers.cli import daemon_pid, stop_daemon
    from tests.helpers.metrics import MetricsServer
    from tui.transport.connection import open_client

    server = MetricsServer()
    server.text = grown(1)
    client = open_client("local")
    pid = daemon_pid(os.environ["SPECDECK_HOME"])
    try:
        time.sleep(3)
        before = cpu_seconds(pid)
        time.sleep(20)
        idle_cpu_s = cpu_seconds(pid) - before
        seen = []
        event = threading.Event()

        def on_data(data, seq):
            for record in data.get("records", []):
                if record.get("accept_length"):
                    seen.append(time.monotonic())
                    event.set()

        client.subscribe("serving.follow", {}, on_data)
        server_id = client.call("serving.attach", {"url": server.url})["id"]
        time.sleep(3)
        before = cpu_seconds(pid)
        time.sleep(20)
        busy_cpu_s = cpu_seconds(pid) - before
        delays = []
        for factor in range(2, 12):
            event.clear()
            time.sleep(0.37 * (factor % 3))  # changes at different points of the scrape cycle
            changed_at = time.monotonic()
            server.text = grown(factor)
            if not event.wait(10):
                raise SystemExit("no record within 10 s of the change")
            delays.append(seen[-1] - changed_at)
            time.sleep(1.2)
        began = time.process_time()
        for _ in range(200):
            metrics.window(metrics.parse(FULL_TEXT, 0.0), metrics.parse(FULL_TEXT, 1.0))
        parse_ms = (time.process_time() - began) / 400 * 1000
        client.call("serving.detach", {"id": server_id})
    finally:
        client.close()
        stop_daemon(os.environ["SPECDECK_HOME"])
        server.close()
    delays.sort()
    per_scrape_ms = (busy_cpu_s - idle_cpu_s) / 20.0 * 1000
    print("delay from a counter change to our stream (10 changes): median %.2f s, max %.2f s (target 1.5 s; "
          "ratio to the 1 s scrape interval %.2f)" % (delays[len(delays) // 2], delays[-1], delays[len(delays) // 2] / 1.0))
    print("daemon CPU: %.1f ms/s idle, %.1f ms/s reading one server each second -> %.1f ms of CPU per scrape "
          "(%.2f%% of a core)" % (idle_cpu_s / 20 * 1000, busy_cpu_s / 20 * 1000, per_scrape_ms, per_scrape_ms / 10))
    print("parsing vLLM's full /metrics text (632 lines) in this process: %.2f ms" % parse_ms)


def vllm_ab(requests=8, max_tokens=64):
    from remote.serving import bench, engines
    from tests import serving_fixtures
    from tests.helpers.cli import stop_daemon
    from tui.transport.connection import open_client

    python = serving_fixtures.vllm_python()
    if python is None:
        raise SystemExit("no vLLM venv: run .ci/vllm-env first")
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)
    os.environ["SPECDECK_HOME"] = tempfile.mkdtemp()
    client = open_client("local")
    port = 18731
    # The same prompts to the job and to the plain client below (the job's own set has long-context
    # prompts that the tiny target's 512-token window cannot hold).
    prompts = [bench.BUILTIN_PROMPTS[i % len(bench.BUILTIN_PROMPTS)] for i in range(requests)]
    try:
        job = client.call("serving.bench", {"target": models["target"], "drafter": models["drafter_agree"], "k": 3, "port": port,
                                            "python": python, "env": serving_fixtures.SERVER_ENV, "engine_args": serving_fixtures.ENGINE_ARGS,
                                            "requests": requests, "max_tokens": max_tokens, "prompts": prompts}, timeout=120)
        while True:
            job = client.call("jobs.get", {"id": job["id"]})
            if job["process_state"] not in ("running", "starting"):
                break
            time.sleep(1)
        result = (job.get("progress") or {}).get("result")
        if not result:
            raise SystemExit("the benchmark job failed: %s" % (job.get("progress") or {}).get("error"))
    finally:
        client.close()
        stop_daemon(os.environ["SPECDECK_HOME"])
    plain = {}
    for label, drafter in (("baseline", None), ("speculative", models["drafter_agree"])):
        argv = [python] + engines.server_argv("vllm", models["target"], drafter, 3, port, engine_args=serving_fixtures.ENGINE_ARGS)
        env = dict(os.environ, **serving_fixtures.SERVER_ENV)
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            url = engines.base_url(port)
            while not engines.is_ready(url):
                if process.poll() is not None:
                    raise SystemExit("vLLM died while starting")
                time.sleep(0.5)
            serving_fixtures.complete(url, models["target"], prompts[0], bench.WARMUP_TOKENS)  # as the job warms up
            tokens, elapsed_s = 0, 0.0
            for prompt in prompts:
                began = time.monotonic()
                reply = serving_fixtures.complete(url, models["target"], prompt, max_tokens)
                elapsed_s += time.monotonic() - began
                tokens += reply["usage"]["completion_tokens"]
            plain[label] = tokens / elapsed_s
        finally:
            os.killpg(process.pid, 15)
            process.wait()
    print("A/B benchmark job (agreeing drafter, K=3, %d requests x %d tokens): baseline %.1f tok/s, speculative %.1f tok/s, "
          "speedup %.2f, accept length %.2f, cycle %.1f ms, break-even %.2f" % (
              requests, max_tokens, result["baseline_tps"], result["spec_tps"], result["speedup"], result["accept_length"],
              result["cycle_ms"], result["break_even_accept_length"]))
    print("plain HTTP client, same requests: baseline %.1f tok/s, speculative %.1f tok/s" % (plain["baseline"], plain["speculative"]))
    print("ratio job / plain client: baseline %.2f, speculative %.2f" % (
        result["baseline_tps"] / plain["baseline"], result["spec_tps"] / plain["speculative"]))


if __name__ == "__main__":
    delay_and_cpu()
    if "--vllm" in sys.argv:
        vllm_ab()
