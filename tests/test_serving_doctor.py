"""Pre-serve checks and the d2t comparison, on this machine's agent (`local`) with small drafters
written here: an EAGLE-3 drafter told method `eagle` is an error that refuses `serve` (unless
--force), a drafter made for fewer positions than the served context is a finding, a clean
pair is ok; `compare` of two drafters counts the draft ids whose d2t names another target token;
and the regression rule's follow-up once a server is back within its baseline."""

import json

from tests.checkpoint_fixtures import vocab_maps, write_drafter, write_json
from tests.helpers.cli import run_cli
from remote.notify.regressions import Regressions
from remote.serving.baselines import BaselineStore, pair_key


def write_pair(tmp_path, positions=4096):
    target = tmp_path / "target"
    target.mkdir()
    write_json(target / "config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 256,
                                        "num_hidden_layers": 8, "max_position_embeddings": 8192})
    drafter = write_drafter(tmp_path / "drafter", aux_layer_ids=[1, 3, 5])
    config_path = tmp_path / "drafter" / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = positions
    write_json(config_path, config)
    return str(target), drafter


def doctor(*args):
    result = run_cli("doctor", "local", *args, "--json")
    return result.returncode, json.loads(result.stdout)


def test_doctor_finds_a_wrong_method_and_a_short_context_and_serve_refuses_without_force(agent_home, tmp_path):
    target, drafter = write_pair(tmp_path, positions=2048)
    code, clean = doctor(target, "--drafter", drafter, "--max-model-len", "2048")
    assert code == 0 and clean["status"] == "ok", clean
    assert all(set(f) == {"check", "severity", "message"} for f in clean["findings"])
    # The loading checks compare makes are here too, from the same code.
    assert {"hidden_size", "vocab_size", "aux_layer_ids", "method", "max_position_embeddings"} <= {f["check"] for f in clean["findings"]}

    code, wrong = doctor(target, "--drafter", drafter, "--method", "eagle", "--max-model-len", "4096")
    assert code == 1 and wrong["status"] == "error"
    by_check = {f["check"]: f for f in wrong["findings"]}
    assert by_check["method"]["severity"] == "error" and "accept length 1.00" in by_check["method"]["message"]
    assert "fuses 3 x 64 target hidden states" in by_check["method"]["message"]
    assert by_check["max_position_embeddings"]["severity"] == "warning"
    assert "made for 2048 positions but the server serves 4096" in by_check["max_position_embeddings"]["message"]

    # Sampling: the target's generation_config.json is what requests without a temperature get.
    write_json(tmp_path / "target" / "generation_config.json", {"temperature": 0.6, "top_p": 0.95})
    code, sampled = doctor(target, "--drafter", drafter, "--max-model-len", "2048")
    assert code == 0 and sampled["status"] == "warning"
    by_check = {f["check"]: f for f in sampled["findings"]}
    assert "temperature 0.6 (from the target's generation_config.json)" in by_check["temperature"]["message"]
    assert "accept length falls below what greedy decoding" in by_check["temperature"]["message"]
    assert by_check["top_p_top_k"]["severity"] == "warning"

    told_eagle = ["--", "--speculative-config", '{"method": "eagle", "model": "%s", "num_speculative_tokens": 3}' % drafter]
    refused = run_cli("serve", "local", target, "--drafter", drafter, *told_eagle)
    assert refused.returncode == 1 and "refused (serve --force starts it anyway)" in refused.stderr
    assert "method 'eagle'" in refused.stderr and "accept length 1.00" in refused.stderr
    assert json.loads(run_cli("jobs", "local", "--json", check=0).stdout) == []  # nothing started
    forced = run_cli("serve", "local", target, "--drafter", drafter, "--force", "--json", *told_eagle, check=0)
    assert json.loads(forced.stdout)["id"] and "ERROR   method" in forced.stderr  # started, the error still said


def test_compare_counts_the_draft_ids_that_name_other_tokens(tmp_path):
    write_drafter(tmp_path / "a", seed=0)
    write_drafter(tmp_path / "b", seed=1)
    write_drafter(tmp_path / "c", seed=0, values=1)
    draft_vocab, target_vocab = 96, 256
    kept_a, kept_b = vocab_maps(draft_vocab, target_vocab, 0)[2], vocab_maps(draft_vocab, target_vocab, 1)[2]
    expected = sum(1 for x, y in zip(kept_a, kept_b) if x != y)
    assert 0 < expected < draft_vocab
    result = run_cli("compare", tmp_path / "a", tmp_path / "b", "--json")
    assert json.loads(result.stdout)["draft_ids_remapped"] == expected
    text = run_cli("compare", tmp_path / "a", tmp_path / "b").stdout
    assert "Vocabulary map: %d of 96 draft ids now name other tokens" % expected in text
    # Other weights, one vocabulary: no draft id moved.
    assert json.loads(run_cli("compare", tmp_path / "a", tmp_path / "c", "--json").stdout)["draft_ids_remapped"] == 0


class Host:
    """What the rule reads of the evaluator: the daemon's jobs, its host name, where alerts go."""

    def __init__(self, meta):
        self.daemon = type("Daemon", (), {"jobs": type("Jobs", (), {"describe": staticmethod(lambda job_id: {"id": job_id, "meta": meta})})()})()
        self.host = "gpu1"
        self.alerts = []
        self.raise_alert = self.alerts.append

    def _job(self, job_id):
        return {"id": job_id, "name": "vllm k2 + eagle3"}


def test_a_regression_is_told_once_and_followed_once_when_it_recovers(tmp_path):
    store = BaselineStore(str(tmp_path / "baselines.json"))
    store.save(pair_key("/m/target", "/m/drafter/"), 3.1, [0.8, 0.6], 0.1, 60.0, "j1")
    host = Host({"target": "/m/target/", "drafter": "/m/drafter"})
    rule = Regressions(host, store)
    for when, length in ((0, 2.41), (30, 2.41), (59, 2.41), (60, 2.41), (61, 2.0), (70, None), (80, 3.0), (90, 3.05), (95, 2.5)):
        rule.serving_record({"server": "j2", "accept_length": length}, 1000.0 + when)
    kinds = [(a["kind"], a["id"]) for a in host.alerts]
    assert kinds == [("acceptance_regression", "regression:j2:1000"), ("acceptance_recovered", "regression:j2:1000:resumed")]
    assert "accept length 2.41, baseline 3.10 (-22%) for 1 min" in host.alerts[0]["message"]
    assert "back within 10% of its baseline 3.10" in host.alerts[1]["message"]
    assert store.remove(pair_key("/m/target", "/m/drafter"))
    rule.serving_record({"server": "j2", "accept_length": 1.0}, 2000.0)
    rule.serving_record({"server": "j2", "accept_length": 1.0}, 3000.0)
    assert len(host.alerts) == 2  # no baseline any more: nothing told
