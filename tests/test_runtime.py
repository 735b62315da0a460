"""The host-allocator setting is applied only where it helps, XLA:CPU, decided without starting a backend."""

import os
import subprocess
import sys

import pytest

from jformer import runtime


@pytest.mark.parametrize("platforms, plugins, want", [
    ("cpu", ["jax_cuda12_plugin"], True),  # asked for CPU: the installed plugin is not used.
    ("cuda,cpu", [], False),
    ("tpu", [], False),
    (" cpu , cpu", ["libtpu"], True),
    ("", [], True),  # nothing asked for, no accelerator plugin: XLA:CPU.
    ("", ["cuda"], False),  # JAX would start the plugin's backend first.
    ("", ["libtpu"], False),
])
def test_decides_xla_cpu_from_platforms_then_plugins(monkeypatch, platforms, plugins, want):
  monkeypatch.setattr(runtime, "requested_platforms", lambda: platforms)
  monkeypatch.setattr(runtime, "accelerator_plugins", lambda: plugins)
  assert runtime.will_run_on_xla_cpu() is want


@pytest.mark.parametrize("on_cpu, disabled, want_calls", [
    (True, False, list(runtime.SETTINGS)), (False, False, []), (True, True, [])])
def test_allocator_set_only_on_xla_cpu(monkeypatch, on_cpu, disabled, want_calls):
  calls = []
  monkeypatch.setattr(runtime, "will_run_on_xla_cpu", lambda: on_cpu)
  monkeypatch.setattr(runtime, "_mallopt", lambda: lambda param, value: calls.append((param, value)) or 1)
  if disabled:
    monkeypatch.setenv(runtime.DISABLE_ENV, "1")
  else:
    monkeypatch.delenv(runtime.DISABLE_ENV, raising=False)
  assert runtime.configure_host_allocator() is bool(want_calls)
  assert calls == want_calls


