"""Sweep launcher: expansion and names, validation before launch, the local backend for real, the report,
the SLURM script and TPU commands against golden files, dry runs."""

import csv
import json
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from helpers import tiny_overrides
from launch import cli, events, report, runs, sweep
from launch.backends import slurm, tpu_vm

GOLDEN = pathlib.Path(__file__).parent / "golden"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_sweep(path: pathlib.Path, base, points, fixed=None, extra="") -> pathlib.Path:
  """A sweep file at `path` whose get_sweep() returns `points` (a Python expression over `sweep`)."""
  path.write_text(f"from launch import sweep\n\nBASE = {str(base)!r}\nFIXED = {fixed or {}!r}\n{extra}\n\n"
                  f"def get_sweep():\n  return {points}\n")
  return path


def test_axis_product_zip_and_lists():
  attention = sweep.axis("model.attention", ["dot_product", "xla"])
  warmup = sweep.axis("optimizer.warmup_steps", [100, 400])
  assert sweep.product(attention, warmup) == [
      {"model.attention": "dot_product", "optimizer.warmup_steps": 100},
      {"model.attention": "dot_product", "optimizer.warmup_steps": 400},
      {"model.attention": "xla", "optimizer.warmup_steps": 100},
      {"model.attention": "xla", "optimizer.warmup_steps": 400}]
  assert sweep.zip(attention, warmup) == [{"model.attention": "dot_product", "optimizer.warmup_steps": 100},
                                          {"model.attention": "xla", "optimizer.warmup_steps": 400}]
  heads = sweep.axis("model.num_heads", [2, 4])
  assert sweep.product(sweep.zip(attention, warmup), heads)[1] == {
      "model.attention": "dot_product", "optimizer.warmup_steps": 100, "model.num_heads": 4}
  with pytest.raises(sweep.SweepError, match=r"one length, got lengths \[2, 3\]"):
    sweep.zip(attention, sweep.axis("model.num_heads", [1, 2, 4]))
  with pytest.raises(sweep.SweepError, match="'model.attention' is set by two combined axes"):
    sweep.product(attention, attention)
  with pytest.raises(sweep.SweepError, match="axis 'model.norm' has no values"):
    sweep.axis("model.norm", [])


def test_point_names_are_readable_path_safe_and_unique():
  points = sweep.product(sweep.axis("model.attention", ["dot_product", "xla"]),
                         sweep.axis("optimizer.warmup_steps", [100, 400]))
  assert sweep.point_names(points) == [
      "attention=dot_product,warmup_steps=100", "attention=dot_product,warmup_steps=400",
      "attention=xla,warmup_steps=100", "attention=xla,warmup_steps=400"]
  # Keys sharing their last part keep the full dotted name; values are spelled as on the command line.
  assert sweep.point_names([{"data.max_length": 32, "model.max_length": 64, "data.packing": False}]) == [
      "data.max_length=32,model.max_length=64,packing=false"]
  unsafe = sweep.point_names([{"data.path": "/data/my corpus/../x", "model.dropout_rate": 1e-3},
                              {"data.path": "d" * 300}, {"data.path": "d" * 299 + "e"}, {}])
  assert unsafe[0] == "path=_data_my_corpus_.._x,dropout_rate=0.001"
  assert len(unsafe[1]) == sweep.MAX_NAME_LENGTH and unsafe[1] != unsafe[2]  # Cut names end in a hash.
  assert unsafe[3] == "base"
  for name in unsafe:
    assert "/" not in name and " " not in name and name not in (".", "..")


def test_load_names_points_and_builds_commands(repo_root, tmp_path, monkeypatch):
  monkeypatch.chdir(repo_root)
  file = write_sweep(tmp_path / "warm.py", "configs/small.py",
                     'sweep.axis("optimizer.warmup_steps", [100, 400]) + [{"model.norm": "pre"}]',
                     fixed={"train.steps": 10, "optimizer.warmup_steps": 50})
  loaded = sweep.load(file)
  assert loaded.name == "warm" and [p.name for p in loaded.points] == [
      "warmup_steps=100", "warmup_steps=400", "norm=pre"]
  assert [p.name for p in sweep.load(file).points] == [p.name for p in loaded.points]  # Stable.
  assert all(p.steps == 10 for p in loaded.points)
  # FIXED applies where a point has no value of its own; a point's own value wins.
  assert loaded.train_args(loaded.points[2], "runs/warm/norm=pre") == [
      "train", "--config=configs/small.py", "--workdir=runs/warm/norm=pre", "--config.train.steps=10",
      "--config.optimizer.warmup_steps=50", "--config.model.norm=pre"]
  assert loaded.point_args(loaded.points[0]) == ["--config.optimizer.warmup_steps=100"]


