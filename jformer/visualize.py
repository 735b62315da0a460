"""Attention maps of a trained translation model for one sentence: `jformer visualize-attention`.

The sentence is translated with the run's configured decoder (`decode.method`), then one teacher-forced
forward pass on (source, translation) records the attention weights of every layer and head, as the run's
attention variant computes them (its registered `weights` function: softmax(Q K^T / sqrt(d_k) + bias) for the
paper's attention, the window for `local`, the normalised kernel for `linear`, the learned score for
`additive`, ...; `MultiHeadAttention` sows them into the 'intermediates' collection).
One PNG per layer and kind, with one heatmap per head and the SentencePiece pieces on the axes:

    encoder_self_layer{i}.png   rows: source pieces       columns: source pieces
    decoder_self_layer{i}.png   rows: predicted pieces    columns: decoder input (<s> + previous pieces)
    cross_layer{i}.png          rows: predicted pieces    columns: source pieces

Row t of a decoder map is the step that predicts piece t; it sees decoder inputs 0..t. `attention.npz` holds
the weights (`{kind}_layer{i}`: `[H, rows, columns]`) and the pieces, for analysis beyond the pictures.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import sentencepiece as spm
from etils import epath

from jformer.decode.translator import make_translator, translate_ids
from jformer.ops.tokens import EOS_ID

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the non-interactive backend)

# kind -> (title, row axis, column axis).
KINDS = {"encoder_self": ("encoder self-attention", "source (query)", "source (key)"),
         "decoder_self": ("decoder self-attention (causal)", "predicted piece", "decoder input"),
         "cross": ("encoder-decoder attention", "predicted piece", "source")}
START_PIECE = "<s>"  # label of the decoder's start input (`ops.tokens.BOS_ID`, as shift_right feeds it).


@dataclasses.dataclass
class AttentionMaps:
  """Pieces on the axes and weights `{kind: [per layer: [H, rows, columns]]}` for one sentence pair."""
  text: str
  source: list[str]
  target: list[str]
  translation: str
  weights: dict[str, list[np.ndarray]]

  def axes(self, kind: str) -> tuple[list[str], list[str]]:
    """(row labels, column labels) of the maps of `kind`."""
    if kind == "encoder_self":
      return self.source, self.source
    return self.target, (self.source if kind == "cross" else [START_PIECE] + self.target[:-1])


def record_attention(model, params, inputs_1xS: jax.Array, targets_1xT: jax.Array) -> dict[str, list[np.ndarray]]:
  """Teacher-forced forward pass of one pair; `{kind: [per layer: weights [H, T or S, S or T]]}` (float32)."""
  forward = jax.jit(functools.partial(model.apply, mutable=["intermediates"]))
  stacks = forward({"params": params}, inputs_1xS, targets_1xT)[1]["intermediates"]
  sown = lambda stack, i, block: np.asarray(stacks[stack][f"layer_{i}"][block]["attention_weights"][0][0])
  cfg = model.config
  return {"encoder_self": [sown("encoder", i, "self_attention") for i in range(cfg.num_encoder_layers)],
          "decoder_self": [sown("decoder", i, "self_attention") for i in range(cfg.num_decoder_layers)],
          "cross": [sown("decoder", i, "cross_attention") for i in range(cfg.num_decoder_layers)]}


def attention_maps(config, model, params, tokenizer, text: str, *, rng=None) -> AttentionMaps:
  """Translates `text` with the run's decoder (`config.decode`) and records the attention of that translation."""
  if not model.is_encoder_decoder:
    raise ValueError("visualize-attention needs an encoder-decoder run (model.architecture='transformer')")
  for layer_config in (*model.config.layer_configs(), model.config):  # each layer kind's, and cross-attention's.
    variant = layer_config.attention_variant
    if variant.weights is None:
      raise ValueError(f"attention variant '{variant.name}' has no weights function (it never forms attention "
                       "weights), so there are no attention maps to draw")
  source_ids = tokenizer.encode(text)
  max_length = model.config.max_length
  if len(source_ids) > max_length:
    source_ids = source_ids[:max_length - 1] + source_ids[-1:]
  translator = make_translator(config, model, params, tokenizer)  # the run's decoding options.
  decode = jax.jit(functools.partial(translate_ids, model, max_extra_length=translator.max_extra_length,
                                     **translator.decode_options), static_argnames=("max_decode_len",))
  inputs = jnp.asarray([source_ids], jnp.int32)
  output = np.asarray(decode(params, inputs, rng=rng, max_decode_len=min(
      max_length, len(source_ids) + translator.max_extra_length)))[0].tolist()
  target_ids = output[:output.index(EOS_ID) + 1] if EOS_ID in output else output
  pieces = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
  return AttentionMaps(text=text, source=[pieces.id_to_piece(i) for i in source_ids],
                       target=[pieces.id_to_piece(i) for i in target_ids], translation=tokenizer.decode(target_ids),
                       weights=record_attention(model, params, inputs, jnp.asarray([target_ids], jnp.int32)))


def plot_heads(weights_HxTxS: np.ndarray, rows: list[str], columns: list[str], *, title: str, row_name: str,
               column_name: str, path: str) -> None:
  """One PNG: a heatmap per head (color scale from 0 to the figure's largest weight), pieces on both axes."""
  heads = weights_HxTxS.shape[0]
  ncols = min(heads, 4)
  nrows = -(-heads // ncols)
  cell = 0.22  # inches per piece
  width = max(2.5, 1.2 + cell * len(columns) + 0.08 * max(map(len, rows)))
  height = max(2.5, 1.2 + cell * len(rows) + 0.08 * max(map(len, columns)))
  fig, axes = plt.subplots(nrows, ncols, figsize=(ncols * width + 1.0, nrows * height + 0.8), squeeze=False,
                           layout="constrained")
  for h, ax in enumerate(axes.flat):
    if h >= heads:
      ax.axis("off")
      continue
    image = ax.imshow(weights_HxTxS[h], cmap="viridis", vmin=0.0, vmax=float(weights_HxTxS.max()), aspect="auto",
                      interpolation="nearest")
    ax.set_title(f"head {h}", fontsize=9)
    ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_xlabel(column_name, fontsize=8)
    if h % ncols == 0:
      ax.set_ylabel(row_name, fontsize=8)
  fig.suptitle(title, fontsize=10)
  fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
  with epath.Path(path).open("wb") as f:
    fig.savefig(f, format="png", dpi=110)
  plt.close(fig)


def write_attention_maps(maps: AttentionMaps, out_dir: epath.PathLike) -> list[str]:
  """Writes `{kind}_layer{i}.png` for every kind and layer, and `attention.npz`, into `out_dir` (a local folder or
  any `etils.epath` path, e.g. gs://); returns the PNG paths."""
  out_dir = epath.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  paths, arrays = [], {}
  for kind, (what, row_name, column_name) in KINDS.items():
    rows, columns = maps.axes(kind)
    for i, weights in enumerate(maps.weights[kind]):
      name = f"{kind}_layer{i}"
      arrays[name] = weights
      paths.append(os.fspath(out_dir / f"{name}.png"))
      plot_heads(weights, rows, columns, title=f"{what}, layer {i}\n{maps.text}  ->  {maps.translation}",
                 row_name=row_name, column_name=column_name, path=paths[-1])
  with (out_dir / "attention.npz").open("wb") as f:
    np.savez(f, source=np.array(maps.source), target=np.array(maps.target), **arrays)
  return paths
