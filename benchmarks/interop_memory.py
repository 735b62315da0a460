"""Peak memory of `jformer import-hf` and `export-hf` against the size of the checkpoint (issue 53: a model of many
gigabytes converts within about its own size, one tensor or one shard at a time).

A synthetic Llama-shaped checkpoint of about 2 GB (bfloat16; d_model 2048, 16 heads, 4 key/value heads, d_ff 5632,
20 layers, vocabulary 32,000, untied output: 1.03 B parameters) is written in shards of 500 MB with their
`model.safetensors.index.json`, random weights generated one tensor at a time (so the generator holds one shard at
most), beside the llama fixture's tokenizer.json. Then, each in its own process (`ru_maxrss` gives that process's
peak resident set, file pages it mapped included; see `LAUNCHER`):

- `jformer import-hf` of it (the parameters kept bfloat16);
- `jformer export-hf` of the imported run, in shards of the same size;
- the same two commands on the tiny llama fixture (tests/golden/hf/llama, 74 KB): what a process of jformer holds
  whatever the model (Python, JAX, Orbax), subtracted from the peaks above.

The target: peak minus that baseline at most the model's own size plus one shard. Not a timing: the seconds are
there to say how long it took, on a machine shared with other work. The checkpoint, the run and the export are
written under a temporary folder (--scratch) and deleted afterwards.

    python benchmarks/interop_memory.py [--layers=20] [--max_shard_size=500MB] [--json=...]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import common

FIXTURE = common.REPO / "tests" / "golden" / "hf" / "llama"
D_MODEL, HEADS, KV_HEADS, D_FF, VOCAB = 2048, 16, 4, 5632, 32000
JFORMER = [sys.executable, "-c", "from jformer import main; main.main()"]
# A child's ru_maxrss starts from its parent's resident set at the fork (Linux keeps it across exec), so each command
# is started by this small launcher, whose own few megabytes are all a measured process inherits; it prints the
# command's peak in bytes.
LAUNCHER = [sys.executable, "-S", "-c", "import resource, subprocess, sys; status = subprocess.call(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024); sys.exit(status)"]


def llama_config(layers: int) -> dict:
  """config.json of the synthetic model."""
  return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D_MODEL,
          "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "intermediate_size": D_FF,
          "num_hidden_layers": layers, "vocab_size": VOCAB, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
          "tie_word_embeddings": False, "torch_dtype": "bfloat16", "dtype": "bfloat16"}


def tensors(layers: int, seed: int = 0):
  """(name, bfloat16 array) of the synthetic model, each generated when taken."""
  import ml_dtypes
  import numpy as np

  rng = np.random.default_rng(seed)
  head_dim = D_MODEL // HEADS

  def weight(*shape):
    return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(ml_dtypes.bfloat16)

  yield "model.embed_tokens.weight", weight(VOCAB, D_MODEL)
  for i in range(layers):
    layer = f"model.layers.{i}"
    yield f"{layer}.input_layernorm.weight", weight(D_MODEL)
    yield f"{layer}.self_attn.q_proj.weight", weight(HEADS * head_dim, D_MODEL)
    yield f"{layer}.self_attn.k_proj.weight", weight(KV_HEADS * head_dim, D_MODEL)
    yield f"{layer}.self_attn.v_proj.weight", weight(KV_HEADS * head_dim, D_MODEL)
    yield f"{layer}.self_attn.o_proj.weight", weight(D_MODEL, HEADS * head_dim)
    yield f"{layer}.post_attention_layernorm.weight", weight(D_MODEL)
    yield f"{layer}.mlp.gate_proj.weight", weight(D_FF, D_MODEL)
    yield f"{layer}.mlp.up_proj.weight", weight(D_FF, D_MODEL)
    yield f"{layer}.mlp.down_proj.weight", weight(D_MODEL, D_FF)
  yield "model.norm.weight", weight(D_MODEL)
  yield "lm_head.weight", weight(VOCAB, D_MODEL)


def write_checkpoint(folder: pathlib.Path, layers: int, max_shard_size: str) -> list[str]:
  """The synthetic model's folder: config.json, the fixture's tokenizer.json, the shards and their index."""
  from jformer.interop import safetensors_io

  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps(llama_config(layers), indent=2))
  shutil.copy(FIXTURE / "tokenizer.json", folder / "tokenizer.json")
  return safetensors_io.write_folder(folder, tensors(layers), max_shard_size, metadata={"format": "pt"})


def weights(folder: pathlib.Path) -> tuple[int, int]:
  """(bytes of all the folder's .safetensors files, bytes of the largest)."""
  sizes = [file.stat().st_size for file in folder.glob("*.safetensors")]
  return sum(sizes), max(sizes)


def peak_rss(arguments: list[str]) -> tuple[int, float]:
  """(peak resident bytes, seconds) of `jformer ARGUMENTS` run in a process of its own (`LAUNCHER`)."""
  start = time.perf_counter()
  done = subprocess.run(LAUNCHER + JFORMER + arguments, cwd=common.REPO, stdout=subprocess.PIPE, text=True)
  if done.returncode:
    raise SystemExit(f"jformer {' '.join(arguments)} failed (exit status {done.returncode})")
  *said, peak = done.stdout.splitlines()
  print("\n".join(said), flush=True)
  return int(peak), time.perf_counter() - start  # Linux reports kilobytes: the launcher multiplied.


def measure(scratch: pathlib.Path, layers: int, max_shard_size: str) -> dict:
  """The JSON's rows: the import and the export of the synthetic model, and of the fixture (the baseline)."""
  source = scratch / "synthetic"
  start = time.perf_counter()
  files = write_checkpoint(source, layers, max_shard_size)
  print(f"wrote {len(files) - 1} shards in {time.perf_counter() - start:.0f} s", flush=True)
  size, shard = weights(source)
  rows = []
  for name, folder in (("fixture (baseline)", FIXTURE), ("synthetic", source)):
    run, out = scratch / f"run_{len(rows)}", scratch / f"out_{len(rows)}"
    imported, import_s = peak_rss(["import-hf", str(folder), f"--workdir={run}"])
    exported, export_s = peak_rss(["export-hf", f"--workdir={run}", str(out), f"--max_shard_size={max_shard_size}"])
    written, written_shard = weights(out)
    rows.append({"checkpoint": name, "weights_bytes": weights(folder)[0], "import_peak_bytes": imported,
                 "import_seconds": import_s, "export_peak_bytes": exported, "export_seconds": export_s,
                 "exported_bytes": written, "exported_files": sorted(p.name for p in out.iterdir())})
    print(json.dumps(rows[-1]), flush=True)
  baseline, synthetic = rows
  return {"layers": layers, "parameters": size // 2, "max_shard_size": max_shard_size, "checkpoint_bytes": size,
          "largest_shard_bytes": shard, "shards": len(files) - 1,
          "target_bytes": size + shard, "rows": rows,
          "import_above_baseline_bytes": synthetic["import_peak_bytes"] - baseline["import_peak_bytes"],
          "export_above_baseline_bytes": synthetic["export_peak_bytes"] - baseline["export_peak_bytes"]}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--layers", type=int, default=20, help="decoder layers (20: about 2 GB in bfloat16)")
  parser.add_argument("--max_shard_size", default="500MB", help="the shards' size, written and exported")
  parser.add_argument("--scratch", default=None, help="where the checkpoint, run and export go (deleted after)")
  parser.add_argument("--json", default=str(common.REPO / "benchmarks" / "results" / "interop_memory.json"))
  args = parser.parse_args(argv)
  info = common.announce(argv)
  scratch = pathlib.Path(tempfile.mkdtemp(prefix="interop_memory_", dir=args.scratch))
  try:
    results = measure(scratch, args.layers, args.max_shard_size)
  finally:
    shutil.rmtree(scratch)
  results = {"benchmark": "interop_memory", "machine": info, **results}
  gib = 2**30
  print(f"import: {results['import_above_baseline_bytes'] / gib:.2f} GiB above the baseline, export: "
        f"{results['export_above_baseline_bytes'] / gib:.2f} GiB, target (model + one shard): "
        f"{results['target_bytes'] / gib:.2f} GiB")
  common.write_json(args.json, results)


if __name__ == "__main__":
  main()
