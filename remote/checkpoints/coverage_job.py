"""The coverage job, run under the host's ML interpreter (it needs transformers): the target's
own tokenizer turns a text, or the tokens a running server generates for a set of prompts, into
target ids, and coverage.py says what share of them the drafter's vocabulary holds, which
tokens it cannot propose (decoded) and the bound that puts on accept length at each K.

Run as `python -c BOOTSTRAP SPEC.json` (see methods.checkpoint_coverage); progress.json in the
job directory says the phase and, at the end, holds the result, which is also kept where
`checkpoint.coverage_last` finds it. The last stdout line is the result as JSON.
"""

import json
import os
import sys
import time
import urllib.request

from ..core.records import write_json
from . import coverage

CHUNK_BYTES = 256 * 1024  # text tokenized per piece (cut at a line's end), a batch of them at a time
BATCH_CHUNKS = 16


class Progress:
    def __init__(self):
        self.path = os.path.join(os.environ.get("SPECDECK_JOB_DIR", "."), "progress.json")
        self.value = {"state": "loading", "done": 0, "total": 0, "result": None, "error": None}
        self.write()

    def write(self, **changes):
        self.value.update(changes)
        self.value["updated_at"] = time.time()
        write_json(self.path, dict(self.value, final=self.value["state"] in ("done", "failed")))


def _chunks(path):
    """Pieces of about CHUNK_BYTES of the text, each ending at a line's end (so no word is cut)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        piece, size = [], 0
        for line in f:
            piece.append(line)
            size += len(line)
            if size >= CHUNK_BYTES:
                yield "".join(piece), size
                piece, size = [], 0
        if piece:
            yield "".join(piece), size


def text_tokens(tokenizer, path, progress):
    """The target ids of a text file, as one sequence (a text is one output read in order)."""
    total = os.path.getsize(path)
    progress.write(state="tokenizing", total=total)
    ids, done, batch = [], 0, []

    def flush():
        for encoded in tokenizer([text for text, _ in batch], add_special_tokens=False)["input_ids"]:
            ids.extend(encoded)

    for text, size in _chunks(path):
        batch.append((text, size))
        done += len(text.encode("utf-8"))
        if len(batch) >= BATCH_CHUNKS:
            flush()
            batch = []
            progress.write(done=min(done, total))
    if batch:
        flush()
    progress.write(done=total)
    return [ids]


def server_tokens(tokenizer, spec, progress):
    """The ids a running server generates for the prompts, one sequence per request (its own
    token ids when the engine returns them, else its text tokenized again, said in a note)."""
    prompts = spec["prompts"]
    progress.write(state="generating", total=len(prompts))
    sequences, retokenized = [], 0
    for index, prompt in enumerate(prompts):
        payload = {"model": spec["model"], "prompt": prompt, "max_tokens": spec["max_tokens"], "temperature": 0.0,
                   "return_token_ids": True}
        request = urllib.request.Request(spec["url"] + "/v1/completions", data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as reply:
            choice = json.loads(reply.read())["choices"][0]
        if isinstance(choice.get("token_ids"), list):
            sequences.append(choice["token_ids"])
        else:
            sequences.append(tokenizer(choice.get("text") or "", add_special_tokens=False)["input_ids"])
            retokenized += 1
        progress.write(done=index + 1)
    return sequences, retokenized


def run(spec):
    progress = Progress()
    try:
        inside, info = coverage.draft_vocabulary(spec["drafter"])
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(spec["target"], trust_remote_code=bool(spec.get("trust_remote_code")))
        began = time.monotonic()
        retokenized = 0
        if spec.get("url"):
            sequences, retokenized = server_tokens(tokenizer, spec, progress)
        else:
            sequences = text_tokens(tokenizer, spec["text_path"], progress)
        elapsed_s = time.monotonic() - began
        progress.write(state="counting")
        result = coverage.summarize(sequences, inside, lambda token: tokenizer.decode([token]), info, spec.get("top") or coverage.TOP_MISSING)
        result.update(drafter=spec["drafter"], target=spec["target"], text=spec.get("text_name"), server=spec.get("server"),
                      seconds=elapsed_s, tokens_per_s=result["tokens"] / elapsed_s if elapsed_s > 0 else None,
                      target_tokenizer_size=len(tokenizer), time=time.time())
        if retokenized:
            result["note"] += "; %d of %d replies carried no token ids and were tokenized again from their text" % (retokenized, len(sequences))
        if spec.get("result_path"):
            os.makedirs(os.path.dirname(spec["result_path"]), mode=0o700, exist_ok=True)
            write_json(spec["result_path"], result)
        progress.write(state="done", result=result)
        print(json.dumps(result))
        return 0
    except Exception as exc:
        progress.write(state="failed", error="%s: %s" % (type(exc).__name__, exc))
        print("specdeck coverage failed: %s: %s" % (type(exc).__name__, exc), file=sys.stderr)
        return 1


def main(argv):
    with open(argv[-1]) as f:
        spec = json.load(f)
    return run(spec)
