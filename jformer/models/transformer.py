"""Encoder-decoder Transformer (paper Sec. 3, Fig. 1) and the stacks it is built from.

Token ids are int `[B, L]` with 0 = padding. Packed rows carry `*_segmentation` (1, 2, ... per example,
0 = padding) and `*_positions` (position inside its own example); without them a row is one example.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jformer import axes
from jformer.models import remat as remat_lib
from jformer.models.config import TransformerConfig
from jformer.models.layers import (AddPositions, AttentionBias, Dropout, Embed, FeedForward, MultiHeadAttention,
                                   logical, norm, residual)
from jformer.ops import logit_bias, padding_logit
from jformer.ops.softcap import soft_cap


def shift_right(x_BxL: jax.Array, segmentation_BxL: jax.Array | None = None) -> jax.Array:
  """Decoder input: targets shifted one step right with 0 (BOS) in front of every (packed) example."""
  shifted = jnp.pad(x_BxL, ((0, 0), (1, 0)))[:, :-1]
  if segmentation_BxL is not None:
    shifted = shifted * (segmentation_BxL == shift_right(segmentation_BxL))
  return shifted


def batch_keywords(batch: dict, names: dict[str, str]) -> dict:
  """`{argument: batch[key]}` for each `key -> argument` of `names` present in `batch` (packed rows carry them)."""
  return {argument: batch[key] for key, argument in names.items() if key in batch}


def segments_or_padding(tokens_BxL: jax.Array, segmentation_BxL: jax.Array | None) -> jax.Array:
  """Segment ids, defaulting to 1 on real tokens and 0 on padding (one example per row)."""
  return (tokens_BxL != 0).astype(jnp.int32) if segmentation_BxL is None else segmentation_BxL


class TransformerLayer(nn.Module):
  """Self-attention, encoder-decoder attention (only when `encoded` is given), feed-forward; each sublayer
  wrapped in residual + dropout + norm (paper Fig. 1: LayerNorm; `model.normalization`; `model.post_norm`: a second
  norm of each sublayer's output, `<sublayer>_post_norm`). `causal` masks future positions (decoder). `kind_config`
  (the config of its `model.layer_pattern` kind, `TransformerConfig.layer_config`; None: the model's) picks the
  self-attention's variant and positional encoding; cross-attention keeps the model's. `position_bias` (the stack's
  shared `AttentionBias` of this layer's encoding, or None) biases self-attention only; `mesh`: the
  `jformer.axes.Placement` the attention kernels run per device on (None: one device)."""
  config: TransformerConfig
  causal: bool
  position_bias: nn.Module | None = None
  mesh: axes.Placement | None = None
  kind_config: TransformerConfig | None = None

  def __call__(self, x_BxLxD, encoded_BxSxD=None, *, segment_ids_BxL=None, positions_BxL=None,
               encoder_segment_ids_BxS=None, deterministic=True, decode=False):
    """`[B, L, D]` -> `[B, L, D]`; `encoded_BxSxD` (decoder of the encoder-decoder model) adds cross-attention."""
    return self.layer(x_BxLxD, encoded_BxSxD, segment_ids_BxL, positions_BxL, encoder_segment_ids_BxS,
                      deterministic, decode)

  @nn.compact
  def layer(self, x_BxLxD, encoded_BxSxD, segment_ids_BxL, positions_BxL, encoder_segment_ids_BxS, deterministic,
            decode):
    """The layer itself (the module's one compact method: `__call__` and `LayerStep` call it)."""
    cfg = self.config
    sub = dict(dropout=Dropout(cfg.dropout_rate), pre_norm=cfg.norm == "pre", deterministic=deterministic)
    post = lambda sublayer: norm(cfg, f"{sublayer}_post_norm") if cfg.post_norm else None
    own = self.kind_config or cfg
    replaced = (own.attention, own.attention_options) != (cfg.attention, cfg.attention_options)
    self_attend = MultiHeadAttention(own, causal=self.causal, rotary=own.positional_encoding.acts == "rotary",
                                     position_bias=self.position_bias, mesh=self.mesh,
                                     teacher=cfg if replaced else None, name="self_attention")
    x_BxLxD = residual(
        x_BxLxD, lambda h: self_attend(h, q_segment_ids=segment_ids_BxL, kv_segment_ids=segment_ids_BxL,
                                       q_positions=positions_BxL, kv_positions=positions_BxL,
                                       deterministic=deterministic, decode=decode),
        norm=norm(cfg, "self_attention_norm"), post_norm=post("self_attention"), **sub)
    if encoded_BxSxD is not None:
      cross_attend = MultiHeadAttention(cfg, mesh=self.mesh, name="cross_attention")
      query_segments = segment_ids_BxL
      if query_segments is None:  # decoding: every query is a real token of example 1.
        query_segments = jnp.ones(x_BxLxD.shape[:2], jnp.int32)
      x_BxLxD = residual(
          x_BxLxD, lambda h: cross_attend(h, encoded_BxSxD, q_segment_ids=query_segments,
                                          kv_segment_ids=encoder_segment_ids_BxS, deterministic=deterministic,
                                          decode=decode),
          norm=norm(cfg, "cross_attention_norm"), post_norm=post("cross_attention"), **sub)
    feed_forward = FeedForward(cfg, name="feed_forward")
    return residual(x_BxLxD, feed_forward,
                    norm=norm(cfg, "feed_forward_norm"), post_norm=post("feed_forward"), **sub)


class EncoderLayer(TransformerLayer):
  """Encoder layer: bidirectional self-attention + feed-forward."""
  causal: bool = False


class DecoderLayer(TransformerLayer):
  """Decoder layer: masked self-attention + encoder-decoder attention + feed-forward (none for the LM)."""
  causal: bool = True


def rematerialize(stack: nn.Module, length: int, deterministic: bool) -> bool:
  """Whether `stack` recomputes its layers' activations in the backward pass (`model.remat`, models/remat.py):
  only when training, and not with a positional bias shared across layers (an encoding that acts "bias")."""
  cfg = stack.config
  return (remat_lib.wanted(cfg.remat, length) and not deterministic and not cfg.any_layer_acts("bias")
          and not stack.is_initializing())


def run_layer(stack: nn.Module, layer: TransformerLayer, x_BxLxD, encoded_BxSxD, segment_ids_BxL, positions_BxL,
              encoder_segment_ids_BxS, *, deterministic: bool, remat: bool, decode: bool = False):
  """`layer(x, ...)`; with `remat`, as a pure function of its parameters (taken from `stack`) whose activations
  are recomputed in the backward pass, dropout keyed by one key drawn from `stack`."""
  arguments = dict(segment_ids_BxL=segment_ids_BxL, positions_BxL=positions_BxL,
                   encoder_segment_ids_BxS=encoder_segment_ids_BxS, deterministic=deterministic)
  if not remat:
    return layer(x_BxLxD, encoded_BxSxD, **arguments, decode=decode)
  cfg = stack.config
  params = nn.meta.unbox(stack.variables["params"][layer.name])
  key = stack.make_rng("dropout") if max(cfg.dropout_rate, cfg.attention_dropout_rate) > 0 else None
  pure = layer.clone(parent=None)

  def apply(params, x, encoded, constants):
    segment_ids, positions, encoder_segment_ids, key = constants
    return pure.apply({"params": params}, x, encoded, segment_ids_BxL=segment_ids, positions_BxL=positions,
                      encoder_segment_ids_BxS=encoder_segment_ids, deterministic=deterministic,
                      rngs=None if key is None else {"dropout": key})

  return remat_lib.rematerialized(apply, params, x_BxLxD, encoded_BxSxD,
                                  (segment_ids_BxL, positions_BxL, encoder_segment_ids_BxS, key))


class LayerStep(TransformerLayer):
  """A layer as `nn.remat` and `nn.scan` call it: array arguments only, positional (None allowed), the flags held
  as attributes; `scanned` returns `(x, None)`, the (carry, output) of a scan body. Same parameters as the layer."""
  deterministic: bool = True
  decode: bool = False
  scanned: bool = False

  def __call__(self, x_BxLxD, encoded_BxSxD, segment_ids_BxL, positions_BxL, encoder_segment_ids_BxS):
    y_BxLxD = self.layer(x_BxLxD, encoded_BxSxD, segment_ids_BxL, positions_BxL, encoder_segment_ids_BxS,
                         self.deterministic, self.decode)
    return (y_BxLxD, None) if self.scanned else y_BxLxD


class LayerPeriod(nn.Module):
  """One repeat of `model.layer_pattern` as the body of a scan: its layers `layer_0 .. layer_{p-1}`, each of its
  kind, in turn; returns `(x, None)`. (Scanned layers share no positional bias: `TransformerConfig.validate`.)"""
  config: TransformerConfig
  causal: bool
  mesh: axes.Placement | None = None
  deterministic: bool = True
  decode: bool = False

  @nn.compact
  def __call__(self, x_BxLxD, *arguments):
    cfg = self.config
    for j, kind in enumerate(cfg.layer_pattern):
      x_BxLxD = LayerStep(cfg, causal=self.causal, mesh=self.mesh, kind_config=cfg.kind_configs[kind],
                          deterministic=self.deterministic, decode=self.decode, name=f"layer_{j}")(x_BxLxD, *arguments)
    return x_BxLxD, None


def run_stack(stack: nn.Module, num_layers: int, causal: bool, x_BxLxD, encoded_BxSxD, segment_ids_BxL,
              positions_BxL, encoder_segment_ids_BxS, *, position_biases: dict, deterministic: bool, remat: bool,
              decode: bool = False):
  """The stack's `num_layers` layers applied in turn to `x` `[B, L, D]`, layer i of the kind
  `config.layer_config(i)` (`model.layer_pattern`), with its encoding's shared bias module from `position_biases`
  (`stack_position_biases`).

  Looped (default): layers `layer_0`, `layer_1`, ... each with its own parameters; `model.remat` 'full'/'auto'
  recompute through `run_layer` (models/remat.py says why), a named policy through `nn.remat`. Scanned
  (`model.scan_layers`): one `nn.scan` over the layers, parameters `layers/...` stacked on a leading
  `[num_layers]` axis (no logical axis name: replicated), and so is the decode cache (its rows on axis 1, where
  the decoders find them: `decode.common.row_axis`), masks, positions and the encoder output broadcast to every
  layer, a dropout key per layer; its body is rematerialized by `nn.remat` with the `model.remat` policy.
  With a pattern of p > 1 kinds the scan runs over the pattern's num_layers / p repeats, the body a `LayerPeriod`:
  parameters `layers/layer_j/...` (j < p) stacked `[num_layers / p, ...]`.
  """
  cfg = stack.config
  if num_layers == 0:
    return x_BxLxD
  layer = lambda i: dict(kind_config=cfg.layer_config(i) if cfg.layer_pattern else None,
                         position_bias=position_biases.get(bias_key(cfg.layer_config(i))))
  if not cfg.scan_layers and not (remat and cfg.remat in remat_lib.POLICIES):
    layer_type = DecoderLayer if causal else EncoderLayer
    for i in range(num_layers):
      module = layer_type(cfg, mesh=stack.mesh, **layer(i), name=f"layer_{i}")
      x_BxLxD = run_layer(stack, module, x_BxLxD, encoded_BxSxD, segment_ids_BxL, positions_BxL,
                          encoder_segment_ids_BxS, deterministic=deterministic, remat=remat, decode=decode)
    return x_BxLxD
  period = len(cfg.layer_pattern) if cfg.scan_layers and len(cfg.layer_pattern) > 1 else 1
  body = LayerPeriod if period > 1 else LayerStep
  if remat:  # a scan body's recomputation cannot be merged with its forward pass: no CSE barrier needed there.
    body = nn.remat(body, policy=remat_lib.policy(cfg.remat), prevent_cse=not cfg.scan_layers)
  arguments = (encoded_BxSxD, segment_ids_BxL, positions_BxL, encoder_segment_ids_BxS)
  flags = dict(causal=causal, mesh=stack.mesh, deterministic=deterministic, decode=decode)
  if not cfg.scan_layers:
    for i in range(num_layers):
      x_BxLxD = body(cfg, **flags, **layer(i), name=f"layer_{i}")(x_BxLxD, *arguments)
    return x_BxLxD
  scan = nn.scan(body, variable_axes={"params": 0, "intermediates": 0, "cache": 0},
                 split_rngs={"params": True, "dropout": True}, in_axes=(nn.broadcast,) * len(arguments),
                 length=num_layers // period, metadata_params={nn.PARTITION_NAME: None})
  one_kind = {} if period > 1 else {**layer(0), "scanned": True}
  return scan(cfg, **flags, **one_kind, name="layers")(x_BxLxD, *arguments)[0]


def bias_key(layer_config: TransformerConfig) -> tuple | None:
  """What makes layers share a positional bias module: the same encoding that acts "bias", with the same options;
  None for a layer whose encoding does not act "bias"."""
  if layer_config.positional_encoding.acts != "bias":
    return None
  return layer_config.positional, layer_config.positional_options


def stack_position_biases(config: TransformerConfig, *, causal: bool) -> dict:
  """{`bias_key`: the self-attention bias module the stack's layers of that encoding share}: `position_bias` for
  the model's encoding (T5 shares one table across a stack), `position_bias_<kind>` for a kind's own; {} when no
  layer's encoding acts "bias"."""
  biases = {}
  for kind in dict.fromkeys(config.layer_pattern) or [None]:
    layer_config = config if kind is None else config.kind_configs[kind]
    key = bias_key(layer_config)
    if key is not None and key not in biases:
      name = "position_bias" if key == bias_key(config) else f"position_bias_{kind}"
      biases[key] = AttentionBias(layer_config, causal=causal, name=name)
  return biases


class Encoder(nn.Module):
  """Embedding + positions + dropout, N encoder layers, a final norm for pre-norm (`model.final_norm`)."""
  config: TransformerConfig
  embed: nn.Module
  mesh: axes.Placement | None = None

  @nn.compact
  def __call__(self, inputs_BxS, *, positions_BxS=None, segmentation_BxS=None, deterministic=True):
    cfg = self.config
    segment_ids_BxS = segments_or_padding(inputs_BxS, segmentation_BxS)
    x_BxSxD = AddPositions(cfg, name="positions")(self.embed(inputs_BxS), positions_BxS)
    x_BxSxD = Dropout(cfg.dropout_rate)(x_BxSxD, deterministic=deterministic)
    x_BxSxD = run_stack(self, cfg.num_encoder_layers, False, x_BxSxD, None, segment_ids_BxS, positions_BxS, None,
                        position_biases=stack_position_biases(cfg, causal=False), deterministic=deterministic,
                        remat=rematerialize(self, inputs_BxS.shape[1], deterministic))
    return norm(cfg, "final_norm")(x_BxSxD) if cfg.norm == "pre" and cfg.final_norm else x_BxSxD


class Decoder(nn.Module):
  """Shifted target embedding + positions, N decoder layers, output projection to vocabulary logits.

  With `encoded=None` the layers have no encoder-decoder attention: the decoder-only language model.
  The logits are y E^T with E the target embedding (tied, paper Sec. 3.4) or a separate output embedding
  `[V, D]`, plus a learned bias `final_logits_bias` `[V]` when `model.final_logits_bias`, soft-capped when
  `model.final_logit_softcap` > 0, the padding id's masked when not `model.predicts_padding`
  (`jformer.ops.padding_logit`). With `return_hidden=True` the call returns `(y [B, T, D], E [V, D])` instead, for
  a loss that projects chunk by chunk (`ops.linear_cross_entropy`, given the same soft-cap; the bias as one more
  feature, `ops.logit_bias`) rather than holding `[B, T, V]` logits.
  """
  config: TransformerConfig
  embed: nn.Module
  mesh: axes.Placement | None = None

  @nn.compact
  def __call__(self, targets_BxT, encoded_BxSxD=None, *, positions_BxT=None, segmentation_BxT=None,
               encoder_segment_ids_BxS=None, deterministic=True, decode=False, return_hidden=False):
    cfg = self.config
    if decode:  # the caller feeds the previous token; the cache holds the rest.
      y_BxT, segment_ids_BxT, positions_BxT = targets_BxT, None, None
    else:
      y_BxT = shift_right(targets_BxT, segmentation_BxT)
      segment_ids_BxT = segments_or_padding(targets_BxT, segmentation_BxT)
    y_BxTxD = AddPositions(cfg, name="positions")(self.embed(y_BxT), positions_BxT, decode=decode)
    y_BxTxD = Dropout(cfg.dropout_rate)(y_BxTxD, deterministic=deterministic)
    y_BxTxD = run_stack(self, cfg.num_decoder_layers, True, y_BxTxD, encoded_BxSxD, segment_ids_BxT, positions_BxT,
                        encoder_segment_ids_BxS, position_biases=stack_position_biases(cfg, causal=True),
                        deterministic=deterministic,
                        remat=not decode and rematerialize(self, targets_BxT.shape[1], deterministic), decode=decode)
    if cfg.norm == "pre" and cfg.final_norm:
      y_BxTxD = norm(cfg, "final_norm")(y_BxTxD)
    output_embed = self.embed if cfg.tie_output_embedding else Embed(cfg.vocab_size, cfg.d_model, cfg.compute_dtype,
                                                                       name="output_embedding")
    bias_V = self.param("final_logits_bias", logical(nn.initializers.zeros, axes.VOCAB), (cfg.vocab_size,),
                        jnp.float32) if cfg.final_logits_bias else None
    if return_hidden:
      hidden = y_BxTxD.astype(cfg.compute_dtype), output_embed.embedding
      hidden = hidden if bias_V is None else logit_bias.append_bias(*hidden, bias_V)
      return hidden if cfg.predicts_padding else padding_logit.mask_row(*hidden)
    logits = output_embed.attend(y_BxTxD).astype(jnp.float32)
    logits = soft_cap(logits if bias_V is None else logits + bias_V, cfg.final_logit_softcap)
    return logits if cfg.predicts_padding else padding_logit.mask_logit(logits)


class Transformer(nn.Module):
  """The encoder-decoder Transformer; `__call__` is teacher-forced, `encode`/`decode` serve decoding. `mesh`: the
  `jformer.axes.Placement` the attention kernels run per device on (None: one device, or under pmap)."""
  config: TransformerConfig
  mesh: axes.Placement | None = None
  is_encoder_decoder = True  # what callers ask instead of checking the class (`LanguageModel`: False).

  def call_arguments(self, batch: dict) -> tuple[tuple, dict]:
    """`(args, kwargs)` of the teacher-forced call `model(*args, **kwargs)` on a batch of `jformer.data` keys:
    'inputs', 'targets' and, for packed rows, '{inputs,targets}_{position,segmentation}'."""
    return (batch["inputs"], batch["targets"]), batch_keywords(batch, {
        "inputs_position": "inputs_positions", "targets_position": "targets_positions",
        "inputs_segmentation": "inputs_segmentation", "targets_segmentation": "targets_segmentation"})

  def setup(self):
    cfg = self.config
    embed = lambda name: Embed(cfg.vocab_size, cfg.d_model, cfg.compute_dtype, cfg.scale_embeddings, name=name)
    if cfg.share_embeddings:
      source_embed = target_embed = embed("shared_embedding")
    else:
      source_embed, target_embed = embed("source_embedding"), embed("target_embedding")
    self.encoder = Encoder(cfg, source_embed, self.mesh)
    self.decoder = Decoder(cfg, target_embed, self.mesh)

  def encode(self, inputs, *, inputs_positions=None, inputs_segmentation=None, deterministic=True):
    """`[B, S]` source ids -> encoder output `[B, S, D]`."""
    return self.encoder(inputs, positions_BxS=inputs_positions, segmentation_BxS=inputs_segmentation,
                        deterministic=deterministic)

  def decode(self, encoded, inputs, targets, *, targets_positions=None, inputs_segmentation=None,
             targets_segmentation=None, deterministic=True, decode=False, return_hidden=False):
    """Logits `[B, T, V]` for `targets` `[B, T]` given `encoded` `[B, S, D]` of source ids `inputs` `[B, S]`.

    With `decode=True` (apply with `mutable=["cache"]`), `targets` is the previous token `[B, 1]`.
    `return_hidden`: see `Decoder`.
    """
    return self.decoder(targets, encoded, positions_BxT=targets_positions, segmentation_BxT=targets_segmentation,
                        encoder_segment_ids_BxS=segments_or_padding(inputs, inputs_segmentation),
                        deterministic=deterministic, decode=decode, return_hidden=return_hidden)

  def __call__(self, inputs, targets, *, inputs_positions=None, targets_positions=None, inputs_segmentation=None,
               targets_segmentation=None, deterministic=True, return_hidden=False):
    """Teacher-forced logits `[B, T, V]` for source `inputs` `[B, S]` and `targets` `[B, T]` (shifted inside);
    `return_hidden`: see `Decoder`."""
    encoded = self.encode(inputs, inputs_positions=inputs_positions, inputs_segmentation=inputs_segmentation,
                          deterministic=deterministic)
    return self.decode(encoded, inputs, targets, targets_positions=targets_positions,
                       inputs_segmentation=inputs_segmentation, targets_segmentation=targets_segmentation,
                       deterministic=deterministic, return_hidden=return_hidden)
