#!/usr/bin/env bash
# A real SpecForge 0.2.0 training as a specdeck job on one GPU: its curves, checkpoints and log
# as specdeck gives them, into $OUT.
# Usage: record_specforge.sh RECIPE_DIR, where RECIPE_DIR holds run.yaml and make_data.py of the
# recorded SpecForge 0.2.0 recipe and whl/ the wheels its README names (cp312, 4 MiB). Run it from
# the repository's root on the GPU machine, with OUT set to where the recording goes; what it
# writes there is kept as tests/data/specforge-0.2.0-h200-job/.
set -u
R="$(cd "${1:?usage: record_specforge.sh RECIPE_DIR}" && pwd)"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/whl/*.whl || exit 3
PYTHONPATH=/tmp/site python3 -c 'import specforge.cli' || exit 4
PYTHONPATH=/tmp/site python3 "$R/make_data.py" --out /tmp/sfdata > /tmp/make_data.log 2>&1 || { tail -20 /tmp/make_data.log; exit 5; }
export HOME=/tmp/sdhome; mkdir -p "$HOME"
PY=$(command -v python3); echo "python: $PY"; "$PY" -c "import yaml, torch; print(torch.__version__)"
sd() { python3 -m tui.cli "$@"; }
started=$(sd train local --name specforge-tiny --save-dir /tmp/sfout --env PYTHONPATH=/tmp/site \
    --env HF_HUB_OFFLINE=1 --env TRANSFORMERS_OFFLINE=1 --env HF_DATASETS_OFFLINE=1 --env NCCL_NVLS_ENABLE=0 \
    --env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --json -- "$(command -v python3)" -m specforge.cli train --config "$R/run.yaml" \
    model.target_model_path=/tmp/sfdata/target model.draft_model_config=/tmp/sfdata/draft_config.json \
    model.vocab_mapping_path=/tmp/sfdata/vocab_mapping.pt data.hidden_states_path=/tmp/sfdata/train \
    data.eval_hidden_states_path=/tmp/sfdata/eval output_dir=/tmp/sfout)
echo "$started"
job=$(echo "$started" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') || exit 6
for i in $(seq 1 90); do
    sleep 5
    state=$(sd jobs local --json | python3 -c "import json,sys; print(next(j['process_state'] for j in json.load(sys.stdin) if j['id']=='$job'))")
    [ $((i % 6)) = 0 ] && { echo "t=$((i*5)) s: $state"; [ $i = 6 ] && sd gpus local --json > "$OUT/gpus-during.json" 2>&1; }
    case "$state" in running|starting|queued|pending) ;; *) break ;; esac
done
sleep 3
sd curves local "$job" --json > "$OUT/curves.json" 2>&1
sd checkpoints local "$job" --json > "$OUT/checkpoints.json" 2>&1
sd checkpoints local "$job" > "$OUT/checkpoints.txt" 2>&1
sd logs local "$job" --raw > "$OUT/specforge-train.log" 2>&1
(cd /tmp/sfout && ls -la . */) > "$OUT/save-listing.txt" 2>&1
sd curves local "$job"; cat "$OUT/checkpoints.txt"; tail -5 "$OUT/specforge-train.log"
