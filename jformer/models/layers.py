"""Flax Linen layers of the Transformer: embeddings, positions, multi-head attention, feed-forward, norms, residual.

Shapes: B batch, L (or T/S) length, D d_model, H heads, G key/value heads, K head_dim, F d_ff, V vocab.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jformer import axes
from jformer.models import attention_cache, captures, norms, plugin_params
from jformer.models.config import TransformerConfig
from jformer.ops import dropout as dropout_op
from jformer.ops import matmul
from jformer.ops.masks import segment_positions

# Moved to jformer.models.attention_cache (the decode caches); these names stay for code written against them.
CROSS_KEY, CROSS_VALUE, heads_major = attention_cache.CROSS_KEY, attention_cache.CROSS_VALUE, attention_cache.heads_major


def logical(init, *axes):
  """`init` for a parameter whose dimensions carry logical axis names (`jformer.axes`; mapped to mesh axes by
  `axes.RULES`)."""
  return nn.with_logical_partitioning(init, axes)


def norm(cfg: TransformerConfig, name: str) -> nn.Module:
  """The `model.normalization` norm (`jformer.models.norms`; default LayerNorm: parameters `scale`, `bias`), with a
  bias when `model.use_bias`, its epsilon `model.norm_epsilon` (given to a norm that takes one), named `name`."""
  epsilon = {"epsilon": cfg.norm_epsilon} if norms.takes_epsilon(cfg.normalization) else {}
  return cfg.make_norm(use_bias=cfg.use_bias, name=name, **epsilon)


class Embed(nn.Module):
  """Token embedding scaled by sqrt(d_model) (paper Sec. 3.4; unscaled when not `scale`: `model.scale_embeddings`);
  `attend` is the tied pre-softmax projection."""
  vocab_size: int
  d_model: int
  dtype: jnp.dtype = jnp.float32
  scale: bool = True

  def setup(self):
    # std d^-1/2, so that embedding * sqrt(d) has unit scale and tied logits y . E^T have unit scale.
    self.embedding = self.param("embedding", logical(nn.initializers.normal(stddev=self.d_model**-0.5), axes.VOCAB, axes.EMBED),
                                (self.vocab_size, self.d_model), jnp.float32)

  def __call__(self, ids_BxL: jax.Array) -> jax.Array:
    """`[B, L]` int ids -> `[B, L, D]`."""
    x_BxLxD = jnp.take(self.embedding, ids_BxL, axis=0).astype(self.dtype)
    return x_BxLxD * jnp.sqrt(self.d_model).astype(self.dtype) if self.scale else x_BxLxD

  def attend(self, y_BxLxD: jax.Array) -> jax.Array:
    """`[B, L, D]` -> float32 logits `[B, L, V]` = y E^T (weights shared with the embedding)."""
    return jnp.einsum("bld,vd->blv", y_BxLxD.astype(self.dtype), self.embedding.astype(self.dtype),
                      preferred_element_type=jnp.float32)


class AddPositions(nn.Module):
  """Adds the position embeddings of an encoding that acts on embeddings (`acts == "embedding"`: sinusoidal,
  paper Sec. 3.5; learned); identity for the others (they act inside attention, or not at all). Holds the
  encoding's parameters (e.g. the learned table, `position_embedding`).

  In decode mode the position is the step counter kept in the 'cache' collection.
  """
  config: TransformerConfig

  @nn.compact
  def __call__(self, x_BxLxD: jax.Array, positions_BxL: jax.Array | None = None, *, decode: bool = False):
    cfg = self.config
    encoding = cfg.positional_encoding
    if encoding.acts != "embedding":
      return x_BxLxD
    length = x_BxLxD.shape[1]
    if length > cfg.max_length:
      raise ValueError(f"sequence length {length} exceeds model.max_length={cfg.max_length}; raise "
                       "model.max_length or truncate the input")
    if decode:
      positions_BxL = decode_step_positions(self, x_BxLxD.shape[0], length)
    elif positions_BxL is None:
      positions_BxL = jnp.arange(length)[None, :]
    embedding_BxLxD = encoding.fn(positions_BxL, **positional_arguments(self, cfg))
    return x_BxLxD + embedding_BxLxD.astype(x_BxLxD.dtype)


def positional_arguments(module: nn.Module, cfg: TransformerConfig) -> dict:
  """The keyword arguments of the `config.positional` encoding's function: `dims`, `params` (its declared
  parameters, created in `module`) and its options from `model.positional_options`."""
  encoding = cfg.positional_encoding
  options = dict(cfg.positional_options)
  params = plugin_params.create(module, encoding.params, {**cfg.dims, **encoding.with_defaults(options)})
  return dict(dims=cfg.dims, params=params, **options)


def decode_step_positions(module: nn.Module, batch: int, length: int) -> jax.Array:
  """Positions `[B, L]` of the tokens fed at this decode step, advancing a step counter in 'cache'.

  Called during `init` (the cache being shaped) it returns `arange(L)` and leaves the counter at 0.
  """
  initialized = module.has_variable("cache", "position")
  counter = module.variable("cache", "position", lambda: jnp.zeros((), jnp.int32))
  if not initialized:
    return jnp.broadcast_to(jnp.arange(length), (batch, length))
  start = counter.value
  counter.value = start + length
  return jnp.broadcast_to(start + jnp.arange(length), (batch, length))


class AttentionBias(nn.Module):
  """The bias an encoding that acts on logits (`acts == "bias"`: alibi, relative) adds to self-attention logits.

  One instance per stack is shared by the self-attention of all its layers, as in T5; it holds the encoding's
  parameters (e.g. T5's `relative_embedding` table). `causal`: the decoder's (causal) self-attention.
  """
  config: TransformerConfig
  causal: bool

  @nn.compact
  def __call__(self, q_positions_BxT: jax.Array, kv_positions_BxS: jax.Array) -> jax.Array:
    """Query and key positions `[B, T]`, `[B, S]` -> logits bias `[B or 1, H, T, S]` float32."""
    cfg = self.config
    return cfg.positional_encoding.fn(q_positions_BxT, kv_positions_BxS, causal=self.causal,
                                             **positional_arguments(self, cfg))


class Dense(nn.Module):
  """x W + b over x's trailing axes `in_shape` -> `out_shape`: `kernel` `[*in_shape, *out_shape]` and `bias`
  `[*out_shape]` (`nn.Dense`/`nn.DenseGeneral`'s names, shapes and initial values: Xavier-uniform over the flattened
  fans, zeros). The products run in `dtype` with float32 accumulation (`jformer.ops.matmul`), the bias added by
  `matmul.add_bias`. `project` runs several of one input as one matmul."""
  in_shape: tuple[int, ...]
  out_shape: tuple[int, ...]
  axes: tuple[str, ...]  # logical axis names of the kernel's dimensions; the bias takes the output ones.
  dtype: Any = jnp.float32
  use_bias: bool = True

  def setup(self):
    fans_in = tuple(range(len(self.in_shape)))
    init = nn.initializers.xavier_uniform(in_axis=fans_in, out_axis=tuple(range(len(fans_in), len(self.axes))))
    self.kernel = self.param("kernel", logical(init, *self.axes), (*self.in_shape, *self.out_shape), jnp.float32)
    self.bias = self.param("bias", logical(nn.initializers.zeros, *self.axes[len(fans_in):]), self.out_shape,
                           jnp.float32) if self.use_bias else None

  def __call__(self, x: jax.Array) -> jax.Array:
    """`[..., *in_shape]` -> `[..., *out_shape]` in `dtype`."""
    return project(x, (self,), self.dtype)[0]


def project(x: jax.Array, denses: tuple[Dense, ...], dtype) -> list[jax.Array]:
  """`[x W_i + b_i for each Dense]` in `dtype`, as one matmul of x by the kernels stacked after their input axes
  (the `Dense`s must have the same shapes): Q, K and V of self-attention read x once, in one large product
  instead of three small ones (fewer, larger ops: faster on CPU, and while decoding)."""
  inputs = len(denses[0].in_shape)
  kernel = jnp.stack([dense.kernel for dense in denses], axis=inputs).astype(dtype)
  contract = tuple(range(x.ndim - inputs, x.ndim))
  y = matmul.dot_general(x.astype(dtype), kernel, ((contract, tuple(range(inputs))), ((), ())))
  parts = [jax.lax.index_in_dim(y, i, x.ndim - inputs, keepdims=False) for i in range(len(denses))]
  return [part if dense.bias is None else matmul.add_bias(part, dense.bias.astype(dtype))
          for dense, part in zip(denses, parts)]


class _Heads(NamedTuple):
  """The heads attention reads: queries `[B, T, H, K]`, keys and values `[B, S, G, K]`."""
  query: jax.Array
  key: jax.Array
  value: jax.Array


class _Tokens(NamedTuple):
  """Where the queries' and the keys' tokens sit: segment ids `[B, T]`, `[B, S]` (0: padding; None: one example a
  row) and positions (None: the index)."""
  q_segment_ids: jax.Array | None
  kv_segment_ids: jax.Array | None
  q_positions: jax.Array | None
  kv_positions: jax.Array | None


class MultiHeadAttention(nn.Module):
  """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (eq. 4-5).

  The attention itself is the registry function named by `config.attention`; a call projects the heads
  (`_project`), gives them positions (`_positions`, `_rotate`), keeps or reads the decode state (`_decode_cache`),
  attends (`_arguments`, `_attend`) and projects the output (`out`). With `decode=True`, self-attention keeps what
  its variant declares (`jformer.attention.decode_state`): by default it appends its keys/values to a cache of the
  length the module was initialised with, and queries attend to the filled part; a window variant keeps the last W
  keys/values only, a recurrent one its own fixed-size state.

  Grouped-query attention (Ainslie et al. 2023): keys and values are projected to G = `config.kv_heads`
  heads (G = 1: multi-query, Shazeer 2019), query head h using key/value head h // (H / G); the cache holds
  G heads, and the variant gets them as they are (the registry repeats them for a variant that needs
  H). `rotary`: the `config.positional` encoding (it acts "rotary"; its parameters, if any, live here) rotates
  queries and keys. `position_bias` (an `AttentionBias`) adds a positional bias to the logits. A variant that
  learns parameters (additive, general, cosine, ...) gets them created here, under a scope named after it, from
  what it declares. `mesh` (a `jformer.axes.Placement`, None on one device) reaches the variant as `mesh=`: the
  library kernels run on each device's share of the batch and heads. `model.head_dim` sets K apart from d_model / H.

  Attention transfer: given a `teacher` (the model's config, whose attention this layer's kind replaces) and the
  'transfer' collection mutable, the layer also runs the teacher's attention on the same queries, keys and values,
  sows its output's squared error against the teacher's (`transfer_output`) and returns the teacher's output.
  """
  config: TransformerConfig
  causal: bool = False
  rotary: bool = False
  position_bias: nn.Module | None = None
  mesh: axes.Placement | None = None
  teacher: TransformerConfig | None = None  # attention transfer: the model's own attention, which this one replaces.

  @nn.compact
  def __call__(self, inputs_q_BxTxD, inputs_kv_BxSxD=None, *, q_segment_ids=None, kv_segment_ids=None,
               q_positions=None, kv_positions=None, deterministic: bool = True, decode: bool = False):
    """Queries' inputs `[B, T, D]` attending to keys' and values' inputs `[B, S, D]` (None: to themselves) ->
    `[B, T, D]`."""
    cfg, cross = self.config, inputs_kv_BxSxD is not None
    heads = self._project(inputs_q_BxTxD, inputs_kv_BxSxD, decode)
    tokens = self._positions(_Tokens(q_segment_ids, kv_segment_ids, q_positions, kv_positions), heads, cross=cross,
                             decode=decode)
    heads = self._rotate(heads, tokens)
    state = cfg.attention_variant.decode_state if decode and not cross else None
    out = Dense((cfg.num_heads, cfg.head_width), (cfg.d_model,), (axes.HEADS, axes.HEAD_DIM, axes.EMBED),
                cfg.compute_dtype, cfg.use_bias, name="out")
    if state is not None and state.kind == "recurrent":  # the variant's own state replaces keys and values.
      return out(attention_cache.recurrent(self, state, *heads, dict(cfg.attention_options), self._arguments(
          tokens, inputs_q_BxTxD, None, decode=decode, state=state)))
    heads, tokens = self._decode_cache(state, heads, tokens)
    arguments = self._arguments(tokens, inputs_q_BxTxD, inputs_kv_BxSxD, decode=decode, state=state)
    out_BxTxHxK = self._attend(heads, arguments, deterministic)
    if self.teacher is not None and self.is_mutable_collection(TRANSFER) and not self.is_initializing():
      own = {name: value for name, value in arguments.items() if name not in ("params", "captures")}  # the student's.
      teacher_BxTxHxK = self.teacher.attention_variant.fn(*heads, **own, **dict(self.teacher.attention_options),
                                                          dropout_rate=0.0, dropout_rng=None, mesh=self.mesh)
      return transfer_output(self, out(out_BxTxHxK), out(teacher_BxTxHxK), q_segment_ids)
    return out(out_BxTxHxK)

  def _project(self, inputs_q_BxTxD, inputs_kv_BxSxD, decode: bool) -> _Heads:
    """The `query`, `key` and `value` projections of the inputs: in self-attention Q, K and V as one matmul
    (`project`; K and V as one with grouped-query attention, and in encoder-decoder attention). Encoder-decoder
    attention while decoding reads its keys and values from the cache (`attention_cache.cross`).

    `model.use_bias` False drops the query, value and output biases (`model.qkv_bias` keeps the query's and value's
    and adds the key's); `model.qk_norm` normalizes each query and key head over head_dim (`query_norm`,
    `key_norm`: the `model.normalization` norm, one scale of head_dim shared by the heads; Dehghani et al. 2023)
    before rotary positions, so the cache holds normalized keys."""
    cfg = self.config
    heads = lambda n, axis, name, use_bias=cfg.use_bias or cfg.qkv_bias: Dense(
        (cfg.d_model,), (n, cfg.head_width), (axes.EMBED, axis, axes.HEAD_DIM), cfg.compute_dtype, use_bias,
        name=name)
    query = heads(cfg.num_heads, axes.HEADS, "query")
    # A key bias only with model.qkv_bias: q.(k + b) shifts every logit of a query equally, which softmax ignores
    # (its gradient is 0), unless rotary positions rotate b with the key.
    key = heads(cfg.kv_heads, axes.KV_HEADS, "key", use_bias=cfg.qkv_bias)
    value = heads(cfg.kv_heads, axes.KV_HEADS, "value")
    if inputs_kv_BxSxD is None and cfg.kv_heads == cfg.num_heads:  # self-attention: Q, K and V in one matmul.
      query_BxTxHxK, *key_value = project(inputs_q_BxTxD, (query, key, value), cfg.compute_dtype)
      projected_kv = lambda: key_value
    else:
      query_BxTxHxK, = project(inputs_q_BxTxD, (query,), cfg.compute_dtype)
      kv_source = inputs_q_BxTxD if inputs_kv_BxSxD is None else inputs_kv_BxSxD
      projected_kv = lambda: project(kv_source, (key, value), cfg.compute_dtype)
    project_kv = projected_kv
    if cfg.qk_norm:
      query_norm, key_norm = norm(cfg, "query_norm"), norm(cfg, "key_norm")
      query_BxTxHxK = query_norm(query_BxTxHxK).astype(cfg.compute_dtype)

      def project_kv():
        key_BxSxGxK, value_BxSxGxK = projected_kv()
        return key_norm(key_BxSxGxK).astype(cfg.compute_dtype), value_BxSxGxK
    if decode and inputs_kv_BxSxD is not None:
      return _Heads(query_BxTxHxK, *attention_cache.cross(self, project_kv))
    return _Heads(query_BxTxHxK, *project_kv())

  def _positions(self, tokens: _Tokens, heads: _Heads, *, cross: bool, decode: bool) -> _Tokens:
    """`tokens` with the positions `[B, T]`, `[B, S]` the call needs: a decode step's queries' (the step counter),
    in self-attention or for a variant that reads positions; each token's in its own example in encoder-decoder
    attention for such a variant; the index where rotary or bias positions need them and none were given."""
    reads_positions = self.config.attention_variant.reads_positions
    if decode and (not cross or reads_positions):
      tokens = tokens._replace(q_positions=decode_step_positions(self, *heads.query.shape[:2]))
    elif cross and reads_positions:
      q_positions, kv_positions = (None if ids is None else segment_positions(ids)
                                   for ids in (tokens.q_segment_ids, tokens.kv_segment_ids))
      tokens = tokens._replace(q_positions=q_positions, kv_positions=kv_positions)
    if self.rotary or self.position_bias is not None:
      index = lambda positions, x_BxLxHxK: jnp.arange(x_BxLxHxK.shape[1])[None, :] if positions is None else positions
      q_positions = index(tokens.q_positions, heads.query)
      tokens = tokens._replace(q_positions=q_positions,
                               kv_positions=index(tokens.kv_positions, heads.key) if cross else q_positions)
    return tokens

  def _rotate(self, heads: _Heads, tokens: _Tokens) -> _Heads:
    """Queries and keys rotated by their positions (`rotary`); queries then scaled by sqrt(K / s) where
    `model.attention_scale_dim` = s, so a variant's logits q.k / sqrt(K) are q.k / sqrt(s) (Gemma 2's
    query_pre_attn_scalar; Gemma Team 2024)."""
    cfg, query_BxTxHxK, key_BxSxGxK = self.config, heads.query, heads.key
    if self.rotary:
      rotate = functools.partial(cfg.positional_encoding.fn, **positional_arguments(self, cfg))
      query_BxTxHxK, key_BxSxGxK = rotate(query_BxTxHxK, tokens.q_positions), rotate(key_BxSxGxK, tokens.kv_positions)
    if cfg.attention_scale_dim:
      query_BxTxHxK = query_BxTxHxK * jnp.asarray((cfg.head_width / cfg.attention_scale_dim) ** 0.5,
                                                  query_BxTxHxK.dtype)
    return heads._replace(query=query_BxTxHxK, key=key_BxSxGxK)

  def _decode_cache(self, state, heads: _Heads, tokens: _Tokens) -> tuple[_Heads, _Tokens]:
    """Self-attention while decoding (`state`: the variant's decode state, None otherwise): the keys and values
    `[B, S, G, K]` the new queries attend to, with their positions, from the window or the whole cache, which
    keep this step's; `heads` and `tokens` as they are otherwise."""
    if state is None:
      return heads, tokens
    if state.kind == "window":
      window = state.window_size(dict(self.config.attention_options), self.config.attention_variant.options)
      key, value, kv_positions = attention_cache.window(self, heads.key, heads.value, tokens.q_positions, window)
    else:
      key, value, kv_positions = attention_cache.full(self, heads.key, heads.value, tokens.q_positions)
    return heads._replace(key=key, value=value), tokens._replace(kv_positions=kv_positions)

  def _arguments(self, tokens: _Tokens, inputs_q_BxTxD, inputs_kv_BxSxD, *, decode: bool, state) -> dict:
    """The variant's keyword arguments besides options and dropout: masking, `logits_softcap`
    (`model.attention_logit_softcap`), its declared `params` and its `captures` of the inputs
    (`jformer.models.captures`).

    Positions reach the masking only where the index does not imply them: decode steps (slot order is not position
    order) and calls without segment ids. Self-attention with segment ids (training, evaluation, packed or not) is
    masked by index: packed positions count up by one with the index inside each example (`jformer.data` packing),
    so causal or windowed masking by index equals masking by position there, and the segment ids hide the other
    examples' keys. Rotary and bias encodings still get the positions. So the library kernels, which mask by index
    only, take packed causal training. A variant that reads absolute positions (`reads_positions`: a flex
    variant's functions) gets them there too."""
    cfg, variant = self.config, self.config.attention_variant
    bias = None if self.position_bias is None else self.position_bias(tokens.q_positions, tokens.kv_positions)
    if inputs_kv_BxSxD is None and not decode and tokens.q_segment_ids is not None and not variant.reads_positions:
      tokens = tokens._replace(q_positions=None, kv_positions=None)
    arguments = dict(causal=self.causal, **tokens._asdict(), bias=bias)
    if cfg.attention_logit_softcap > 0:
      arguments["logits_softcap"] = cfg.attention_logit_softcap
    if variant.params:
      arguments["params"] = plugin_params.DeclaredParams(variant.params, cfg.attention_param_dims, name=variant.name)()
    if variant.captures:
      arguments["captures"] = captures.compute(self, variant, dict(cfg.attention_options), arguments, inputs_q_BxTxD,
                                               inputs_kv_BxSxD, decode=decode, state=state)
    return arguments

  def _attend(self, heads: _Heads, arguments: dict, deterministic: bool) -> jax.Array:
    """The variant on the heads -> `[B, T, H, K]`, with `model.attention_dropout_rate` unless `deterministic`. When
    the 'intermediates' collection is mutable (`apply(..., mutable=["intermediates"])`), sows the attention weights
    `[B, H, T, S]` it applies (its `weights` function) as 'attention_weights'; nothing for a variant without one."""
    cfg, variant, options = self.config, self.config.attention_variant, dict(self.config.attention_options)
    dropout_rate = 0.0 if deterministic else cfg.attention_dropout_rate
    dropout_rng = self.make_rng("dropout") if dropout_rate > 0 else None
    out_BxTxHxK = variant.fn(*heads, **arguments, **options, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
                             mesh=self.mesh)
    if self.is_mutable_collection("intermediates") and not self.is_initializing() and variant.weights:
      self.sow("intermediates", "attention_weights", variant.weights(heads.query, heads.key, **arguments, **options))
    return out_BxTxHxK


# The collection attention transfer (`train.attention_transfer`) sows into: with it mutable, a layer whose attention
# replaces the model's (`MultiHeadAttention.teacher`) computes both and passes the teacher's output on.
TRANSFER = "transfer"


def transfer_output(module: nn.Module, student_BxTxD: jax.Array, teacher_BxTxD: jax.Array, segment_ids_BxT):
  """Sows the squared error of the layer's output against the teacher's, summed over the real tokens (segment id
  != 0) and features, with the count of those tokens x features ('squared_error', 'count'), and returns the
  teacher's output: each layer learns from the teacher's inputs (LoLCATs' layer-wise attention transfer)."""
  teacher_BxTxD = jax.lax.stop_gradient(teacher_BxTxD)
  real_BxT = jnp.ones(student_BxTxD.shape[:2]) if segment_ids_BxT is None else (segment_ids_BxT != 0)
  error = jnp.square(student_BxTxD.astype(jnp.float32) - teacher_BxTxD.astype(jnp.float32))
  module.sow(TRANSFER, "squared_error", jnp.sum(error * real_BxT[..., None]))
  module.sow(TRANSFER, "count", jnp.sum(real_BxT) * student_BxTxD.shape[-1])
  return teacher_BxTxD


class FeedForward(nn.Module):
  """FFN(x) = act(x W1 + b1) W2 + b2, act = max(0, x) (paper eq. 2) or another `model.activation`
  (`jformer.models.activations`); parameters `wi`, `wo`. A gated activation (SwiGLU, GEGLU; Shazeer 2020):
  FFN(x) = (act(x W0 + b0) * (x W1 + b1)) W2 + b2, parameters `wi_0`, `wi_1` (one matmul), `wo`: 3 d_model d_ff
  weights instead of 2, so d_ff = 2/3 of the plain width keeps the count. No biases when not `model.use_bias`."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
    cfg = self.config
    activation = cfg.activation_fn
    inner = lambda name: Dense((cfg.d_model,), (cfg.d_ff,), (axes.EMBED, axes.MLP), cfg.compute_dtype, cfg.use_bias,
                               name=name)
    if activation.gated:
      gate_BxLxF, up_BxLxF = project(x_BxLxD, (inner("wi_0"), inner("wi_1")), cfg.compute_dtype)
      h_BxLxF = activation.fn(gate_BxLxF) * up_BxLxF
    else:
      h_BxLxF = activation.fn(inner("wi")(x_BxLxD))
    return Dense((cfg.d_ff,), (cfg.d_model,), (axes.MLP, axes.EMBED), cfg.compute_dtype, cfg.use_bias,
                 name="wo")(h_BxLxF)


class Dropout(nn.Module):
  """`nn.Dropout`'s interface, computed by `jformer.ops.dropout` (a hashed 32-bit draw per element, fused into the mask)."""
  rate: float

  @nn.compact
  def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
    if deterministic or self.rate == 0:
      return x
    return dropout_op.dropout(x, self.rate, self.make_rng("dropout"))


def residual(x_BxLxD, sublayer, *, norm: nn.Module, dropout: nn.Module, pre_norm: bool, deterministic: bool,
             post_norm: nn.Module | None = None):
  """Post-LN: LayerNorm(x + Dropout(Sublayer(x))) (paper Sec. 3.1, 5.4); pre-LN: x + Dropout(Sublayer(LN(x)));
  pre-LN with a `post_norm` (`model.post_norm`; Gemma Team 2024, Gemma 2): x + Dropout(LN_post(Sublayer(LN(x)))).

  The result has x's dtype (the model's compute dtype: the embeddings'): the residual stream stays in it from
  layer to layer (a scanned stack needs that of its carry), the norm computing its statistics in float32 inside
  the one fused op."""
  if pre_norm:
    y_BxLxD = sublayer(norm(x_BxLxD))
    if post_norm is not None:
      y_BxLxD = post_norm(y_BxLxD).astype(x_BxLxD.dtype)
    return x_BxLxD + dropout(y_BxLxD, deterministic=deterministic)
  return norm(x_BxLxD + dropout(sublayer(x_BxLxD), deterministic=deterministic)).astype(x_BxLxD.dtype)
