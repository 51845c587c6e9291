"""The pre-serve checks as a wire method (remote/serving/doctor.py holds the checks and the gate
`serving.start` passes through)."""

from ..core.protocol import BadRequest
from ..core.wire import method
from . import engines
from .doctor import examine_serve


@method("serving.doctor")
def serving_doctor(call):
    """Check how a drafter would be served, without starting anything. Params: `target`,
    `drafter` (required), `engine` (vllm|sglang), `k`, `engine_args` (as `serving.start` takes
    them: a method or context given there is what is checked), `max_model_len` (the served
    context), `method` (the speculative method the engine would be told; default what
    `serving.start` tells it: eagle3), `temperature` (what the requests will send). Reply:
    `{status: ok|warning|error, findings: [{check, severity, message}]}`: the loading checks
    `compare` makes (hidden_size, vocab_size, aux_layer_ids, ...), `method`,
    `max_position_embeddings`, `temperature` / `top_p_top_k`, each message naming the symptom;
    `serving.start` refuses a drafter with an error finding unless `force`. A target's
    config.json or generation_config.json that is there but no regular file (a FIFO), over
    4 MiB or not a JSON object is refused (NotACheckpoint, one line naming it), as it is by
    `serving.start` and `serving.bench`; `k`, `port`, `engine_args` or `env` given as null is a
    BadRequest."""
    from .methods import _server_params

    spec = _server_params(call)
    if not spec["drafter"]:
        raise BadRequest("doctor needs a drafter")
    engines.check_paths(spec["target"], spec["drafter"])
    argv = engines.server_argv(spec["engine"], spec["target"], spec["drafter"], spec["k"], spec["port"], engine_args=spec["engine_args"])
    if call.param("method", str):
        flag = "--speculative-algorithm" if spec["engine"] == "sglang" else "--speculative-config"
        told = call.param("method", str) if spec["engine"] == "sglang" else '{"method": "%s"}' % call.param("method", str).replace('"', "")
        argv += [flag, told]
    if call.param("max_model_len", int) is not None:
        argv += ["--max-model-len", str(call.param("max_model_len", int))]
    return examine_serve(spec, argv, call.param("temperature", float))
