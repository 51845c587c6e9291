"""The score job, run under the host's ML interpreter (torch): reads the target's three tensors,
the drafter(s), then the samples one at a time (bounded memory whatever the data's size), runs
the draft chain over each (chain.py) and adds up the histograms (counts.py). progress.json in
the job directory says the phase, samples done, rate and ETA; at the end it holds the result,
which is also kept where `score.last` finds it, and the speculation profile is written beside
the drafter (profile.py). The last stdout line is the result as JSON.

Run as `python -c BOOTSTRAP SPEC.json` (see methods.score_start); the spec is what plan.py
checked before the job started.
"""

import json
import os
import sys
import time

from ..core.records import write_json
from ..core.regular_files import open_regular, reason
from . import chain, counts, packs, profile, samples, tensors

PROGRESS_EVERY_S = 1.0
TORCH_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64", "I64": "int64", "I32": "int32",
                "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
NOTED_SKIPS = 5  # skipped samples named in the result (the rest counted)


class Progress(object):
    def __init__(self):
        self.path = os.path.join(os.environ.get("SPECDECK_JOB_DIR", "."), "progress.json")
        self.value = {"state": "loading", "done": 0, "total": 0, "result": None, "error": None}
        self.last = 0.0
        self.write()

    def write(self, force=True, **changes):
        self.value.update(changes)
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        self.value["updated_at"] = time.time()
        write_json(self.path, dict(self.value, final=self.value["state"] in ("done", "failed")))


def tensor_of(torch, span, device=None):
    """A tensor read from its byte range (tensors.read_span's bounds) onto `device`."""
    raw = tensors.read_span(span)
    dtype = getattr(torch, TORCH_DTYPES[span.dtype])
    value = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    value = value.reshape(tuple(span.shape))
    return value.to(device) if device is not None else value


class SampleError(ValueError):
    """A sample that cannot be scored (truncated, NaN states, tokens outside the vocabulary)."""


def _check_size(path):
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise SampleError(reason(exc))
    if size > samples.MAX_SAMPLE_BYTES:
        raise SampleError("%d bytes, over the %d a sample may have" % (size, samples.MAX_SAMPLE_BYTES))


def load_sample(torch, layout, path, aux_count):
    """(token ids [L], aux states [L, aux x H], final states [L, H], loss mask [L] or None) of one
    sample, on the CPU."""
    _check_size(path)
    if layout == samples.SPECULATORS:
        try:
            spans = tensors.header_spans(path)
        except tensors.TensorsError as exc:
            raise SampleError(str(exc))
        if "token_ids" not in spans or "hidden_states" not in spans:
            raise SampleError("no token_ids and hidden_states in it")
        try:
            tokens = tensor_of(torch, spans["token_ids"]).long().reshape(-1)
            states = tensor_of(torch, spans["hidden_states"])
        except tensors.TensorsError as exc:
            raise SampleError(str(exc))
        if states.dim() != 3 or states.shape[0] != tokens.shape[0] or states.shape[1] != aux_count + 1:
            raise SampleError("hidden_states %s does not fit %d tokens and %d layers" % (list(states.shape), tokens.shape[0], aux_count + 1))
        # Copies of both parts: the file's buffer is freed, a sample costs its own size once.
        return tokens, states[:, :-1].reshape(states.shape[0], -1), states[:, -1].clone(), None
    try:
        with open_regular(path) as f:
            data = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as exc:  # a torch.save file cut short, or not one: torch's own words
        raise SampleError("%s: %s" % (type(exc).__name__, exc))
    try:
        tokens = data["input_ids"].long().reshape(-1)
        final = data["hidden_state"].reshape(tokens.shape[0], -1)
        aux = data["aux_hidden_state"].reshape(tokens.shape[0], -1)
        mask = data["loss_mask"].reshape(-1).bool() if "loss_mask" in data else None
    except (KeyError, RuntimeError, AttributeError, TypeError) as exc:
        raise SampleError("its tensors do not fit one another: %s" % exc)
    return tokens, aux, final, mask


