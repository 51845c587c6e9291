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
