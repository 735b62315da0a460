"""`forgetting_transformer`: the Forgetting Transformer's forget gate (FoX; Lin et al., ICLR 2025), as a flex variant.

o_i = sum_j softmax_j(q_i . k_j / sqrt(d) + D_ij) v_j with D_ij = sum_{l=j+1}^{i} log f_l and a forget gate
f_t = sigmoid(w_h . x_t + b_h) per head from the layer input x_t (the paper's eq. 4-6). With c_t = sum_{l<=t} log f_l,
a cumulative capture (restarting at each example of a packed row; the model keeps its running sum while decoding),
D_ij = c_i - c_j. Where attention is not
causal (an encoder, cross-attention) it decays both ways, -|c_i - c_j|. b_h starts at 5 (f ~ 0.993: the model starts
close to softmax attention). `--config.imports=tests/plugins/forgetting_transformer.py
--config.model.attention=forgetting_transformer`.
"""

import jax
import jax.numpy as jnp

from jformer.attention import Capture, flex
from jformer.registry import Param, constant

PARAMS = {"forget_weight": Param(("d_model", "heads"), jax.nn.initializers.lecun_normal()),
          "forget_bias": Param(("heads",), constant(5.0))}


def log_forget_gate(x_BxLxD, params):
  """log f_t = log sigmoid(w_h . x_t + b_h), `[B, L, H]`."""
  return jax.nn.log_sigmoid(x_BxLxD.astype(jnp.float32) @ params["forget_weight"] + params["forget_bias"])


def forget(score, b, h, q_idx, kv_idx, *, q, kv):
  """FoX: the logits plus the sum of log forget gates between key and query, -|c_i - c_j|."""
  return score - jnp.abs(q["log_forget"] - kv["log_forget"])


flex.register("forgetting_transformer", score_mod=forget, params=PARAMS,
              captures={"log_forget": Capture(log_forget_gate, cumulative=True)})
