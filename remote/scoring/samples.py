"""Hidden-state samples as the trainers write them, found and described without reading them:
speculators' data generation (DATA/hidden_states/hs_N.safetensors with `token_ids` and
`hidden_states[seq, layers, H]`, the last layer the target's final state when it was asked for;
the prepared data set beside them holds the loss mask and the train/validation split) and
SpecForge's prepare_hidden_states (rows_A-B/data_N.ckpt, a torch.save of input_ids, loss_mask,
hidden_state (the final state, after the norm) and aux_hidden_state). Listing is one directory
pass; the first sample's shapes are read from its header (a .ckpt's pickle is read by a
restricted unpickler that builds nothing). Standard library only.
"""

import os
import pickle
import re
import zipfile

from ..core.regular_files import open_regular, reason
from . import tensors
from .drafter import Refused

SPECULATORS, SPECFORGE = "speculators", "specforge"
_HS = re.compile(r"hs_(\d+)\.safetensors\Z")
_CKPT = re.compile(r"data_(\d+)\.ckpt\Z")
_ROWS = re.compile(r"rows_\d+-\d+\Z")
MAX_PICKLE_BYTES = 16 * 1024 * 1024  # a .ckpt's data.pkl: four tensors' descriptions
MAX_SAMPLE_BYTES = 64 * 1024 ** 3  # one sample's file (a 128k-token sample of a 16k-wide target is ~17 GB in bf16)


