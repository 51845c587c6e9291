#!/usr/bin/env bash
# Every benchmark of benchmarks/, one after another, each with the options the closing notes
# quote, its whole output kept in OUT_DIR/NAME.log and its wall time in OUT_DIR/times.txt.
#
#   bash benchmarks/run_all.sh OUT_DIR [TREE]
#
# TREE (default: this checkout) is the tree measured, with its own .venv (`pip install -e
# '.[test]'` there): its `specdeck` script and its modules are what the commands run, so an
# older commit is measured as it was (git worktree add DIR COMMIT). The engines (vLLM on the
# CPU, Slurm, sshd) are the ones .ci/run installs. Run on a quiet machine: the benchmarks take
# both cores, and two at once measure each other.
set -uo pipefail

out=$(realpath -m "${1:?usage: run_all.sh OUT_DIR [TREE]}")
tree=$(realpath "${2:-$(dirname "$0")/..}")
python="$tree/.venv/bin/python"
[ -x "$python" ] || { echo "no $python: make the tree's venv first (pip install -e '.[test]')" >&2; exit 2; }
mkdir -p "$out"
cd "$tree"
export PYTHONUNBUFFERED=1

# name, then the command line's arguments after the interpreter
benchmarks=(
    "import_graph|benchmarks/import_graph.py"
    "bench_inspect|benchmarks/bench_inspect.py --repeat 10"
    "bench_sha256|benchmarks/bench_sha256.py --runs 3"
    "bench_inspect_moe|benchmarks/bench_inspect_moe.py --sizes 100k --repeat 3"
    "bench_compare|benchmarks/bench_compare.py"
    "bench_download|benchmarks/bench_download.py --repeat 3"
    "download_many_files|benchmarks/download_many_files.py --files 20000 --window-s 20"
    "bench_spine|-m pytest benchmarks/bench_spine.py -q -s -p no:cacheprovider"
    "bench_headless|-m pytest benchmarks/bench_headless.py -q -s -p no:cacheprovider"
    "bench_fleet|-m pytest benchmarks/bench_fleet.py -q -s -p no:cacheprovider"
    "bench_flood|benchmarks/bench_flood.py"
    "bench_follow|benchmarks/bench_follow.py"
    "bench_feeds|benchmarks/bench_feeds.py --seconds 10"
    "bench_telemetry|benchmarks/bench_telemetry.py --replay tests/data/nvml-h200.json.gz --gpus 8 --seconds 15"
    "bench_console|benchmarks/bench_console.py"
    "bench_console_streams|benchmarks/bench_console_streams.py --idle-seconds 5"
    "bench_console_fleet|benchmarks/bench_console_fleet.py --seconds 10"
    "bench_web|benchmarks/bench_web.py --idle-seconds 10 --rounds 5"
    "bench_training|benchmarks/bench_training.py"
    "bench_training_hostile|benchmarks/bench_training_hostile.py 10"
    "bench_alert_latency|benchmarks/bench_alert_latency.py"
    "bench_notify|benchmarks/bench_notify.py"
    "bench_report|benchmarks/bench_report.py"
    "bench_history|benchmarks/bench_history.py --days 1"
    "bench_serving_windows|benchmarks/bench_serving_windows.py"
    "bench_serving|benchmarks/bench_serving.py --vllm"
    "bench_per_request|benchmarks/bench_per_request.py --categories"
    "bench_k_sweep|benchmarks/bench_k_sweep.py --ks 1,2"
    "bench_slurm|-m pytest benchmarks/bench_slurm.py -q -s -p no:cacheprovider"
)

only=" ${ONLY:-} "  # ONLY="bench_a bench_b": just those
for entry in "${benchmarks[@]}"; do
    name=${entry%%|*}
    args=${entry#*|}
    if [ "$only" != "  " ] && [[ "$only" != *" $name "* ]]; then continue; fi
    start=$SECONDS
    # shellcheck disable=SC2086  # the arguments are this script's own words
    timeout --kill-after=30 1200 "$python" $args >"$out/$name.log" 2>&1
    rc=$?
    printf '%-24s %4d s  exit %d\n' "$name" $((SECONDS - start)) "$rc" | tee -a "$out/times.txt"
done