@pytest.mark.parametrize("point, message", [
    ({"model.num_head": 4}, "point 1 'num_head=4' {'model.num_head': 4}: unknown config key 'model.num_head'; "
                            "did you mean 'model.num_heads'?"),
    ({"model.num_heads": 3}, "point 1 'num_heads=3' {'model.num_heads': 3}: invalid model config: d_model=256 "
                             "is not divisible by num_heads=3"),
    ({"train.steps": "many"}, "point 1 'steps=many' {'train.steps': 'many'}: config key 'train.steps' is a int"),
])
def test_invalid_points_fail_naming_point_and_key(point, message, repo_root, monkeypatch):
  monkeypatch.chdir(repo_root)
  with pytest.raises(sweep.SweepError) as error:
    sweep.expand("bad", "configs/small.py", [{"model.num_heads": 2}, point])
  assert str(error.value).startswith(f"sweep 'bad': {message}")


def test_duplicate_names_and_missing_base_are_errors(repo_root, monkeypatch):
  monkeypatch.chdir(repo_root)
  with pytest.raises(sweep.SweepError, match="points 0 and 1 are both 'norm=pre'"):
    sweep.expand("dup", "configs/small.py", [{"model.norm": "pre"}, {"model.norm": "pre"}])
  with pytest.raises(sweep.SweepError, match="BASE: config file 'configs/nope.py' does not exist"):
    sweep.expand("nobase", "configs/nope.py", [{"model.norm": "pre"}])
  with pytest.raises(sweep.SweepError, match="non-empty list"):
    sweep.expand("empty", "configs/small.py", [])


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_invalid_sweep_launches_nothing(backend, repo_root, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  file = write_sweep(tmp_path / "typo.py", "configs/small.py",
                     '[{"model.num_heads": 2}, {"optimizer.warmup_step": 10}]')
  root = tmp_path / "runs"
  assert cli.main([f"--sweep={file}", f"--backend={backend}", f"--root={root}"]) == 1  # An invalid point is bad input: exit 1.
  err = capsys.readouterr().err
  assert "point 1 'warmup_step=10'" in err and "did you mean 'optimizer.warmup_steps'?" in err
  assert not root.exists()


def test_backend_flags_and_settings_are_checked(repo_root, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  file = write_sweep(tmp_path / "s.py", "configs/small.py", 'sweep.axis("model.norm", ["pre"])',
                     extra='SLURM = {"gpus": 8}')
  assert cli.main([f"--sweep={file}", "--nodes=2"]) == 2
  assert "--nodes apply to --backend=slurm, not --backend=local" in capsys.readouterr().err
  assert cli.main([f"--sweep={file}", "--backend=slurm", "--dry_run"]) == 1
  assert "unknown SLURM setting(s) ['gpus']; known: nodes, gpus_per_node," in capsys.readouterr().err
  assert cli.main([f"--sweep={file}", "--backend=tpu_vm", "--dry_run", "--zone=z"]) == 1
  assert "needs TPU settings ['name', 'accelerator_type']" in capsys.readouterr().err


def test_run_status(tmp_path):
  workdir = str(tmp_path / "point")
  assert runs.status(workdir, 6) == runs.NOT_STARTED
  assert runs.run_logged([["sh", "-c", "echo training; exit 3"]], workdir) == 3
  assert runs.status(workdir, 6) == runs.FAILED
  assert "training\n=== exit status 3" in (tmp_path / "point" / runs.LOG).read_text()
  os.remove(os.path.join(workdir, runs.EXIT_CODE))
  assert runs.status(workdir, 6) == runs.RUNNING  # A log and no exit status yet.
  assert runs.run_logged([["true"], ["sh", "-c", "exit 1"], ["false-not-reached"]], workdir) == 1
  assert runs.run_logged([["true"]], workdir) == 0
  assert runs.status(workdir, 6) == runs.STOPPED  # Exited cleanly before the last step (SIGTERM).
  (tmp_path / "point" / runs.RESULTS).write_text(json.dumps({"step": 6}))
  assert runs.status(workdir, 6) == runs.DONE and runs.status(workdir, 7) == runs.STOPPED
  # Killed by a signal while the launcher lived: a negative exit status; running.json is gone once it ended.
  assert runs.run_logged([["sh", "-c", "kill -9 $$"]], workdir) == -9
  assert runs.status(workdir, 7) == runs.KILLED and runs.read_running(workdir) is None


def test_event_files_read_without_tensorflow(tmp_path):
  from tensorboardX import SummaryWriter

  for run, values in enumerate(([(1, 5.0), (2, 4.0)], [(2, 3.5), (3, 3.0)])):  # Resuming adds a file.
    writer = SummaryWriter(str(tmp_path), filename_suffix=f".{run}")
    for step, value in values:
      writer.add_scalar("train/loss", value, step)
    writer.close()
  assert events.scalars(str(tmp_path)) == {"train/loss": [(1, 5.0), (2, 3.5), (3, 3.0)]}
  newest = sorted(tmp_path.glob("events.out.tfevents.*"))[-1]
  newest.write_bytes(newest.read_bytes()[:-7])  # A record still being written is ignored.
  assert events.scalars(str(tmp_path)) == {"train/loss": [(1, 5.0), (2, 3.5)]}


@pytest.mark.integration
def test_local_sweep_runs_resumes_skips_and_reports(repo_root, tiny_corpus, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  root = tmp_path / "runs"
  file = write_sweep(tmp_path / "tiny.py", "configs/small.py", 'sweep.axis("model.attention", ["dot_product"])',
                     fixed=tiny_overrides(tiny_corpus, **{"train.steps": 3}))
  assert cli.main([f"--sweep={file}", f"--root={root}"]) == 0
  assert "attention=dot_product: done after" in capsys.readouterr().out
  workdirs = [root / "tiny" / "attention=dot_product", root / "tiny" / "attention=xla"]
  assert json.loads((workdirs[0] / runs.RESULTS).read_text())["step"] == 3

  # More steps: the first point resumes, a second one starts, a third fails without stopping the others.
  attention = 'sweep.axis("model.attention", ["dot_product", "xla"])'
  missing = tmp_path / "missing_corpus"
  write_sweep(file, "configs/small.py", f'{attention} + [{{"model.attention": "xla", "data.path": {str(missing)!r}}}]',
              fixed=tiny_overrides(tiny_corpus))
  assert cli.main([f"--sweep={file}", f"--root={root}", "--parallel=2"]) == 1
  second = capsys.readouterr().out
  failing = sweep.point_names([{"model.attention": "xla", "data.path": str(missing)}])[0]
  assert f"{failing}: FAILED with exit status 1" in second and f"1 of 3 points failed: {failing}" in second
  assert "resumed from step 3" in (workdirs[0] / runs.LOG).read_text()
  results = []
  for workdir, logged_steps in zip(workdirs, ([2, 3, 4, 6], [2, 4, 6])):
    assert (workdir / runs.EXIT_CODE).read_text() == "0\n"
    results.append(json.loads((workdir / runs.RESULTS).read_text()))
    assert results[-1]["step"] == 6
    # The event files of both sessions of a resumed run are read: train loss at every logged step.
    curve = events.scalars(str(workdir / "tensorboard"))["train/loss"]
    assert [step for step, _ in curve] == logged_steps
    assert curve[-1][1] == pytest.approx(results[-1]["train_loss"], rel=1e-6)
  assert str(missing) in (root / "tiny" / failing / runs.LOG).read_text()

  assert report.main([f"--sweep={file}", f"--root={root}"]) == 0
  table = capsys.readouterr().out
  assert table.startswith("| point | model.attention | data.path | status | step | train_loss | eval_loss |")
  assert f"| attention=xla | xla | {tiny_corpus} | done | 6 | {results[1]['train_loss']:.4f} |" in table
  with open(root / "tiny" / "report.csv") as f:
    rows = list(csv.DictReader(f))
  assert [(r["point"], r["status"]) for r in rows] == [
      ("attention=dot_product", "done"), ("attention=xla", "done"), (failing, "failed")]
  for row, result in zip(rows, results):
    for metric in ("step", "train_loss", "eval_loss", "eval_accuracy", "eval_perplexity", "bleu", "tokens_per_second",
                   "step_temp_mib"):
      assert float(row[metric]) == pytest.approx(result[metric]), metric
  assert rows[2]["train_loss"] == "" and rows[2]["data.path"] == str(missing)
  assert table.split("\n\nwrote ")[0] in (root / "tiny" / "report.md").read_text()
  png = (root / "tiny" / "curves.png").read_bytes()
  assert png.startswith(PNG_MAGIC) and len(png) > 20_000
  from matplotlib import image

  assert image.imread(root / "tiny" / "curves.png").shape[:2] == (480, 1300)

  # A rerun skips the finished points (their logs are untouched).
  write_sweep(file, "configs/small.py", attention, fixed=tiny_overrides(tiny_corpus))
  logs = [(w / runs.LOG).read_text() for w in workdirs]
  assert cli.main([f"--sweep={file}", f"--root={root}"]) == 0
  third = capsys.readouterr().out
  assert third.count(", skipped") == 2 and "started" not in third
  assert [(w / runs.LOG).read_text() for w in workdirs] == logs


def test_local_dry_run_prints_commands(repo_root, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  file = write_sweep(tmp_path / "dry.py", "configs/small.py", 'sweep.axis("model.norm", ["post", "pre"])',
                     fixed={"train.steps": 5})
  root = tmp_path / "runs"
  assert cli.main([f"--sweep={file}", f"--root={root}", "--dry_run"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0] == "sweep 'dry': 2 points on configs/small.py, all valid"
  assert out[1] == f"# norm=post (output in {root}/dry/norm=post/launch.log)"
  assert out[2].endswith(f"-m jformer.main train --config=configs/small.py --workdir={root}/dry/norm=post "
                         f"--config.train.steps=5 --config.model.norm=post")
  assert len(out) == 5 and not root.exists()


def golden_sweep(repo_root, monkeypatch) -> sweep.Sweep:
  """Fixed inputs of the golden tests."""
  monkeypatch.chdir(repo_root)
  points = sweep.product(sweep.axis("model.attention", ["dot_product", "xla"]),
                         sweep.axis("optimizer.warmup_steps", [100, 400]))
  return sweep.expand("golden", "configs/small.py", points, fixed={"train.steps": 200, "data.path": "/data/my corpus"})


def test_slurm_script_golden(repo_root, monkeypatch):
  golden = golden_sweep(repo_root, monkeypatch)
  settings = slurm.Settings(nodes=2, gpus_per_node=8, time="04:00:00", partition="gpu", account="nlp",
                            setup="module load cuda/12.4")
  script = slurm.render(golden, "/scratch/runs", settings, python="/opt/jformer/.venv/bin/python",
                        project_dir="/opt/jformer")
  assert script.splitlines() == (GOLDEN / "slurm_sbatch.txt").read_text().splitlines()
  assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0  # Valid bash.
  partial = slurm.render(golden, "/scratch/runs", slurm.Settings(), python="python", project_dir="/p",
                         tasks=[1, 3], parallel=2)
  assert "#SBATCH --array=1,3%2\n" in partial and "--gpus-per-node" not in partial and "--account" not in partial


def test_slurm_dry_run_prints_script_and_submission(repo_root, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  file = write_sweep(tmp_path / "sl.py", "configs/small.py", 'sweep.axis("model.norm", ["post", "pre"])',
                     extra='SLURM = {"nodes": 4, "partition": "big"}')
  root = tmp_path / "runs"
  assert cli.main([f"--sweep={file}", "--backend=slurm", f"--root={root}", "--dry_run", "--nodes=2"]) == 0
  out = capsys.readouterr().out
  script = slurm.render(sweep.load(file), str(root), slurm.Settings(nodes=2, partition="big"),
                        python=sys.executable, project_dir=str(repo_root))
  assert f"# {root}/sl/sl.sbatch\n{script}\n# submitted with:\nsbatch --parsable {root}/sl/sl.sbatch\n" in out
  assert "#SBATCH --nodes=2\n" in out and "#SBATCH --partition=big\n" in out  # Flags win over the file.
  assert not root.exists()


def test_tpu_vm_commands_golden(repo_root, monkeypatch):
  golden = golden_sweep(repo_root, monkeypatch)
  settings = tpu_vm.Settings(name="jf-v4", zone="us-central2-b", accelerator_type="v4-32", project="my-project",
                             repo="https://example.com/jformer.git", ref="0123abc")
  rendered = tpu_vm.render(golden, "runs", settings)
  assert rendered.splitlines() == (GOLDEN / "tpu_vm_commands.txt").read_text().splitlines()
  # Each printed line is exactly the command a run executes.
  expected = [tpu_vm.create_command(settings), tpu_vm.install_command(settings)]
  for point in golden.points:
    expected += [tpu_vm.train_command(golden, point, "runs", settings),
                 tpu_vm.fetch_command(golden, point, "runs", settings)]
  assert [shlex.split(line) for line in rendered.splitlines() if not line.startswith("#")] == expected
  absolute = sweep.expand("abs", str(repo_root / "configs" / "small.py"), [{"model.norm": "pre"}])
  with pytest.raises(sweep.SweepError, match="give a path relative to the project root"):
    tpu_vm.render(absolute, "runs", settings)


def test_example_sweeps_expand(repo_root, monkeypatch):
  import jax

  from jformer import attention, config as config_lib

  monkeypatch.chdir(repo_root)
  post_ln_demo = {"model.norm": "post", "model.normalization": "layernorm", "model.activation": "relu",
                  "model.d_ff": 1024, "model.qk_norm": False, "model.use_bias": True, "optimizer.warmup_steps": 600,
                  "optimizer.grad_clip_norm": 0.0, "train.keep_best": "none"}  # the demo before demo_slow_machine.
  variants = sweep.load("configs/sweeps/attention_variants.py")
  encoder_call = [jax.ShapeDtypeStruct((1, 8, 1, 8), "float32")] * 3
  usable = [name for name in attention.available()
            if "decode" in attention.get(name).supports and attention.get(name).refusal(*encoder_call) is None]
  assert [p.overrides["model.attention"] for p in variants.points] == usable
  assert "splash" not in usable and "stick_breaking" not in usable  # a kernel; causal only (no encoder)
  assert variants.points[0].name == f"attention={usable[0]}"
  assert all(p.steps == 100 for p in variants.points) and variants.fixed["train.bleu_examples"] == 100
  # Each variant with the registry's runnable options; the sweep's own choice of a local window on top.
  assert {p.name: p.overrides for p in variants.points}["attention=local,window_size=16"] == {
      "model.attention": "local", "model.attention_options.window_size": 16}
  assert all(p.overrides == {"model.attention": p.overrides["model.attention"]} for p in variants.points
             if p.overrides["model.attention"] != "local")
  similarity = sweep.load("configs/sweeps/similarity.py")
  assert [p.name for p in similarity.points] == [f"attention={name}" for name in (
      "dot_product", "dot_product_unscaled", "general", "additive", "cosine")]
  assert similarity.base == "configs/small.py" and all(p.steps == 300 for p in similarity.points)
  assert similarity.common_args() == ["--config.train.steps=300", "--config.train.eval_every=100"]
  heads = sweep.load("configs/sweeps/heads_ablation.py")
  assert [p.name for p in heads.points] == [f"num_heads={h},d_model=512" for h in (1, 4, 8, 16, 32)]
  assert heads.base == "configs/transformer_base.py"
  dtypes = sweep.load("configs/sweeps/demo_dtypes.py")  # equal steps, no time budget: only the dtype differs.
  assert [p.name for p in dtypes.points] == ["dtype=float32,seed=0", "dtype=bfloat16,seed=0", "dtype=bfloat16,seed=1"]
  assert dtypes.base == "configs/demo.py"
  assert all(p.steps == 1487 for p in dtypes.points) and dtypes.fixed == {  # the demo's recipe and block then.
      "train.budget_minutes": 0.0, "train.steps": 1487, **post_ln_demo}
  recipe = sweep.load("configs/sweeps/demo_recipe.py")  # the demo's batch and learning rate, chosen on valid loss.
  assert len(recipe.points) == 10 and recipe.fixed["train.budget_minutes"] == 0.0
  assert {(p.overrides["data.batch_size"], p.steps) for p in recipe.points} == {(64, 750), (32, 1400), (16, 2800)}
  chosen = {"data.batch_size": 32, "train.steps": 1400, "optimizer.warmup_steps": 600,
            "optimizer.learning_rate_scale": 1.0, "optimizer.cooldown_fraction": 0.2}
  assert chosen in [p.overrides for p in recipe.points]
  sizes = sweep.load("configs/sweeps/demo_corpus_size.py")  # loads without its corpora (cut by a benchmark script).
  module = config_lib.import_file(repo_root / "configs" / "sweeps" / "demo_corpus_size.py", "sweep", "")
  rows = [module.row_of(p.overrides) for p in sizes.points]
  assert rows[:4] == ["gettext 18k rules", "gettext 18k -vocab", "gettext 18k -dropout", "gettext 18k before"]
  assert len(set(rows)) == len(rows) == 12 and rows[-1] == "help 18k modern"
  assert all(p.steps == 1500 for p in sizes.points) and sizes.fixed["train.budget_minutes"] == 0.0
  assert {k: sizes.fixed[k] for k in post_ln_demo} == post_ln_demo and sizes.points[-1].overrides["model.norm"] == "pre"
  slow = sweep.load("configs/sweeps/demo_slow_machine.py")  # the demo's block and schedule at the slowest steps.
  module = config_lib.import_file(repo_root / "configs" / "sweeps" / "demo_slow_machine.py", "sweep", "")
  assert [module.row_of(p.overrides) for p in slow.points][:2] == ["the demo (post-LN)", "pre-LN"]
  assert all(p.steps == 1350 for p in slow.points) and {k: slow.fixed[k] for k in post_ln_demo} == post_ln_demo
  assert config_lib.load(repo_root / "configs" / "demo.py").model.norm == "pre"  # the pins differ from the demo now.
  averaged = sweep.load("configs/sweeps/demo_averaging.py")  # the same steps, with averaging: comparable rows.
  assert {k: v for k, v in averaged.fixed.items() if not k.startswith("train.average_")} == sizes.fixed
  assert [p.overrides["data.path"] for p in averaged.points] == ["runs/corpora/gettext_all"]


def synthetic_sweep(root: pathlib.Path, name: str, results: dict) -> sweep.Sweep:
  """A sweep over model.positional whose points' workdirs hold `results[point]` as results.json (None: no
  results.json, only a launch.log: a running point)."""
  points = [{"model.positional": positional} for positional in results]
  names = sweep.point_names(points)
  for point_name, point_results in zip(names, results.values()):
    workdir = root / name / point_name
    workdir.mkdir(parents=True)
    if point_results is None:
      (workdir / runs.LOG).write_text("training\n")
    else:
      (workdir / runs.RESULTS).write_text(json.dumps(point_results))
      (workdir / runs.EXIT_CODE).write_text("0\n")
  return sweep.Sweep(name, "configs/lm_demo.py", {}, tuple(
      sweep.Point(point_name, point, 150) for point_name, point in zip(names, points)))


def lm_results(bits_at: dict, **extra) -> dict:
  """The results.json of an LM run (issue 14's keys) with test bits per byte `bits_at` {context: bpb}."""
  return {"step": 150, "train_loss": 4.5, "eval_loss": 4.25, "eval_perplexity": 70.1, "eval_bits_per_byte": 2.3125,
          "xz_bits_per_byte": 2.0914, "test_bits_per_byte": bits_at["256"], "test_bits_per_byte_at": bits_at,
          "tokens_per_second": 5123.4, "step_temp_mib": 81.0, "train_seconds": 120.0, **extra}


def test_report_expands_per_context_results_and_plots_extrapolation(tmp_path, capsys):
  from tensorboardX import SummaryWriter

  root = tmp_path / "runs"
  lm = synthetic_sweep(root, "lm", {
      "sinusoidal": lm_results({"256": 2.5, "1024": 4.125, "512": 3.25}),  # dict order is not context order
      "alibi": lm_results({"256": 2.4375, "512": 2.375, "1024": 2.3125}, tokens_per_second=4000.0),
      "learned": None,  # still running: its latest logged eval scalars
  })
  writer = SummaryWriter(str(root / "lm" / "positional=learned" / "tensorboard"))
  for step, bits in ((50, 3.5), (100, 2.875)):
    writer.add_scalar("train/loss", 5.0 - step / 100, step)
    writer.add_scalar("eval/bits_per_byte", bits, step)
  writer.close()

  table, paths = report.write(lm, str(root))
  lines = table.splitlines()  # No point has BLEU or accuracy: no columns for them.
  assert lines[0] == ("| point | model.positional | status | step | train_loss | eval_loss | eval_perplexity | "
                      "test_bits_per_byte@256 | test_bits_per_byte@512 | test_bits_per_byte@1024 | "
                      "eval_bits_per_byte | xz_bits_per_byte | tokens_per_second | step_temp_mib | train_seconds |")
  assert lines[2] == ("| positional=sinusoidal | sinusoidal | done | 150 | 4.5000 | 4.2500 | 70.10 | 2.500 | 3.250 | "
                      "4.125 | 2.312 | 2.091 | 5,123 | 81.0 | 120 |")
  assert lines[3].startswith("| positional=alibi | alibi | done | 150 |") and "| 2.438 | 2.375 | 2.312 |" in lines[3]
  assert lines[4] == "| positional=learned | learned | running | 100 | 4.0000 |  |  |  |  |  | 2.875 |  |  |  |  |"
  with open(paths["report.csv"]) as f:
    rows = list(csv.DictReader(f))
  assert [float(rows[1][f"test_bits_per_byte@{n}"]) for n in (256, 512, 1024)] == [2.4375, 2.375, 2.3125]
  assert rows[2]["test_bits_per_byte@1024"] == "" and float(rows[2]["eval_bits_per_byte"]) == 2.875
  png = (root / "lm" / "extrapolation.png").read_bytes()
  assert paths["extrapolation.png"] == str(root / "lm" / "extrapolation.png") and png.startswith(PNG_MAGIC)
  from matplotlib import image

  assert image.imread(root / "lm" / "extrapolation.png").shape[:2] == (500, 800)
  assert "![bits per byte against context length](extrapolation.png)" in (root / "lm" / "report.md").read_text()

  # Translation results (no dict-valued metric): BLEU and accuracy columns, no LM columns, no extrapolation plot.
  translation = synthetic_sweep(root, "mt", {"sinusoidal": {"step": 150, "eval_accuracy": 0.5, "bleu": 12.5}})
  table, paths = report.write(translation, str(root))
  assert table.splitlines()[0] == "| point | model.positional | status | step | eval_accuracy | bleu |"
  assert "extrapolation.png" not in paths and not (root / "mt" / "extrapolation.png").exists()


def test_lm_variants_sweep_is_positional_encodings_then_attention_variants(repo_root):
  from jformer import attention, config as config_lib, positional

  module = config_lib.import_file(repo_root / "configs" / "sweeps" / "lm_variants.py", "sweep", "")
  points = module.get_sweep()
  assert sweep.point_names(points) == [
      "positional=sinusoidal", "positional=learned", "positional=rotary", "positional=alibi", "positional=relative",
      "positional=none", "attention=chunked,query_chunk_size=64,key_chunk_size=64", "attention=local,window_size=128",
      "attention=linear"]
  assert set(module.POSITIONAL) <= set(positional.available())
  for point in points[6:]:  # the options are the variants' own
    variant = attention.get(point["model.attention"])
    assert {k.rsplit(".", 1)[1] for k in point if k.startswith("model.attention_")} <= set(variant.options)
  assert module.FIXED["model.positional"] == "sinusoidal" and module.FIXED["train.steps"] == 200


def test_lm_variants_sweep_loads(repo_root, monkeypatch):
  monkeypatch.chdir(repo_root)
  variants = sweep.load("configs/sweeps/lm_variants.py")
  assert len(variants.points) == 9 and all(p.steps == 200 for p in variants.points)
  local = variants.points[7]
  assert variants.point_args(local) == [
      "--config.model.positional=sinusoidal", "--config.model.attention=local",
      "--config.model.attention_options.window_size=128"]
