"""The K advisor's two jobs, measured on the real parts (the local agent, vLLM on the CPU, the
tiny models of tests/serving_fixtures.py, the vLLM venv's python as the ML interpreter).

  python benchmarks/bench_k_sweep.py                  # both
  python benchmarks/bench_k_sweep.py --coverage-only  # the coverage job only (no vLLM start)
  python benchmarks/bench_k_sweep.py --sweep-only --ks 1,2
  python benchmarks/bench_k_sweep.py --ks 1,2,3 --requests 3 --max-tokens 32

1. K sweep: one `serving.bench` job with `ks` (the baseline once, one server per K) against the
   same Ks by hand, one A/B benchmark per K (a baseline and a speculative server each): wall time
   and server starts of each, and the ratio. Both run one after the other on the same machine.
2. Coverage: the coverage job on a large text (Python's own library sources, concatenated to
   --text-mb MiB) through the agent: tokens, tokens/s of the tokenization, the job's wall time
   from submit to result; beside it the same tokenizer called here on the same text in one go.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def wait_job(client, job_id, poll_s=1.0):
    while True:
        job = client.call("jobs.get", {"id": job_id})
        if job["process_state"] not in ("running", "starting"):
            return job
        time.sleep(poll_s)


def bench_params(models, python, port, **extra):
    from tests import serving_fixtures

    params = {"target": models["target"], "drafter": models["drafter_agree"], "port": port, "python": python,
              "env": serving_fixtures.SERVER_ENV, "engine_args": serving_fixtures.ENGINE_ARGS,
              "prompts": [[5, 6, 7, 8], [9, 10, 11, 12, 13], [20, 21, 22]]}
    params.update(extra)
    return params


def sweep_against_by_hand(client, models, python, ks, requests, max_tokens):
    from tests.helpers.vllm import free_port

    began = time.monotonic()
    job = client.call("serving.bench", bench_params(models, python, free_port(), ks=ks, requests=requests, max_tokens=max_tokens), timeout=120)
    job = wait_job(client, job["id"])
    sweep_s = time.monotonic() - began
    result = (job.get("progress") or {}).get("result") or {}
    if not result:
        raise SystemExit("the sweep failed: %s" % (job.get("progress") or {}).get("error"))
    by_hand_s, by_hand = 0.0, []
    for k in ks:
        began = time.monotonic()
        single = client.call("serving.bench", bench_params(models, python, free_port(), k=k, requests=requests, max_tokens=max_tokens), timeout=120)
        single = wait_job(client, single["id"])
        by_hand_s += time.monotonic() - began
        by_hand.append((single.get("progress") or {}).get("result") or {})
    print("K sweep %s, %d requests x %d tokens each" % (",".join(map(str, ks)), requests, max_tokens))
    print("  sweep job   %6.1f s   %d server starts (the baseline once)" % (sweep_s, 1 + len(ks)))
    print("  by hand     %6.1f s   %d server starts (an A/B benchmark per K)" % (by_hand_s, 2 * len(ks)))
    print("  ratio       %.2fx the sweep's time by hand" % (by_hand_s / sweep_s))
    print("  per K (sweep / by hand): accept length, tokens/s")
    for row, single in zip(result["sweep"], by_hand):
        print("    K=%d  %.2f / %.2f   %.1f / %.1f tok/s   cycle %.1f ms" % (
            row["k"], row["accept_length"], single.get("accept_length") or 0, row["tokens_per_s"], single.get("spec_tps") or 0, row["cycle_ms"]))
    model = result["cost_model"]
    print("  best K %s (margin over the next K %.1f%%); cost model %.1f ms + %.1f ms x K" % (
        result["best_k"], 100 * (result["margin"]["over_next_k"] or 0), model["intercept_ms"], model["slope_ms_per_k"]))


def large_text(megabytes):
    """Python's library sources concatenated to `megabytes` MiB, in a file of its own."""
    path = os.path.join(tempfile.mkdtemp(prefix="specdeck-bench-text-"), "text.txt")
    os.chmod(os.path.dirname(path), 0o755)
    wanted, written = megabytes << 20, 0
    sources = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "**", "*.py"), recursive=True))
    with open(path, "w", encoding="utf-8") as out:
        while written < wanted:
            for source in sources:
                with open(source, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                out.write(text)
                written += len(text.encode("utf-8"))
                if written >= wanted:
                    break
    return path


DIRECT = r'''
import sys, time
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
began = time.monotonic()
ids = tokenizer(text, add_special_tokens=False)["input_ids"]
print(len(ids), time.monotonic() - began)
'''


def coverage_speed(client, models, python, megabytes):
    path = large_text(megabytes)
    began = time.monotonic()
    job = client.call("checkpoint.coverage", {"drafter": models["drafter_agree"], "target": models["target"], "text_path": path, "python": python})
    job = wait_job(client, job["id"], 0.2)
    wall_s = time.monotonic() - began
    result = (job.get("progress") or {}).get("result")
    if not result:
        raise SystemExit("the coverage job failed: %s" % (job.get("progress") or {}).get("error"))
    tokens, direct_s = subprocess.run([python, "-c", DIRECT, models["target"], path], capture_output=True, text=True, check=True).stdout.split()
    print("coverage of a %d MiB text (%s tokens)" % (megabytes, "{:,}".format(result["tokens"])))
    print("  job tokenizing    %8.0f tokens/s (%.1f s)" % (result["tokens_per_s"], result["seconds"]))
    print("  job, submit to result %.1f s (interpreter and tokenizer start, counting, the bound at 8 Ks)" % wall_s)
    print("  tokenizer here, one call   %8.0f tokens/s (%.1f s, %s tokens)" % (int(tokens) / float(direct_s), float(direct_s), tokens))
    print("  ratio             %.2fx the direct call's rate; coverage %.4f" % (result["tokens_per_s"] / (int(tokens) / float(direct_s)), result["coverage"]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ks", default="1,2,3")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--text-mb", type=int, default=32)
    parser.add_argument("--coverage-only", action="store_true")
    parser.add_argument("--sweep-only", action="store_true")
    args = parser.parse_args()
    os.environ["SPECDECK_HOME"] = tempfile.mkdtemp()
    from tests import serving_fixtures
    from tests.helpers.cli import stop_daemon
    from tui.transport.connection import open_client

    python = serving_fixtures.vllm_python()
    if python is None:
        raise SystemExit("no vLLM CPU venv at %s" % serving_fixtures.VLLM_VENV)
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)
    client = open_client("local")
    try:
        if not args.sweep_only:
            coverage_speed(client, models, python, args.text_mb)
        if not args.coverage_only:
            sweep_against_by_hand(client, models, python, [int(k) for k in args.ks.split(",")], args.requests, args.max_tokens)
    finally:
        client.close()
        stop_daemon(os.environ["SPECDECK_HOME"])


if __name__ == "__main__":
    main()
