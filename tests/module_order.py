"""Longest modules first. With `--dist loadscope` each xdist worker runs whole modules, taking the next one when it
finishes; a long module taken last keeps one worker busy after the other has run out of work. tests/module_seconds.json
holds each module's seconds per tier (the `-m` expression) from a recorded run; a run starts the modules it knows
longest first and the others after them, in collection order. A stale table changes the order only, never a result.

Record it again with `JFORMER_RECORD_MODULE_SECONDS=1` (e.g. `JFORMER_RECORD_MODULE_SECONDS=1 .ci/run`): each tier
writes its modules' setup + call + teardown seconds into the table.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib

TABLE = pathlib.Path(__file__).with_name("module_seconds.json")
RECORD_ENV = "JFORMER_RECORD_MODULE_SECONDS"
_recorded: dict[str, float] = collections.defaultdict(float)


def _tier(config) -> str:
  return config.getoption("markexpr") or ""


def _module(nodeid: str) -> str:
  return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
  seconds = json.loads(TABLE.read_text()).get(_tier(config), {}) if TABLE.exists() else {}
  items.sort(key=lambda item: -seconds.get(_module(item.nodeid), 0.0))  # stable: collection order among equals.


def pytest_runtest_logreport(report):
  _recorded[_module(report.nodeid)] += report.duration


def pytest_sessionfinish(session):
  if not os.environ.get(RECORD_ENV) or hasattr(session.config, "workerinput") or not _recorded:
    return  # an xdist worker: the controller receives every worker's reports.
  table = json.loads(TABLE.read_text()) if TABLE.exists() else {}
  table[_tier(session.config)] = {module: round(s, 1) for module, s in sorted(_recorded.items(), key=lambda x: -x[1])}
  TABLE.write_text(json.dumps(table, indent=1) + "\n")