def test_decision_starts_no_backend():
  """In a fresh process: deciding imports jax but initializes no backend (so it can run before any thread pool)."""
  code = ("import jax._src.xla_bridge as xb; from jformer import runtime; "
          "print(runtime.will_run_on_xla_cpu(), runtime.accelerator_plugins(), bool(xb._backends))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"JAX_PLATFORMS": "", "PATH": ""}).stdout.split()
  assert out[-1] == "False"
  assert out[0] == str(out[1] == "[]")  # this machine: XLA:CPU iff no accelerator plugin is installed.


@pytest.mark.parametrize("backend, flags, want", [
    ("gpu", set(), "bfloat16"), ("tpu", set(), "bfloat16"),
    ("cpu", {"avx2", "avx512f", "avx512_bf16"}, "bfloat16"), ("cpu", {"avx2", "amx_bf16"}, "bfloat16"),
    ("cpu", {"avx2", "avx512f", "fma"}, "float32"), ("cpu", set(), "float32")])  # no flags known (off Linux).
def test_auto_dtype_is_bfloat16_only_where_it_is_multiplied_natively(monkeypatch, backend, flags, want):
  monkeypatch.setattr(runtime, "cpu_flags", lambda: flags)
  assert runtime.auto_dtype(backend) == want


def test_model_dtype_auto_resolves_through_the_backend(monkeypatch):
  import jax.numpy as jnp

  from jformer.models import config as model_config

  monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2"})
  assert model_config.resolve_dtype("auto") == jnp.float32  # the tests run on the CPU backend.
  monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16"})
  assert model_config.resolve_dtype("auto") == jnp.bfloat16
  with pytest.raises(ValueError, match=r"model.dtype='float16' is not one of \['bfloat16', 'float32', 'auto'\]"):
    model_config.resolve_dtype("float16")


@pytest.mark.parametrize("env, want", [
    ({"JFORMER_COMPILATION_CACHE": "/somewhere/xla"}, "/somewhere/xla"),
    ({"JFORMER_COMPILATION_CACHE": ""}, None),
    ({"JFORMER_COMPILATION_CACHE": "off"}, None),
    ({"JAX_COMPILATION_CACHE_DIR": "/jax/own"}, "/jax/own"),  # the user's JAX setting is kept.
    ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/jformer/xla"),
    ({"HOME": "/home/someone"}, "/home/someone/.cache/jformer/xla"),  # the default.
])
def test_compilation_cache_folder_from_the_environment(monkeypatch, env, want):
  for name in (runtime.CACHE_ENV, "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
    monkeypatch.delenv(name, raising=False)
  for name, value in env.items():
    monkeypatch.setenv(name, value)
  assert runtime.compilation_cache_folder() == want


# A process that compiles one program with the cache on (every compile written: min_compile_seconds=0), and prints
# how many compilations the persistent cache answered.
CACHED_COMPILE = """
import jax, jax.numpy as jnp
from jformer import runtime
hits = []
jax.monitoring.register_event_listener(lambda event, **kwargs: hits.append(event)
                                       if event == "/jax/compilation_cache/cache_hits" else None)
print("folder", runtime.configure_compilation_cache(min_compile_seconds=0))
print(float(jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((8, 8)))))
print("hits", len(hits))
"""


@pytest.mark.integration  # two processes that import jax.
def test_a_second_process_loads_the_programs_the_first_compiled(tmp_path):
  """The cache folder gets entries from the first process; the second loads its programs from them and writes
  nothing new."""
  folder = tmp_path / "xla"
  env = {**os.environ, runtime.CACHE_ENV: str(folder)}
  run = lambda: subprocess.run([sys.executable, "-c", CACHED_COMPILE], env=env, capture_output=True, text=True,
                               timeout=120, check=True).stdout.split("\n")
  first = run()
  assert first[0] == f"folder {folder}" and first[2] == "hits 0"
  entries = sorted(p.name for p in folder.iterdir())
  assert entries
  second = run()
  assert second[1] == first[1] and int(second[2].split()[1]) >= 1
  assert sorted(p.name for p in folder.iterdir()) == entries


@pytest.mark.integration  # a process that imports jax.
def test_the_test_runs_processes_share_one_cache():
  """tests/conftest.py: this process and the commands tests start compile with the same XLA_FLAGS
  (tests/xla_flags.py) into one cache folder: a program this process compiled is loaded by a command, which writes no
  entry of its own."""
  import xla_flags

  folder = runtime.compilation_cache_folder()
  assert folder and xla_flags.COMPILE_FAST in os.environ["XLA_FLAGS"]
  program = f"lambda x: jnp.sin(jnp.tanh(x @ x.T * {os.getpid()})).sum()"  # new to a folder kept between runs.
  name = f"cache_probe_{os.getpid()}"  # its entries' names: the other tests' processes write to the folder meanwhile.
  cache_entries = lambda: {entry for entry in os.listdir(folder)
                           if entry.startswith(f"jit_{name}-") and entry.endswith("-cache")}
  import jax
  import jax.numpy as jnp

  probe = eval(program, {"jnp": jnp})
  probe.__name__ = name
  previous = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  try:
    jax.jit(probe)(jnp.ones((12, 12))).block_until_ready()
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", previous)
  here = cache_entries()
  command = (f"import jax, jax.numpy as jnp; from jformer import runtime; hits = []; "
             f"jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) "
             f"if event == '/jax/compilation_cache/cache_hits' else None); "
             f"runtime.configure_compilation_cache(min_compile_seconds=0); probe = {program}; "
             f"probe.__name__ = {name!r}; jax.jit(probe)(jnp.ones((12, 12))).block_until_ready(); print(len(hits))")
  hits = subprocess.run([sys.executable, "-c", command], check=True, timeout=120, capture_output=True,
                        text=True).stdout.split()[-1]
  assert len(here) == 1 and cache_entries() == here  # the command wrote no entry of its own ...
  assert int(hits) >= 1  # ... it loaded this process's.
