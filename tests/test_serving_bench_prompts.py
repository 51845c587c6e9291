"""`specdeck bench --prompts FILE`: the prompt file read on the laptop (JSON lines with a
category, plain lines, a line at fault named by its number, an empty file) and the command's
one-line errors for a file it cannot use, given before any host is asked."""

import json

import pytest

from tests.helpers.cli import run_cli
from tui.serving.bench_categories import read_prompts


def test_read_prompts_takes_json_lines_with_categories_and_plain_lines(tmp_path):
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"prompt": "def add(a, b):", "category": "code"}\n\n'
                     "Tell me about the sea.\n"
                     '{"prompt": "2 + 2 =", "category": "maths"}\n'
                     "{braces} open a plain prompt too\n"
                     '{"prompt": "no category given"}\n')
    assert read_prompts(str(mixed)) == (
        ["def add(a, b):", "Tell me about the sea.", "2 + 2 =", "{braces} open a plain prompt too", "no category given"],
        ["code", "default", "maths", "default", "default"])
    plain = tmp_path / "plain.txt"
    plain.write_text("first prompt\nsecond prompt\n")
    assert read_prompts(str(plain)) == (["first prompt", "second prompt"], None)  # no categories: none sent


@pytest.mark.parametrize("text, said", [
    ('{"prompt": "fine", "category": "code"}\n{"prompt": 5, "category": "code"}\n', "line 2: prompt and category must be strings"),
    ('ok\nok\n{"prompt": "cut off", "category": \n', 'line 3: not a JSON object {"prompt", "category"}'),
    ("", "has no prompts"),
    ("\n  \n", "has no prompts"),
])
def test_read_prompts_names_what_is_wrong(tmp_path, text, said):
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        read_prompts(str(path))
    assert said in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_bench_says_in_one_line_why_it_cannot_use_the_prompt_file(tmp_path):
    # The file is read before any host is asked: "nohost" is never reached.
    missing = run_cli("bench", "nohost", "/models/target", "--drafter", "/models/drafter", "--prompts", tmp_path / "absent.jsonl")
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "cannot read %s: No such file or directory" % (tmp_path / "absent.jsonl") in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "category": "code"}\n{"prompt": ["x"]}\n')
    refused = run_cli("bench", "nohost", "/models/target", "--drafter", "/models/drafter", "--prompts", bad, "--json")
    assert refused.returncode == 2
    error = json.loads(refused.stderr)["error"]
    assert error["type"] == "UsageError" and error["message"] == "%s line 2: prompt and category must be strings" % bad
