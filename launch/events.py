"""Scalars from TensorBoard event files without TensorFlow: TFRecord framing + tensorboardX's Event proto.

A TFRecord is `uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)`, little
endian. A record cut short or failing its checksum (a file still being written) ends the reading of that file.
"""

from __future__ import annotations

import struct

from etils import epath
from tensorboardX.proto import event_pb2
from tensorboardX.record_writer import masked_crc32c


def records(path: epath.PathLike):
  """The data of each complete, intact record of a TFRecord file (local or any `etils.epath` path, e.g. gs://)."""
  content = epath.Path(path).read_bytes()
  offset = 0
  while offset + 12 <= len(content):
    header = content[offset:offset + 8]
    (length,) = struct.unpack("<Q", header)
    (header_crc,) = struct.unpack("<I", content[offset + 8:offset + 12])
    end = offset + 12 + length
    if header_crc != masked_crc32c(header) or end + 4 > len(content):
      return
    data = content[offset + 12:end]
    if struct.unpack("<I", content[end:end + 4])[0] != masked_crc32c(data):
      return
    yield data
    offset = end + 4


def scalars(logdir: epath.PathLike) -> dict[str, list[tuple[int, float]]]:
  """`{tag: [(step, value), ...]}` sorted by step over every event file in `logdir`.

  A resumed run adds a new event file and may log a step again: the later file's value wins.
  """
  by_tag: dict[str, dict[int, float]] = {}
  for path in sorted(epath.Path(logdir).glob("events.out.tfevents.*"), key=lambda p: p.name):
    for data in records(path):
      event = event_pb2.Event.FromString(data)
      for value in event.summary.value:
        if value.WhichOneof("value") == "simple_value":
          by_tag.setdefault(value.tag, {})[event.step] = value.simple_value
  return {tag: sorted(steps.items()) for tag, steps in by_tag.items()}
