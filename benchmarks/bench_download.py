"""Download throughput of our job against huggingface_hub's own downloader, and the time from
the last byte to the verdict against `sha256sum`.

One fake hub (tests/hubserver.py, loopback, no throttle, in a process of its own) serves:
  org/bench  a 2 GiB drafter-like set (two safetensors shards, config, tokenizer)
  org/big    one ~2 GB model.safetensors
Then, into fresh directories and alternating the order, `--repeat` times:
  hf       `hf download org/bench --local-dir D` (the huggingface_hub CLI, on PATH or beside this
           interpreter; snapshot_download through `python -c` when neither): no verification
  specdeck `python -c 'remote.downloads.download.main(["download", JOB_DIR])'`: fetch + sha256 of
           every file against the hub's + verdict (a run that does not end verified stops the bench)
and once, on org/big: our job's own "after the last byte" time, our `verify` subcommand, and
`sha256sum` of the same file.

  python3 benchmarks/bench_download.py [--size-gb 2.147] [--big-gb 2.0] [--repeat 3] [--cpus N]
                                       [--dest-dir DIR] [--keep]

--cpus N pins the hub, hf and our job to the first N CPUs (e.g. 2, the CI machine's count, on a
bigger host): sha256 is work that hf does not do, and it shows when the cores are few.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = "import sys; from remote.downloads.download import main; sys.exit(main(sys.argv[1:]))"
SNAPSHOT = ("import sys; from huggingface_hub import snapshot_download; "
            "snapshot_download(sys.argv[1], local_dir=sys.argv[2])")


def write_safetensors(path, n_bytes):
    """A valid safetensors file: one uint8 tensor of n_bytes random bytes."""
    header = json.dumps({"weight": {"dtype": "U8", "shape": [n_bytes], "data_offsets": [0, n_bytes]}}).encode()
    header += b" " * (-len(header) % 8)
    block = 64 * 1024 * 1024
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        left = n_bytes
        while left:
            n = min(block, left)
            f.write(os.urandom(n))
            left -= n


def make_sets(root, size_gb, big_gb):
    bench = os.path.join(root, "src-bench")
    big = os.path.join(root, "src-big")
    os.makedirs(bench)
    os.makedirs(big)
    total = int(size_gb * 1e9)
    write_safetensors(os.path.join(bench, "model-00001-of-00002.safetensors"), int(total * 0.58))
    write_safetensors(os.path.join(bench, "model-00002-of-00002.safetensors"), int(total * 0.40))
    index = {"metadata": {}, "weight_map": {"weight": "model-00001-of-00002.safetensors"}}
    with open(os.path.join(bench, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(bench, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168}, f)
    with open(os.path.join(bench, "tokenizer.json"), "wb") as f:
        f.write(os.urandom(int(total * 0.02)))
    write_safetensors(os.path.join(big, "model.safetensors"), int(big_gb * 1e9))
    with open(os.path.join(big, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLMEagle3"]}, f)
    return bench, big


def tree_bytes(d):
    n = 0
    for dirpath, dirnames, names in os.walk(d):
        dirnames[:] = [x for x in dirnames if not x.startswith(".")]
        n += sum(os.path.getsize(os.path.join(dirpath, x)) for x in names)
    return n


def env_for(url, home):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE")}
    env.update(HF_ENDPOINT=url, HF_HOME=home, HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=REPO_ROOT)
    return env


def timed(cmd, env, log_path):
    subprocess.run(["sync"])
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        p = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        with open(log_path) as f:
            sys.exit("%s failed (%d):\n%s" % (" ".join(cmd[:3]), p.returncode, f.read()[-3000:]))
    return dt


def run_ours(url, work, tag, repo, local_dir):
    spec = {"repo": repo, "repo_type": "model", "revision": None, "files": [], "include": [], "exclude": [],
            "local_dir": local_dir, "endpoint": None}
    job_dir = job_with_spec(os.path.join(work, "job-" + tag), spec)
    env = env_for(url, os.path.join(work, "home-" + tag))
    log = os.path.join(work, "log-%s.txt" % tag)
    dt = timed([sys.executable, "-c", RUNNER, "download", job_dir], env, log)
    with open(log) as f:
        text = f.read()
    m = re.search(r"downloaded .* in ([\d.]+) s", text)
    after = re.search(r"\(([\d.]+) s after the last byte", text)
    return dt, float(m.group(1)) if m else None, float(after.group(1)) if after else None, spec, env


def job_with_spec(job_dir, spec):
    """A job directory holding spec.json, as download.start leaves it for the job."""
    os.makedirs(job_dir, exist_ok=True)
    with open(os.path.join(job_dir, "spec.json"), "w") as f:
        json.dump(spec, f)
    return job_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=2 ** 31 / 1e9, help="the set's size (default 2 GiB)")
    ap.add_argument("--big-gb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--dest-dir", default=None,
                    help="where downloads land (default: the work directory; e.g. a tmpfs to take the disk out)")
    ap.add_argument("--cpus", type=int, default=None, help="run everything on the first N CPUs")
    args = ap.parse_args()
    if args.cpus:
        cpus = sorted(os.sched_getaffinity(0))[: args.cpus]
        os.sched_setaffinity(0, cpus)  # inherited by the hub, hf and our job
        print("pinned to CPUs %s" % ",".join(map(str, cpus)), flush=True)

    work = tempfile.mkdtemp(prefix="bench-download-")
    server = None
    try:
        t0 = time.perf_counter()
        bench, big = make_sets(work, args.size_gb, args.big_gb)
        total = tree_bytes(bench)
        big_bytes = os.path.getsize(os.path.join(big, "model.safetensors"))
        print("file sets: org/bench %.2f GB (%d files), org/big %.2f GB, written in %.1f s"
              % (total / 1e9, len(os.listdir(bench)), big_bytes / 1e9, time.perf_counter() - t0), flush=True)
        server = subprocess.Popen([sys.executable, os.path.join(REPO_ROOT, "tests", "hubserver.py"), "serve",
                                   "org/bench=" + bench, "org/big=" + big],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
        url = server.stdout.readline().strip()
        print("fake hub at %s" % url, flush=True)

        # Warm-up, not counted: the server's first reads of the source files come from the disk.
        for d in (bench, big):
            for name in os.listdir(d):
                with open(os.path.join(d, name), "rb") as f:
                    while f.read(64 * 1024 * 1024):
                        pass
        hf_cli = shutil.which("hf") or shutil.which("hf", path=os.path.dirname(sys.executable))
        hf_name = "hf download (CLI)" if hf_cli else "snapshot_download"
        dest_root = tempfile.mkdtemp(prefix="bench-dest-", dir=args.dest_dir) if args.dest_dir else work
        print("downloads land in %s" % ("a fresh directory under " + args.dest_dir if args.dest_dir
                                         else "the work directory"), flush=True)
        results = {"hf": [], "ours": [], "ours_transfer": []}
        for i in range(args.repeat):
            order = ("hf", "ours") if i % 2 == 0 else ("ours", "hf")
            for who in order:
                dest = os.path.join(dest_root, "dest-%s-%d" % (who, i))
                if who == "hf":
                    cmd = ([hf_cli, "download", "org/bench", "--local-dir", dest] if hf_cli
                           else [sys.executable, "-c", SNAPSHOT, "org/bench", dest])
                    dt = timed(cmd, env_for(url, os.path.join(work, "home-hf-%d" % i)),
                               os.path.join(work, "log-hf-%d.txt" % i))
                    results["hf"].append(dt)
                else:
                    dt, transfer, _after, _spec, _env = run_ours(url, work, "bench-%d" % i, "org/bench", dest)
                    results["ours"].append(dt)
                    if transfer:
                        results["ours_transfer"].append(transfer)
                got = tree_bytes(dest)
                assert got == total, (who, got, total)
                print("  run %d %-8s %6.2f s  %7.1f MB/s" % (i + 1, who, dt, total / dt / 1e6), flush=True)
                shutil.rmtree(dest)

        hf_best, ours_best = min(results["hf"]), min(results["ours"])
        hf_med, ours_med = statistics.median(results["hf"]), statistics.median(results["ours"])
        print()
        print("throughput, %.2f GB over loopback, whole command (process start to exit):" % (total / 1e9))
        print("  %-26s best %7.1f MB/s   median %7.1f MB/s" % (hf_name, total / hf_best / 1e6, total / hf_med / 1e6))
        print("  %-26s best %7.1f MB/s   median %7.1f MB/s   (includes sha256 + verdict)"
              % ("specdeck download", total / ours_best / 1e6, total / ours_med / 1e6))
        if results["ours_transfer"]:
            print("  %-26s best %7.1f MB/s   (first request to last byte, from the job's log)"
                  % ("specdeck transfer only", total / min(results["ours_transfer"]) / 1e6))
        print("  ratio specdeck / hf:       best %.3f   median %.3f" % (hf_best / ours_best, hf_med / ours_med))

        print()
        print("last byte to verdict, %.2f GB model.safetensors:" % (big_bytes / 1e9))
        dest = os.path.join(dest_root, "dest-big")
        dt, transfer, after, spec, env = run_ours(url, work, "big", "org/big", dest)
        print("  download job: %.2f s in all, transfer %.2f s, last byte -> verdict %.2f s (hashed while receiving)"
              % (dt, transfer or -1, after if after is not None else -1))
        target = os.path.join(dest, "model.safetensors")
        t0 = time.perf_counter()
        out = subprocess.run(["sha256sum", target], capture_output=True, text=True, check=True).stdout
        t_sum = time.perf_counter() - t0
        t_ossl = None
        if shutil.which("openssl"):
            t0 = time.perf_counter()
            subprocess.run(["openssl", "dgst", "-sha256", target], capture_output=True, check=True)
            t_ossl = time.perf_counter() - t0
        verify_dir = job_with_spec(os.path.join(work, "job-verify"), spec)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", RUNNER, "verify", verify_dir], env=env, capture_output=True,
                           text=True)
        t_verify = time.perf_counter() - t0
        verdict = json.loads(p.stdout.strip().splitlines()[-1])
        inner = re.search(r"\(([\d.]+) s\)\n?$", p.stdout.strip().splitlines()[-2] + "\n")
        print("  sha256sum:                          %.2f s  (%s..)" % (t_sum, out.split()[0][:12]))
        if t_ossl is not None:
            print("  openssl dgst -sha256:               %.2f s" % t_ossl)
        print("  specdeck verify (whole process):    %.2f s  hashing %s s, verdict %s"
              % (t_verify, inner.group(1) if inner else "?", verdict["status"]))
        if dest_root != work:
            shutil.rmtree(dest_root, ignore_errors=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        if args.keep:
            print("work directory kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
