"""Served against scored, the score's truth check: the real vLLM on the CPU serving the tiny target
of tests/serving_fixtures.py with a drafter, greedily, on the very prompts the recorded hidden
states came from (tests/data/score-tiny: each row a prompt, then the target's own 24-token
answer; benchmarks/record_score_data.sh made them), its own counters (accepted / drafts) giving
the accept length; beside it the offline score of the same drafter on those prompts' states.

Two ways of counting, and which one serving reports:
- the score counts per position: a chain of K drafts from every scored position (every anchor
  of the answer), the figure of counts.py;
- serving counts per cycle: a cycle drafts K from where the last one ended, accepts n, emits n+1
  tokens (the bonus or the correction), and the next cycle starts n+1 further on; the request
  ends once max_tokens are out (the last cycle may run past: vLLM counts its drafts whole).
  Served = 1 + accepted / cycles.
When every chain of a sample accepts the same number (the agreeing drafter on spoiler-free
rows: K; the random drafter: 0) both counts are that number + 1. With the spoiler mix they part:
a row ending in a spoiler has one chain of 0 among 22 per position, but one cycle of 0 among 7
per cycle (its other cycles jump 4 positions at a time). The per-cycle figure is computed here
from the score's per-position counts (chain.accepted: each anchor's accepted drafts) by walking
each row as serving does, and must equal what vLLM counts.

Run under an interpreter with torch and pyarrow (the speculators venv); it starts vLLM from
the venv .ci/vllm-env builds (one server per drafter, ~1 min each on an idle machine):
  ML_PYTHON benchmarks/served_vs_scored.py [DATA]
Prints each figure and exits 1 when served and scored (as serving counts) differ.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from remote.scoring import chain, packs, plan, samples, score_job, tensors  # noqa: E402
from remote.serving import engines  # noqa: E402
from tests import serving_fixtures  # noqa: E402

K = 3
READY_TIMEOUT_S = 900


def max_tokens(answer):
    """Tokens asked of the server per prompt: as many of the recorded answer as keep serving's last
    cycle on a scored anchor (a chain needs its K choices in the data: anchors end K before the
    answer does; the last cycle starts at most max_tokens - 2 after the prompt's last token)."""
    return len(answer) - K + 2


COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counter(url, name):
    """A counter's value summed over its label sets (never its `_created` twin)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " "))


def recorded_rows(data):
    """[(file name, prompt ids, answer ids)] of the recorded samples: the prompt is what the loss
    mask leaves out, the answer the target's own greedy tokens after it."""
    dataset = score_job.Dataset(data)
    out = []
    for index, path in samples.find(data)["files"]:
        tokens, _, _, _ = score_job.load_sample(torch_module(), samples.SPECULATORS, path, 3)
        ids, mask = dataset.row(index)
        assert ids == tokens.tolist(), path
        prompt_length = mask.index(1)
        out.append((os.path.basename(path), ids[:prompt_length], ids[prompt_length:]))
    return out


def torch_module():
    import torch

    return torch


def served(models, drafter, groups, scratch):
    """{group: (accept length, drafts, accepted)} of vLLM serving `drafter`: each group's prompts
    sent one at a time (greedy, max_tokens(answer)), its counters read
    before and after. Each reply's tokens must be the recorded answer."""
    port = free_port()
    config = {"method": "eagle3", "model": drafter, "num_speculative_tokens": K}
    argv = [serving_fixtures.vllm_python(), "-m", "vllm.entrypoints.cli.main", "serve", models["target"], "--host", "127.0.0.1",
            "--port", str(port), "--speculative-config", json.dumps(config)] + serving_fixtures.ENGINE_ARGS
    env = dict(os.environ, VLLM_CACHE_ROOT=scratch, HF_HOME=scratch, **serving_fixtures.SERVER_ENV)
    log_path = os.path.join(scratch, "server-%d.log" % port)
    url = engines.base_url(port)
    began = time.monotonic()
    with open(log_path, "wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while not engines.is_ready(url):
            if server.poll() is not None or time.monotonic() - began > READY_TIMEOUT_S:
                raise SystemExit("the server did not start: see %s" % log_path)
            time.sleep(0.5)
        print("  vLLM up in %.0f s (%s)" % (time.monotonic() - began, os.path.basename(drafter)))
        out = {}
        for name, rows in groups.items():
            before = [counter(url, c) for c in COUNTERS]
            for file_name, prompt, answer in rows:
                payload = {"model": models["target"], "prompt": prompt, "max_tokens": max_tokens(answer), "temperature": 0.0,
                           "ignore_eos": True, "return_token_ids": True}
                request = urllib.request.Request(url + "/v1/completions", data=json.dumps(payload).encode(),
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=300) as reply:
                    choice = json.loads(reply.read())["choices"][0]
                got = choice.get("token_ids")
                if got is not None and list(got) != list(answer[:max_tokens(answer)]):
                    raise SystemExit("%s: vLLM answered %s, the recorded answer is %s" % (file_name, got, answer))
            time.sleep(1.5)  # the engine counts a request's last step a moment after its reply
            drafts, accepted = [b - a for a, b in zip(before, [counter(url, c) for c in COUNTERS])]
            out[name] = (1 + accepted / drafts if drafts else None, int(drafts), int(accepted))
        return out
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def scored(checked, data, rows, scratch):
    """(the score job's result on `rows`, (cycles, accepted) walked as serving counts): the job
    for the per-position figures, then chain.accepted on each row for its anchors' counts."""
    torch = torch_module()
    subset = os.path.join(tempfile.mkdtemp(dir=scratch), "data")
    shutil.copytree(data, subset, ignore=shutil.ignore_patterns("hs_*.safetensors"))
    for file_name, _, _ in rows:
        shutil.copyfile(os.path.join(data, "hidden_states", file_name), os.path.join(subset, "hidden_states", file_name))
    work = tempfile.mkdtemp(dir=scratch)
    os.environ["SPECDECK_JOB_DIR"] = work
    spec = dict(checked, data=subset, k=K, samples=None, split="all", train_ratio=0.9, device="cpu",
                result_path=os.path.join(work, "result.json"), profile_fallback=os.path.join(work, "profile.json"))
    out, sys.stdout = sys.stdout, open(os.devnull, "w")
    try:
        if score_job.run(spec) != 0:
            raise SystemExit("the score job failed: see %s" % work)
    finally:
        sys.stdout = out
    with open(os.path.join(work, "result.json")) as f:
        result = json.load(f)
    # The same chains again, one row at a time, keeping each anchor's count.
    target, d = checked["target"], checked["drafters"][0]
    head = score_job.tensor_of(torch, tensors.Span(**target["spans"]["lm_head"])).float()
    norm = score_job.tensor_of(torch, tensors.Span(**target["spans"]["norm"])).float()
    embed = score_job.tensor_of(torch, tensors.Span(**target["spans"]["embed"])).float()
    spans = tensors.all_names(d["path"])
    weights = dict((name, score_job.tensor_of(torch, span).float()) for name, span in spans.items() if span.dtype == "F32")
    d2t = score_job.tensor_of(torch, spans[d["names"]["d2t"]]).long() if d["names"].get("d2t") else None
    runner = chain.Drafter(torch, d, weights, weights.get(d["names"].get("embed")) if d["names"].get("embed") else embed, d2t, "cpu")
    cycles = accepted = 0
    for file_name, prompt, answer in rows:
        tokens, aux, final, _ = score_job.load_sample(torch, samples.SPECULATORS, os.path.join(data, "hidden_states", file_name), d["aux_count"])
        mask = torch.tensor([0] * len(prompt) + [1] * len(answer), dtype=torch.bool)
        pack = packs.Pack(torch, [tokens.shape[0]], mask, K, "cpu")
        choices = (chain.rms_norm(torch, final, norm, target["rms_norm_eps"]) @ head.T).argmax(dim=-1)
        per_anchor, _cut = chain.accepted(torch, runner, pack, tokens, runner.fuse(aux), choices, K)
        by_anchor = dict(zip(pack.anchors.tolist(), per_anchor.tolist()))
        # Serving: the prompt's prefill emits the first answer token; each cycle then drafts K
        # from where the last ended, until max_tokens are out.
        anchor, emitted = len(prompt) - 1, 1
        while emitted < max_tokens(answer):
            if anchor not in by_anchor:
                raise SystemExit("%s: serving's cycle at position %d is past the scored anchors" % (file_name, anchor))
            n = by_anchor[anchor]
            cycles, accepted, emitted, anchor = cycles + 1, accepted + n, emitted + n + 1, anchor + n + 1
    return result, (cycles, accepted)


def main(argv):
    data = argv[1] if len(argv) > 1 else os.path.join(ROOT, "tests", "data", "score-tiny")
    python = serving_fixtures.vllm_python()
    if python is None:
        raise SystemExit("no vLLM CPU venv at %s: run .ci/vllm-env" % serving_fixtures.VLLM_VENV)
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)
    scratch = tempfile.mkdtemp(prefix="served-vs-scored-")
    rows = recorded_rows(data)
    spoiler_free = [r for r in rows if r[1][-1] not in serving_fixtures.SPOILER_TOKENS]
    cases = [("agree", models["drafter_agree"], {"spoiler-free rows": spoiler_free, "the spoiler mix (all rows)": rows}),
             ("random", models["drafter_random"], {"all rows": rows})]
    failed = False
    print("K=%d, %d recorded rows (%d spoiler-free), vLLM %s on the CPU, greedy" % (K, len(rows), len(spoiler_free), python))
    try:
        for name, drafter, groups in cases:
            checked = plan.check(drafter, models["target"], data, K)
            serving = served(models, drafter, groups, scratch)
            for group, group_rows in groups.items():
                result, (cycles, accepted) = scored(checked, data, group_rows, scratch)
                per_position = result["predicted_accept_length"]
                per_cycle = 1 + accepted / float(cycles)
                live, drafts, live_accepted = serving[group]
                same = (drafts, live_accepted) == (cycles, accepted)
                failed |= not same
                print("%-7s %-27s served %.4f (%d accepted / %d drafts)   scored per position %.4f (%d chains)   "
                      "scored as serving counts %.4f (%d / %d)   %s" % (
                          name, group, live, live_accepted, drafts, per_position, result["chains"], per_cycle, accepted, cycles,
                          "equal" if same else "DIFFER"))
                if name == "agree" and group.startswith("spoiler-free") or name == "random":
                    exact = per_position == live
                    failed |= not exact
                    print("        per position equals served exactly: %s" % exact)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
