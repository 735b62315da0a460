"""The synthetic tasks as datasets and a task: rows generated from the seed (a seed per split), per-host shards,
a resumable iterator, options and the vocabulary size checked at load, and loss, accuracy and exact match counted on
the answer positions only (against a hand computation from the full logits)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import config as config_lib
from jformer import data, tasks
from jformer.data import synthetic
from jformer.data.synthetic.dataset import split_seed
from jformer.tasks.synthetic import answer_metrics
from jformer.train.step import make_eval_step

OPTIONS = dict(vocab_size=8, seq_len=16, num_kv_pairs=2, eval_examples=10)  # 11 token ids: 3 reserved + 8.


def datasets(**kwargs):
  args = dict(dataset="mqar", options=OPTIONS, batch_size=4, seed=0, prefetch=0)
  return data.make_synthetic_datasets(**{**args, **kwargs})


def tiny_config(repo_root, **overrides):
  base = {"data.dataset_options": dict(OPTIONS), "model.vocab_size": 11, "data.max_length": 16,
          "model.max_length": 16, "model.d_model": 16, "model.num_heads": 2, "model.d_ff": 32,
          "model.num_decoder_layers": 1}
  return config_lib.load(repo_root / "configs" / "mqar.py", {**base, **overrides})


def test_rows_are_the_generators_examples_of_the_splits_seed():
  train = next(datasets(seed=5).train)
  want = synthetic.examples("mqar", split_seed(5, "train"), range(4), vocab_size=8, seq_len=16, num_kv_pairs=2)
  np.testing.assert_array_equal(train["targets"], want["tokens"])
  np.testing.assert_array_equal(train["targets_weights"], want["answer_mask"])
  assert train["targets_weights"].sum() == 4 * 2  # two answers per row.
  np.testing.assert_array_equal(train["targets_position"], np.tile(np.arange(16), (4, 1)))
  assert split_seed(5, "train") == 15 and split_seed(5, "valid") == 16 and split_seed(5, "test") == 17


def test_same_seed_same_rows_other_seed_or_split_other_rows():
  first, again, other = (datasets(seed=s) for s in (0, 0, 1))
  a, b, c = next(first.train), next(again.train), next(other.train)
  np.testing.assert_array_equal(a["targets"], b["targets"])
  assert not np.array_equal(a["targets"], c["targets"])
  valid, test = first.eval_batches("valid")[0], first.eval_batches("test")[0]
  assert not np.array_equal(valid["targets"], test["targets"])
  assert not np.array_equal(valid["targets"], a["targets"])
  np.testing.assert_array_equal(valid["targets"], again.eval_batches("valid")[0]["targets"])


def test_hosts_read_disjoint_examples_and_as_many_eval_batches():
  hosts = [datasets(shard_index=i, shard_count=2, eval_batch_size=2) for i in range(2)]
  one = datasets(batch_size=8)
  rows = [next(h.train)["targets"] for h in hosts]
  whole = next(one.train)["targets"]
  np.testing.assert_array_equal(rows[0], whole[0::2])  # host 0: examples 0, 2, 4, 6.
  np.testing.assert_array_equal(rows[1], whole[1::2])
  assert not {r.tobytes() for r in rows[0]} & {r.tobytes() for r in rows[1]}
  valid = [h.eval_batches("valid") for h in hosts]
  assert [len(v) for v in valid] == [3, 3]  # 5 examples per host in batches of 2: the last has a padding row.
  assert valid[0][-1]["targets"][1].sum() == 0 and valid[0][-1]["targets_weights"][1].sum() == 0
  got = np.concatenate([b["targets"] for b in valid[0]])[:5]
  np.testing.assert_array_equal(got, np.concatenate([b["targets"] for b in one.eval_batches("valid")])[:10:2])


def test_train_iterator_resumes_from_its_state():
  run = datasets()
  for _ in range(3):
    next(run.train)
  state = run.train.get_state()
  want = next(run.train)
  resumed = datasets()
  resumed.train.set_state(state)
  np.testing.assert_array_equal(next(resumed.train)["targets"], want["targets"])


def test_vocab_size_and_length_are_checked_in_one_line(repo_root):
  with pytest.raises(ValueError) as error:
    tiny_config(repo_root, **{"model.vocab_size": 12})
  message = str(error.value)
  assert message == ("invalid config: model.vocab_size=12 but data.dataset='mqar' has 11 token ids; set "
                     "--config.model.vocab_size=11")
  with pytest.raises(ValueError, match=r"data.max_length=32 but data.dataset='mqar' rows have 16 tokens; set "
                                       r"--config.data.max_length=16"):
    tiny_config(repo_root, **{"data.max_length": 32, "model.max_length": 32})


def test_dataset_options_are_the_datasets_own(repo_root):
  with pytest.raises(ValueError, match=r"dataset 'mqar' has no option\(s\) \['pairs'\]; its options are "
                                       r"\['eval_examples', 'num_kv_pairs', 'power_a'"):
    tiny_config(repo_root, **{"data.dataset_options.pairs": 4})
  with pytest.raises(ValueError, match=r"mqar: num_kv_pairs=5 is out of range; allowed \[1, 3\]"):
    tiny_config(repo_root, **{"data.dataset_options.num_kv_pairs": 5})
  with pytest.raises(ValueError, match=r"dataset 'parallel_text' has no option\(s\) \['seq_len'\]; its options are "
                                       "none"):
    config_lib.load(repo_root / "configs" / "small.py", {"data.dataset_options.seq_len": 64})
  with pytest.raises(ValueError, match="data.dataset='mqar' is a synthetic task; set model.architecture='synthetic'"):
    tiny_config(repo_root, **{"model.architecture": "lm"})
  assert data.load_tokenizer(tiny_config(repo_root), "/nonexistent").vocab_size == 11  # nothing read or trained.


def test_loss_accuracy_and_exact_match_count_only_the_answers(repo_root):
  """The eval step's sums against the full logits read by hand at the answer positions of a tiny batch: row 0's
  answers made right (each set to the model's prediction, left to right), row 1's first answer right and its last
  wrong, row 2 as generated."""
  model = tasks.build_model(tiny_config(repo_root))
  batch = datasets(batch_size=3).eval_batches("valid")[0]
  batch = {key: value[:3].copy() for key, value in batch.items()}
  params = nn.meta.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), jnp.asarray(batch["targets"])))["params"]

  forward = jax.jit(lambda tokens: model.apply({"params": params}, tokens,
                                                positions=jnp.asarray(batch["targets_position"]),
                                                segmentation=jnp.asarray(batch["targets_segmentation"])))

  def logits():
    return np.asarray(forward(jnp.asarray(batch["targets"])), np.float64)

  answers = [np.flatnonzero(row) for row in batch["targets_weights"]]
  for t in answers[0]:
    batch["targets"][0, t] = logits()[0, t].argmax()
  first, last = answers[1]
  batch["targets"][1, first] = logits()[1, first].argmax()
  batch["targets"][1, last] = 3 + (logits()[1, last].argmax() - 3 + 1) % 8  # a task token, not the prediction.
  z = logits()
  log_p = z - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)) - z.max(-1, keepdims=True)
  nll = -np.take_along_axis(log_p, batch["targets"][..., None].astype(np.int64), -1)[..., 0]
  right = z.argmax(-1) == batch["targets"]
  mask = batch["targets_weights"] == 1
  sums = jax.device_get(jax.jit(make_eval_step(model))(params, {k: jnp.asarray(v) for k, v in batch.items()}))
  assert float(sums["tokens"]) == 6.0  # two answers per row; the other 45 tokens carry no weight.
  np.testing.assert_allclose(float(sums["nll_sum"]), nll[mask].sum(), rtol=1e-5)
  assert float(sums["correct"]) == right[mask].sum() and right[0][answers[0]].all() and not right[1][last]
  want_exact = sum(right[i][answers[i]].all() for i in range(3))
  assert float(sums["examples"]) == 3.0 and float(sums["exact"]) == want_exact and want_exact >= 1
  metrics = answer_metrics({k: float(v) for k, v in sums.items()})
  assert metrics["accuracy"] == pytest.approx(right[mask].mean()) and metrics["exact_match"] == want_exact / 3
  assert metrics["loss"] == pytest.approx(nll[mask].mean(), rel=1e-5)


@pytest.mark.parametrize("task, options", [
    ("induction", dict(vocab_size=5, seq_len=9)),
    ("selective_copy", dict(vocab_size=6, seq_len=12, num_tokens=3)),
    ("listops", dict(max_depth=3, max_args=4, min_length=0, max_length=12)),  # the value after the expression.
])
def test_every_task_is_a_dataset_with_its_answers_as_weights(task, options):
  run = data.make_synthetic_datasets(dataset=task, options={**options, "eval_examples": 3}, batch_size=2, seed=1,
                                     prefetch=0)
  batch = next(run.train)
  want = synthetic.examples(task, split_seed(1, "train"), range(2), **options)
  np.testing.assert_array_equal(batch["targets"], want["tokens"])
  np.testing.assert_array_equal(batch["targets_weights"], want["answer_mask"])
  np.testing.assert_array_equal(batch["targets_segmentation"], want["tokens"] != 0)  # ListOps pads after its value.
  assert run.sizes == synthetic.sizes(task, **options)
  assert sum(len(b["targets"]) for b in run.eval_batches("test")) == 4  # 3 examples, a padding row.