class Dataset(object):
    """The prepared data set beside speculators' hidden states: its loss masks and row count, read
    through pyarrow memory-mapped (a row at a time is touched), when the ML interpreter has it."""

    def __init__(self, directory):
        self.table, self.why_not = None, None
        if directory is None:
            self.why_not = "no prepared data set beside the hidden states"
            return
        try:
            import pyarrow  # noqa: F401  (the ML interpreter's; datasets brings it)
            import pyarrow.ipc
        except ImportError:
            self.why_not = "the ML interpreter has no pyarrow to read the data set beside the hidden states"
            return
        try:
            with open_regular(os.path.join(directory, "state.json")) as f:
                state = json.loads(f.read(1 << 20).decode("utf-8"))
            tables = []
            for entry in state.get("_data_files") or ():
                path = os.path.join(directory, os.path.basename(entry["filename"]))
                with open_regular(path):
                    pass  # a regular file: memory_map below never waits on a FIFO
                tables.append(pyarrow.ipc.open_stream(pyarrow.memory_map(path)).read_all())
            self.table = pyarrow.concat_tables(tables) if len(tables) > 1 else (tables[0] if tables else None)
            if self.table is None or "loss_mask" not in self.table.column_names:
                self.table, self.why_not = None, "the data set beside the hidden states has no loss_mask"
        except Exception as exc:  # pyarrow's own errors, a broken state.json
            self.table, self.why_not = None, "cannot read the data set beside the hidden states: %s" % exc

    def rows(self):
        return None if self.table is None else self.table.num_rows

    def row(self, index):
        """(input_ids, loss_mask) of a row, as lists."""
        return self.table.column("input_ids")[index].as_py(), self.table.column("loss_mask")[index].as_py()


def pick_device(torch, need_bytes, asked):
    """("cuda:N" or "cpu", why): the GPU when one is free enough for the tensors, else the CPU."""
    if asked == "cpu":
        return "cpu", "asked for"
    if not torch.cuda.is_available():
        return "cpu", "no GPU visible to torch"
    best, best_free = None, -1
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        if free > best_free:
            best, best_free = index, free
    if best_free >= need_bytes:
        return "cuda:%d" % best, "%.1f GiB free" % (best_free / 2.0 ** 30)
    return "cpu", "GPUs busy: at most %.1f GiB free, %.1f GiB needed" % (best_free / 2.0 ** 30, need_bytes / 2.0 ** 30)


def select(files, split, ratio, rows, limit):
    """The sample files to score and what they are: the validation split (rows at or after
    int(rows x ratio), as speculators splits) by default where the layout has one."""
    if split == "all" or rows is None:
        chosen = files
    else:
        boundary = int(rows * ratio)
        chosen = [(n, p) for n, p in files if (n >= boundary) == (split == "val")]
    return chosen[:limit] if limit else chosen


