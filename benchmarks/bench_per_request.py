"""Per-request speculation metrics: what they cost the server, and what a bench by category saves.

  python benchmarks/bench_per_request.py                # 1: tokens/s with and without, same prompts, same run
  python benchmarks/bench_per_request.py --categories   # also 2: the bench by category against one by one

1. Two real vLLM servers (CPU, the tiny agreeing pair of tests/serving_fixtures.py, K=3) up at
   once, one with `--per-request-spec-decode-metrics summary`, one without; the same prompts sent
   to each in turn (A, B, A, B: both see the same machine load). Ratio: tokens/s with / without.
2. (--categories) `specdeck bench` of the random drafter over a two-category prompt file (one
   baseline and one speculative server for both), against one `bench` per category (what one
   did by hand: a prompt file per category, each its own pair of servers). Wall time of each;
   ratio: one by one / by category.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from remote.serving import engines  # noqa: E402
from tests import serving_fixtures  # noqa: E402
from tests.helpers.cli import stop_daemon  # noqa: E402
from tests.helpers.vllm import free_port  # noqa: E402

PROMPTS = [[5 + i, 6, 7, 8] for i in range(12)]
MAX_TOKENS = 64
ROUNDS = 3


def start(models, extra, port, scratch):
    config = {"method": "eagle3", "model": models["drafter_agree"], "num_speculative_tokens": 3}
    argv = [serving_fixtures.vllm_python(), "-m", "vllm.entrypoints.cli.main", "serve", models["target"], "--host", "127.0.0.1",
            "--port", str(port), "--speculative-config", json.dumps(config)] + serving_fixtures.ENGINE_ARGS + extra
    env = dict(os.environ, **serving_fixtures.SERVER_ENV, VLLM_CACHE_ROOT=scratch, HF_HOME=scratch)
    log = open(os.path.join(scratch, "server-%d.log" % port), "wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def cost(models):
    scratch = tempfile.mkdtemp(prefix="bench-per-request-")
    ports = {"without": free_port(), "with summary": free_port()}
    began = time.monotonic()
    servers = {name: start(models, [] if name == "without" else ["--per-request-spec-decode-metrics", "summary"], port, scratch)
               for name, port in ports.items()}
    try:
        while not all(engines.is_ready(engines.base_url(port)) for port in ports.values()):
            if any(p.poll() is not None for p in servers.values()):
                raise SystemExit("a server died while starting: see %s" % scratch)
            time.sleep(0.5)
        print("both servers up in %.0f s" % (time.monotonic() - began))
        tokens, seconds = dict.fromkeys(ports, 0), dict.fromkeys(ports, 0.0)
        for name, port in ports.items():  # warm-up, not timed
            serving_fixtures.complete(engines.base_url(port), models["target"], PROMPTS[0], 16)
        for _ in range(ROUNDS):
            for prompt in PROMPTS:
                for name, port in ports.items():
                    t0 = time.monotonic()
                    reply = serving_fixtures.complete(engines.base_url(port), models["target"], prompt, MAX_TOKENS)
                    seconds[name] += time.monotonic() - t0
                    tokens[name] += reply["usage"]["completion_tokens"]
                    if name != "without":
                        assert reply["metrics"]["speculative_decoding"]["mean_acceptance_length"] == 4.0
        rates = {name: tokens[name] / seconds[name] for name in ports}
        for name in ports:
            print("%-14s %6d tokens in %6.1f s   %7.1f tok/s" % (name, tokens[name], seconds[name], rates[name]))
        print("ratio with / without: %.3f" % (rates["with summary"] / rates["without"]))
    finally:
        for process in servers.values():
            os.killpg(process.pid, 15)
            process.wait(60)


def by_category(models, home):
    scratch = tempfile.mkdtemp(prefix="bench-categories-")
    lines = {"code": ["def reverse(items):", "for index in range(10):"], "chat": ["Hello, how are you?", "Tell me a story."]}
    env_args = []
    for key, value in serving_fixtures.SERVER_ENV.items():
        env_args += ["--env", "%s=%s" % (key, value)]

    def bench(path):
        argv = [sys.executable, "-m", "tui.cli", "bench", "local", models["target"], "--drafter", models["drafter_random"], "--k", "3",
                "--requests", "4", "--max-tokens", "32", "--prompts", path, "--port", str(free_port()),
                "--python", serving_fixtures.vllm_python(), *env_args, "--json", "--", *serving_fixtures.ENGINE_ARGS]
        t0 = time.monotonic()
        result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, SPECDECK_HOME=home, PYTHONPATH=ROOT))
        if result.returncode != 0:
            raise SystemExit("bench failed: %s" % result.stderr)
        return time.monotonic() - t0

    both = os.path.join(scratch, "both.jsonl")
    with open(both, "w") as f:
        for category, prompts in lines.items():
            for prompt in prompts:
                f.write(json.dumps({"prompt": prompt, "category": category}) + "\n")
    together_s = bench(both)
    apart_s = 0.0
    for category, prompts in lines.items():
        path = os.path.join(scratch, "%s.txt" % category)
        with open(path, "w") as f:
            f.write("\n".join(prompts) + "\n")
        apart_s += bench(path)
    print("bench by category   %6.1f s (one baseline and one speculative server)" % together_s)
    print("one by one          %6.1f s (%d benches)" % (apart_s, len(lines)))
    print("ratio one by one / by category: %.2f" % (apart_s / together_s))


def main():
    python = serving_fixtures.vllm_python()
    if python is None:
        raise SystemExit("no vLLM CPU venv at %s" % serving_fixtures.VLLM_VENV)
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)
    cost(models)
    if "--categories" in sys.argv:
        home = tempfile.mkdtemp(prefix="sd-home-")
        try:
            by_category(models, home)
        finally:
            stop_daemon(home)  # the benches' agent daemon: not left running after the benchmark


if __name__ == "__main__":
    main()
