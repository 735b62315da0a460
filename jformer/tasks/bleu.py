"""Corpus BLEU with sacreBLEU: detokenized, cased, default 13a tokenization (comparable across papers)."""

from __future__ import annotations

from typing import Sequence

from sacrebleu.metrics import BLEU


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
  """(BLEU score 0-100, sacreBLEU signature) of detokenized hypotheses against one reference each."""
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
  metric = BLEU()
  score = metric.corpus_score(list(hypotheses), [list(references)])
  return float(score.score), str(metric.get_signature())