def run(spec):
    progress = Progress()
    try:
        import torch

        torch.set_grad_enabled(False)
        target, drafters, k = spec["target"], spec["drafters"], spec["k"]
        aux_count = drafters[0]["aux_count"]
        need = 2 * target["tensor_bytes"] + sum(8 * d["weight_bytes"] for d in drafters) + (1 << 30)
        device, device_why = pick_device(torch, need, spec.get("device"))
        compute = torch.float32 if device == "cpu" else getattr(torch, TORCH_DTYPES.get(target["spans"]["lm_head"]["dtype"], "float32"))
        if compute not in (torch.float32, torch.bfloat16, torch.float16):
            compute = torch.float32

        def load(span_dict, dtype=compute):
            return tensor_of(torch, tensors.Span(**span_dict), device).to(dtype)

        progress.write(state="reading the target's embed_tokens, norm and lm_head")
        head = load(target["spans"]["lm_head"])
        norm = load(target["spans"]["norm"])
        needs_embed = any(d["embed_from"] == "target" for d in drafters)
        same = target["spans"]["embed"] == target["spans"]["lm_head"]
        target_embed = (head if same else load(target["spans"]["embed"])) if needs_embed else None
        runners = []
        for d in drafters:
            spans = tensors.all_names(d["path"])
            wanted = [d["names"][key] for key in ("fc", "norm", "lm_head", "hidden_norm", "input_norm", "embed") if d["names"].get(key)]
            wanted += d["names"]["fc_norm"] + [n for layer in d["names"]["layers"] for n in layer.values()]
            weights = dict((name, tensor_of(torch, spans[name], device).to(compute)) for name in wanted)
            d2t = tensor_of(torch, spans[d["names"]["d2t"]]).long() if d["names"].get("d2t") else None
            embed = weights[d["names"]["embed"]] if d["names"].get("embed") else target_embed
            runners.append(chain.Drafter(torch, d, weights, embed, d2t, device))

        found = samples.find(spec["data"])
        dataset = Dataset(found["dataset"]) if found["layout"] == samples.SPECULATORS else None
        rows = dataset.rows() if dataset is not None else None
        split = spec.get("split") or ("val" if found["layout"] == samples.SPECULATORS else "all")
        if found["layout"] == samples.SPECULATORS and rows is None and split != "all":
            split = "all"  # no row count, no split: said below
        chosen = select(found["files"], split, spec.get("train_ratio", 0.9), rows, spec.get("samples"))
        # Tallies stay on the device until the end: nothing waits on it sample by sample.
        histograms = [torch.zeros(k + 1, dtype=torch.long, device=device) for _ in runners]
        cuts = [torch.zeros((), dtype=torch.long, device=device) for _ in runners]
        paths = torch.zeros(3, dtype=torch.long, device=device)  # positions, off-path tokens, samples with some
        scored_samples, skipped, skipped_count = 0, [], 0
        pending, pending_bytes = [], 0

        def flush():
            """Scores the pending samples as one pack (packs.Pack) and adds to the tallies."""
            lengths = [t.shape[0] for t, _a, _f, _m in pending]
            scored_cpu = torch.cat([m if m is not None else torch.ones(t.shape[0], dtype=torch.bool) for t, _a, _f, m in pending])
            pack = packs.Pack(torch, lengths, scored_cpu, k, device)
            tokens = torch.cat([t for t, _a, _f, _m in pending]).to(device)
            final = torch.cat([f for _t, _a, f, _m in pending]).to(device).to(compute)
            if not spec.get("final_normed"):
                final = chain.rms_norm(torch, final, norm, target["rms_norm_eps"])
            choices = torch.cat([(final[s:s + 1024] @ head.T).argmax(dim=-1) for s in range(0, final.shape[0], 1024)])
            del final
            aux = torch.cat([a for _t, a, _f, _m in pending]).to(device).to(compute)
            del pending[:]
            for number, runner in enumerate(runners):
                fused = runner.fuse(aux)
                histogram, cut = chain.score_pack(torch, runner, pack, tokens, fused, choices, k)
                histograms[number] += histogram
                cuts[number] += cut
                del fused
            del aux
            differ = (tokens[1:] != choices[:-1]) & pack.pairs
            per_sample = torch.zeros(pack.samples, dtype=torch.long, device=device).index_add_(0, pack.pair_sample, differ.long())
            paths.add_(torch.stack([pack.pairs.sum(), differ.sum(), (per_sample > 0).sum()]))

        began = time.monotonic()
        progress.write(state="scoring", total=len(chosen), done=0, device=device)
        for done, (index, path) in enumerate(chosen, 1):
            try:
                tokens, aux, final, mask = load_sample(torch, found["layout"], path, aux_count)
                if dataset is not None and dataset.table is not None and index < rows:
                    input_ids, loss_mask = dataset.row(index)
                    if input_ids != tokens.tolist():
                        raise SampleError("its token_ids are not row %d's input_ids in the data set" % index)
                    mask = torch.tensor(loss_mask, dtype=torch.bool)
                if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= target["vocab_size"]):
                    raise SampleError("token ids outside the target's vocabulary of %d" % target["vocab_size"])
                if not (bool(torch.isfinite(aux).all()) and bool(torch.isfinite(final).all())):
                    raise SampleError("its hidden states hold NaN or infinite values")
                if mask is not None and mask.shape[0] != tokens.shape[0]:
                    raise SampleError("its loss mask has %d entries for %d tokens" % (mask.shape[0], tokens.shape[0]))
            except SampleError as exc:
                said = str(exc)
                named = said if said.startswith(os.path.basename(path) + ":") else "%s: %s" % (os.path.basename(path), said)
                skipped_count += 1
                if len(skipped) < NOTED_SKIPS:  # the rest counted: nothing grows with the data
                    skipped.append(named)
                continue
            size = aux.numel() * aux.element_size() + final.numel() * final.element_size()
            if pending and (pending_bytes + size > packs.PACK_BYTES or len(pending) >= packs.PACK_SAMPLES):
                flush()
                pending_bytes = 0
            pending.append((tokens, aux, final, mask))
            pending_bytes += size
            del tokens, aux, final, mask
            scored_samples += 1
            elapsed = time.monotonic() - began
            rate = done / elapsed if elapsed > 0 else None
            progress.write(force=False, done=done, samples_scored=scored_samples, samples_per_s=rate,
                           eta_s=(len(chosen) - done) / rate if rate else None)
        if pending:
            flush()
        histograms = [h.tolist() for h in histograms]
        cuts = [int(c) for c in cuts]
        positions, off_path, off_path_samples = paths.tolist()
        progress.write(done=len(chosen), samples_scored=scored_samples)
        elapsed = time.monotonic() - began
        result = build_result(spec, found, split, rows, dataset, chosen, histograms, cuts, scored_samples, positions,
                              off_path, off_path_samples, skipped, device, device_why, elapsed, skipped_count=skipped_count)
        progress.write(state="writing the result")
        keep(spec, result)
        progress.write(state="done", result=result)
        print(json.dumps(result))
        return 0
    except Exception as exc:
        error = str(exc) if isinstance(exc, (tensors.TensorsError, samples.Refused)) else "%s: %s" % (type(exc).__name__, exc)
        progress.write(state="failed", error=error)
        print("specdeck score failed: %s" % error, file=sys.stderr)
        return 1


