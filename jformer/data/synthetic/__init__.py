"""Synthetic tasks for judging attention variants, as pure NumPy generators of decoder-only examples.

Tasks (one module each; each docstring gives the exact rule, the paper and where it departs from the paper's code):
  mqar            multi-query associative recall (Arora et al. 2023, Zoology)
  induction       induction heads: the token after an earlier trigger (Olsson et al. 2022; Fu et al. 2023, H3)
  selective_copy  data tokens scattered among blanks, reproduced in order (Gu & Dao 2023, Mamba)
  listops         ListOps expressions and their value (Nangia & Bowman 2018; Long Range Arena, Tay et al. 2020)

One format for every task: `TASKS[name](seed, index, **options)` is a dict of `tokens` int32 [L] and `answer_mask`
bool [L], L fixed by the options. A model predicts tokens[t] from tokens[:t]; loss and accuracy count only the
positions where answer_mask is True. Task tokens are ids FIRST_ID = 3 onwards (0, 1, 2 are jformer's pad, eos and
unk; 0 pads the end of a shorter example). Example `index` of dataset `seed` is drawn with
`np.random.default_rng([seed, index])` alone, so a dataset needs no state to resume or shard by index.
`SIZES[name](**options)` (or `sizes(name, **options)`) checks the options, raising a ValueError that names the
option and its allowed range, and gives `Sizes(seq_len, vocab_size)` to size a model's config.

    batch = examples("mqar", seed=0, indices=range(64), seq_len=128, num_kv_pairs=8)  # tokens int32 [64, 128]

As datasets of the registry (`data.dataset="mqar"`, options in `data.dataset_options`): `dataset.py`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from jformer.data.synthetic import induction, listops, mqar, selective_copy
from jformer.data.synthetic.common import FIRST_ID, Sizes

TASKS = {"mqar": mqar.example, "induction": induction.example, "selective_copy": selective_copy.example,
         "listops": listops.example}
SIZES = {"mqar": mqar.sizes, "induction": induction.sizes, "selective_copy": selective_copy.sizes,
         "listops": listops.sizes}


def _task(name: str) -> str:
  if name not in TASKS:
    raise ValueError(f"unknown synthetic task {name!r}; use one of {sorted(TASKS)}.")
  return name


def sizes(task: str, **options) -> Sizes:
  """`Sizes(seq_len, vocab_size)` of task `task` with `options` (its defaults for the rest): every example's length
  and the embedding rows a model needs. A ValueError names an option out of its range."""
  return SIZES[_task(task)](**options)


def examples(task: str, seed: int, indices: Iterable[int], **options) -> dict[str, np.ndarray]:
  """Examples `indices` of dataset `seed` of task `task`, stacked: `tokens` int32 [N, L], `answer_mask` bool [N, L]
  (row i is `TASKS[task](seed, indices[i], **options)`)."""
  rows = [TASKS[_task(task)](seed, index, **options) for index in indices]
  if not rows:
    raise ValueError("examples: indices is empty.")
  return {key: np.stack([row[key] for row in rows]) for key in rows[0]}


__all__ = ["FIRST_ID", "SIZES", "Sizes", "TASKS", "examples", "induction", "listops", "mqar", "selective_copy",
           "sizes"]