def _scan(directory, pattern):
    """[(N, path)] of the files in `directory` whose names match `pattern`, in N order."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                match = pattern.match(entry.name)
                if match:
                    found.append((int(match.group(1)), entry.path))
    except OSError as exc:
        raise Refused("cannot list %s: %s" % (directory, reason(exc)))
    found.sort()
    return found


def find(data):
    """{layout, files: [(N, path)], dataset (the prepared data set's directory, or None)} of the
    data directory. Raises Refused when it holds neither layout."""
    if not os.path.isdir(data):
        raise Refused("no data directory %s" % data)
    inner = os.path.join(data, "hidden_states")
    for directory, dataset in ((inner, data), (data, os.path.dirname(os.path.normpath(data)))):
        if os.path.isdir(directory):
            files = _scan(directory, _HS)
            if files:
                has_dataset = os.path.exists(os.path.join(dataset, "state.json"))
                return {"layout": SPECULATORS, "files": files, "dataset": dataset if has_dataset else None}
    files = _scan(data, _CKPT)
    try:
        rows = sorted(e.path for e in os.scandir(data) if _ROWS.match(e.name) and e.is_dir())
    except OSError as exc:
        raise Refused("cannot list %s: %s" % (data, reason(exc)))
    for directory in rows:
        files += _scan(directory, _CKPT)
    if files:
        files.sort()
        return {"layout": SPECFORGE, "files": files, "dataset": None}
    raise Refused("%s holds no hidden-state samples: neither speculators' hidden_states/hs_N.safetensors nor "
                  "SpecForge's rows_*/data_N.ckpt" % data)


class _Stub(object):
    """What a restricted unpickler builds for anything it is not asked to understand."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        pass


def _rebuild_tensor(storage, offset, size, *rest):
    return ("tensor", storage, tuple(size))


class _ShapesOnly(pickle.Unpickler):
    """Reads a torch.save pickle into {key: ("tensor", storage, shape)}, building no object of
    any class: every global is a stub, except the tensor rebuild, which only records a shape."""

    def find_class(self, module, name):
        if module == "torch._utils" and name.startswith("_rebuild_tensor"):
            return _rebuild_tensor
        if module == "collections" and name == "OrderedDict":
            return dict
        if module == "torch" and name.endswith("Storage") or module == "torch" and name in ("float32", "bfloat16", "float16", "int64", "int32", "bool"):
            return name
        return _Stub

    def persistent_load(self, pid):
        # ('storage', storage type, key, location, numel)
        return tuple(pid) if isinstance(pid, tuple) else pid


def ckpt_shapes(path):
    """{key: shape} of the tensors in a SpecForge .ckpt (a torch.save zip), from its pickle alone."""
    try:
        with open_regular(path) as f:
            with zipfile.ZipFile(f) as archive:
                pickled = [i for i in archive.infolist() if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
                if not pickled or pickled[0].file_size > MAX_PICKLE_BYTES:
                    raise Refused("%s is not a torch.save file of a few tensors" % path)
                value = _ShapesOnly(archive.open(pickled[0])).load()
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError) as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused("cannot read %s: %s" % (path, reason(exc) if isinstance(exc, OSError) else exc))
    if not isinstance(value, dict):
        raise Refused("%s holds no dict of tensors" % path)
    return dict((k, v[2]) for k, v in value.items() if isinstance(v, tuple) and len(v) == 3 and v[0] == "tensor")


def describe(found, drafter_aux_count, target):
    """What the first sample says of the data, checked against the target and the drafter's aux
    layers: {layers, hidden_size, final_normed}. Raises Refused with how to capture what is missing."""
    index, path = found["files"][0]
    name = os.path.basename(path)
    layers_needed = drafter_aux_count + 1
    capture = ("capture it with the target's final state too: speculators' launch_vllm.py --include-last-layer, "
               "or ask vLLM's extract_hidden_states for layer id %d (the target's num_hidden_layers) after the aux layers"
               % target["num_hidden_layers"])
    if found["layout"] == SPECULATORS:
        try:
            spans = tensors.header_spans(path)
        except tensors.TensorsError as exc:
            raise Refused("sample %s: %s" % (name, exc))
        states, tokens = spans.get("hidden_states"), spans.get("token_ids")
        if states is None or tokens is None or len(states.shape) != 3:
            raise Refused("sample %s has no token_ids and hidden_states[seq, layers, hidden] (it has %s)"
                          % (name, ", ".join(sorted(spans)) or "no tensors"))
        seq, layers, hidden = states.shape
        if hidden != target["hidden_size"]:
            raise Refused("sample %s holds states of width %d, but the target's hidden size is %d: another target's data"
                          % (name, hidden, target["hidden_size"]))
        if layers == drafter_aux_count:
            raise Refused("the data holds %d layers per token, the drafter's %d aux layers only: without the target's "
                          "final hidden state its own choice cannot be known; %s" % (layers, drafter_aux_count, capture))
        if layers != layers_needed:
            raise Refused("the data holds %d layers per token, but the drafter fuses %d aux layers and the target's "
                          "final state makes %d" % (layers, drafter_aux_count, layers_needed))
        return {"layers": layers, "hidden_size": hidden, "final_normed": False, "dtype": states.dtype}
    shapes = ckpt_shapes(path)
    if "hidden_state" not in shapes or "aux_hidden_state" not in shapes:
        missing = "hidden_state (the target's final state)" if "hidden_state" not in shapes else "aux_hidden_state"
        raise Refused("sample %s has no %s; %s" % (name, missing, capture if "hidden_state" not in shapes else
                                                     "run SpecForge's prepare_hidden_states with --enable-aux-hidden-states"))
    final, aux = shapes["hidden_state"], shapes["aux_hidden_state"]
    if final[-1] != target["hidden_size"]:
        raise Refused("sample %s holds states of width %d, but the target's hidden size is %d: another target's data"
                      % (name, final[-1], target["hidden_size"]))
    if aux[-1] != drafter_aux_count * target["hidden_size"]:
        raise Refused("sample %s holds aux states of width %d = %g layers of %d, but the drafter fuses %d"
                      % (name, aux[-1], aux[-1] / float(target["hidden_size"]), target["hidden_size"], drafter_aux_count))
    # SpecForge keeps the state the target's logits processor was given: after the final norm.
    return {"layers": drafter_aux_count + 1, "hidden_size": final[-1], "final_normed": True, "dtype": None}