def keep(spec, result):
    """Each kept drafter's result where `score.last` finds it (its own figures first) and its
    speculation profile beside it (`result_paths`, `profile_fallbacks`: one per kept drafter, in
    the spec's order; a spec of one drafter may name `result_path`, `profile_fallback`)."""
    paths = spec.get("result_paths") or ([spec["result_path"]] if spec.get("result_path") else [])
    fallbacks = spec.get("profile_fallbacks") or [spec.get("profile_fallback")]
    kept = max(len(paths), 1)
    for index in range(min(kept, len(result["drafters"]))):
        figures = result["drafters"][index]
        fallback = fallbacks[index] if index < len(fallbacks) else None
        figures["profile"] = profile.write_beside(figures["drafter"], profile.build(result, index), fallback)
        if index < len(paths):
            os.makedirs(os.path.dirname(paths[index]), mode=0o700, exist_ok=True)
            write_json(paths[index], own_result(result, index))
    result["profile"] = result["drafters"][0].get("profile")


def own_result(result, index):
    """The result as drafter `index`'s own score: its figures at the top, it first among the drafters."""
    figures = result["drafters"][index]
    own = dict(result, drafters=[figures] + [d for n, d in enumerate(result["drafters"]) if n != index],
               profile=figures.get("profile"))
    for key in ("predicted_accept_length", "unconditional_shares", "conditional_rates", "predicted_accept_length_per_k",
                "accept_length_histogram", "chains"):
        own[key] = figures[key]
    return own


def build_result(spec, found, split, rows, dataset, chosen, histograms, cuts, scored_samples, positions, off_path,
                 off_path_samples, skipped, device, device_why, elapsed, skipped_count=None):
    """`skipped`: the first skipped samples' names; `skipped_count`: how many there were (len(skipped) when None)."""
    k = spec["k"]
    skipped_count = len(skipped) if skipped_count is None else skipped_count
    drafters = []
    for d, histogram, cut in zip(spec["drafters"], histograms, cuts):
        figures = counts.figures(histogram)
        figures.update(drafter=d["path"], format=d["format"], aux_layer_ids=d["aux_layer_ids"], histogram=histogram,
                       chains_cut=cut, bound="lower" if cut else None)
        drafters.append(figures)
    notes = []
    held_out = None
    if found["layout"] == samples.SPECULATORS:
        if rows is None:
            notes.append("%s: the split is not known, every sample was scored; those a drafter trained on this data set saw "
                         "are among them" % dataset.why_not)
        elif split == "val":
            held_out = True
        else:
            held_out = False
            notes.append("scored the %s rows: the drafter's own training data if it was trained on this data set "
                         "(speculators trains on the first %d%% of rows; the default, --split val, scores the rest)"
                         % ("training" if split == "train" else "training and validation", int(100 * spec.get("train_ratio", 0.9))))
    else:
        notes.append("SpecForge's hidden states have no split: if the drafter was trained on this directory, this is its own "
                     "training data and the score flatters it")
    if off_path:
        notes.append("%d of %d scored tokens (in %d of %d samples) are not the target's own greedy choices: a chain stops "
                     "where the data leaves the target's path (%s), so the accept length is a lower bound"
                     % (off_path, positions, off_path_samples, scored_samples,
                        ", ".join("%d chains cut" % c for c in cuts)))
    if skipped_count:
        notes.append("%d samples skipped: %s%s" % (skipped_count, "; ".join(skipped[:NOTED_SKIPS]),
                                                   " (and %d more)" % (skipped_count - NOTED_SKIPS) if skipped_count > NOTED_SKIPS else ""))
    if found["layout"] == samples.SPECULATORS and dataset is not None and dataset.table is None and rows is None:
        notes.append("no loss mask was read: every position was scored")
    first = drafters[0]
    return {
        "k": k, "predicted_accept_length": first["predicted_accept_length"], "drafters": drafters,
        "unconditional_shares": first["unconditional_shares"], "conditional_rates": first["conditional_rates"],
        "predicted_accept_length_per_k": first["predicted_accept_length_per_k"],
        "accept_length_histogram": first["accept_length_histogram"], "chains": first["chains"],
        "samples_scored": scored_samples, "samples_chosen": len(chosen), "samples_found": len(found["files"]),
        "samples_skipped": skipped_count, "positions": positions, "off_path_tokens": off_path,
        "data": spec["data"], "layout": found["layout"], "split": split, "held_out": held_out, "rows": rows,
        "target": spec["target"]["path"], "target_revision": spec["target"].get("revision"),
        "device": device, "device_reason": device_why, "seconds": elapsed,
        "samples_per_s": scored_samples / elapsed if elapsed > 0 else None, "notes": notes, "time": time.time(),
        "peak_rss_bytes": _peak_rss_bytes(),
    }


def _peak_rss_bytes():
    """This process's peak resident memory (Linux counts ru_maxrss in KiB, macOS in bytes)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def main(argv):
    with open(argv[-1]) as f:
        spec = json.load(f)
    return run(spec)
