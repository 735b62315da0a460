"""UTF-8 text read line by line, with an error that names the line that is not UTF-8 (data files, translate input)."""

from __future__ import annotations

from typing import Iterable, Iterator


def utf8_lines(lines: Iterable[bytes], name: str, *, fix: str) -> Iterator[str]:
  """Each of `lines` (bytes split at b"\\n") decoded as UTF-8, without its line ending ("\\n" or "\\r\\n").

  Raises:
    ValueError: at the first line that is not UTF-8, naming `name`, its 1-based number and then `fix`.
  """
  for number, line in enumerate(lines, 1):
    try:
      yield line.rstrip(b"\r\n").decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(f"{name} line {number} is not UTF-8 text ({e.reason}); {fix}") from e
