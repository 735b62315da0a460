#!/usr/bin/env python3
"""Builds the bundled English LM corpus (`{train,valid,test}.txt.gz`, `stats.json`) from public-domain novels.

The novels come as R data sets inside three Debian 12 "bookworm" packages (see PACKAGES). The script downloads them
with `apt-get download` (needs `apt-get update` once) unless they are already in --debs, reads each .deb directly
(ar archive + data.tar.xz), decodes the R data (R's XDR serialization, read here by a small reader of the types those
files use), cuts each novel into one document per chapter, and splits the documents by a hash of their titles.
Python standard library and the `gzip` program only; nothing is installed and nothing of jformer is imported.

Usage (from this folder; about 10 s after the 5 MB download):
  python3 build_corpus.py --debs /tmp/english_text_debs --out .
"""
import argparse
import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import struct
import subprocess
import sys
import tarfile
import zlib

# (package, version used for the bundled files, SHA-256 of that .deb; tokenizers is amd64, the other two "all")
PACKAGES = (
  ("r-cran-janeaustenr", "1.0.0-1", "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"),
  ("r-cran-tokenizers", "0.3.0-1", "6312f013ebfde5650235bfd7ba5c44d9e4cf9f2da9855337c9483fe778f0d8c7"),
  ("r-cran-tidytext", "0.4.1-1", "8d693a8772b57e2dbdc907aa946fbeeefb03ba3eb2bbea86d5c888a4d15956ad"),
)
R_LIBRARY = "./usr/lib/R/site-library/"

# Each book: (title, author, first published, Project Gutenberg number, package, R data file, R variable,
# extra document headings besides "CHAPTER ..." lines). The R variable is a character vector of the book's lines,
# or (tidytext's books.rda) a data frame of gutenberg_id/text/title rows, of which the book's rows are taken.
BOOKS = (
  ("Sense and Sensibility", "Jane Austen", 1811, 161, "r-cran-janeaustenr", "janeaustenr/data/Rdata",
   "sensesensibility", ()),
  ("Pride and Prejudice", "Jane Austen", 1813, 1342, "r-cran-janeaustenr", "janeaustenr/data/Rdata",
   "prideprejudice", ()),
  ("Mansfield Park", "Jane Austen", 1814, 141, "r-cran-janeaustenr", "janeaustenr/data/Rdata", "mansfieldpark", ()),
  ("Emma", "Jane Austen", 1815, 158, "r-cran-janeaustenr", "janeaustenr/data/Rdata", "emma", ()),
  ("Northanger Abbey", "Jane Austen", 1817, 121, "r-cran-janeaustenr", "janeaustenr/data/Rdata", "northangerabbey",
   ("ADVERTISEMENT BY THE AUTHORESS, TO NORTHANGER ABBEY",)),
  ("Persuasion", "Jane Austen", 1817, 105, "r-cran-janeaustenr", "janeaustenr/data/Rdata", "persuasion", ()),
  ("Moby Dick; or The Whale", "Herman Melville", 1851, 2701, "r-cran-tokenizers", "tokenizers/data/Rdata",
   "mobydick", ("ETYMOLOGY.", "EXTRACTS (Supplied by a Sub-Sub-Librarian).", "Epilogue")),
  ("Great Expectations", "Charles Dickens", 1861, 1400, "r-cran-tidytext", "tidytext/extdata/books.rda", "books", ()),
  ("Twenty Thousand Leagues under the Sea", "Jules Verne (anonymous English translation)", 1870, 164,
   "r-cran-tidytext", "tidytext/extdata/books.rda", "books", ()),
  ("The War of the Worlds", "H. G. Wells", 1898, 36, "r-cran-tidytext", "tidytext/extdata/books.rda", "books", ()),
)
CHAPTER = re.compile(r"(CHAPTER|Chapter) ([0-9]+|[IVXLC]+|[A-Z-]+)\.?( .*)?")
# Part title pages, and a modern editor's note closing Northanger Abbey: dropped up to the next chapter heading.
PART = re.compile(r"(VOLUME|BOOK|PART) ([IVXLC]+|[A-Z]+)|A NOTE ON THE TEXT")
# Paragraphs by the editors of the e-texts, not by the authors: dropped.
EDITORIAL = re.compile(r"\[(At this point in the first|End volume one of this edition|Transcriber's Note)")
GUTENBERG_START = re.compile(r"\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG")
GUTENBERG_END = re.compile(r"(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG|End of (the )?Project Gutenberg)")
HELD_OUT_FRACTION = 0.025   # of all bytes, for each of test and valid
SPLIT_SALT = "english_text_v1"


# ---------------------------------------------------------------- packages
def fetch(debs: str, package: str, version: str, sha256: str) -> bytes:
  """The .deb's bytes, downloaded into `debs` unless there; warns when its SHA-256 is not the recorded one."""
  name = f"{package}_{version.split(':')[-1]}_"
  found = [f for f in sorted(os.listdir(debs)) if f.startswith(name) and f.endswith(".deb")]
  if not found:
    result = subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=debs, capture_output=True, text=True)
    if result.returncode:
      raise SystemExit(f"apt-get download {package}={version} failed (run `apt-get update` first?):\n{result.stderr}")
    found = [f for f in sorted(os.listdir(debs)) if f.startswith(name) and f.endswith(".deb")]
  with open(os.path.join(debs, found[0]), "rb") as f:
    data = f.read()
  digest = hashlib.sha256(data).hexdigest()
  if sha256 and digest != sha256:
    print(f"WARNING: {found[0]} has SHA-256 {digest}, not the recorded {sha256}: the output may differ",
          file=sys.stderr)
  return data


def deb_files(deb: bytes, prefix: str) -> dict:
  """{path: bytes} of the files under `prefix` in the .deb's data.tar.* (an ar archive holding tar archives)."""
  assert deb[:8] == b"!<arch>\n", "not a .deb"
  position, out = 8, {}
  while position < len(deb):
    name, size = deb[position:position + 16].decode().strip().rstrip("/"), int(deb[position + 48:position + 58])
    body = deb[position + 60:position + 60 + size]
    position += 60 + size + size % 2
    if name.startswith("data.tar"):
      with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
        for member in tar:
          if member.isfile() and member.name.startswith(prefix):
            out[member.name[len(prefix):]] = tar.extractfile(member).read()
  return out


# ---------------------------------------------------------------- R data
class RVector(list):
  """An R vector (atomic or list) with its attributes (`attrs`: {name: value})."""
  attrs: dict = {}


class RReader:
  """Reads R's XDR serialization format (versions 2 and 3): the vector, pair-list, symbol and reference types that
  data sets use. Returns RVector for vectors, str/None (NA) for strings, ("sym", name) for symbols."""

  def __init__(self, data: bytes):
    assert data[:2] == b"X\n", "not an XDR R serialization"
    self.data, self.position, self.references = data, 2, []
    version = self.int()
    self.int(), self.int()   # writer's and minimal reader's R versions
    if version == 3:
      encoding_length = self.int()   # then the native encoding's name, skipped
      self.position += encoding_length

  def int(self) -> int:
    (value,) = struct.unpack_from(">i", self.data, self.position)
    self.position += 4
    return value

  def length(self) -> int:
    n = self.int()
    return n if n != -1 else (self.int() << 32) + self.int()

  def numbers(self, fmt: str, size: int) -> list:
    n = self.length()
    values = struct.unpack_from(f">{n}{fmt}", self.data, self.position)
    self.position += n * size
    return list(values)

  def item(self):
    flags = self.int()
    kind, has_attributes, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
    if kind == 254:   # NULL
      return None
    if kind == 255:   # reference to an earlier symbol or environment
      return self.references[(flags >> 8 or self.int()) - 1]
    if kind == 1:   # symbol
      symbol = ("sym", self.item())
      self.references.append(symbol)
      return symbol
    if kind in (2, 239):   # pair list (attributes, tag, value, rest)
      attributes = self.item() if has_attributes else None
      tag = self.item() if has_tag else None
      return ("pair", tag, self.item(), self.item(), attributes)
    if kind == 9:   # one string
      n = self.int()
      if n == -1:
        return None
      text = self.data[self.position:self.position + n].decode("utf-8")
      self.position += n
      return text
    if kind in (10, 13):   # logical, integer
      value = self.numbers("i", 4)
    elif kind == 14:   # double
      value = self.numbers("d", 8)
    elif kind in (16, 19):   # character vector, list
      value = [self.item() for _ in range(self.length())]
    else:
      raise ValueError(f"R type {kind} at byte {self.position} is not read by this script")
    value = RVector(value)
    if has_attributes:
      value.attrs = pair_list(self.item())
    return value


def pair_list(pairs) -> dict:
  """{tag name: value} of an R pair list."""
  out = {}
  while pairs is not None:
    _, tag, value, pairs, _ = pairs
    out[tag[1] if tag else None] = value
  return out


def lazy_load_chunk(chunk: bytes) -> bytes:
  """One object of an R lazy-load database (.rdb/.rdx): 4-byte length, then zlib, or a type byte and bzip2/xz/raw."""
  (n,) = struct.unpack(">I", chunk[:4])
  codec = {b"Z": lzma.decompress, b"2": bz2.decompress, b"0": bytes}.get(chunk[4:5])
  out = codec(chunk[5:]) if codec else zlib.decompress(chunk[4:])
  assert len(out) == n, "truncated R lazy-load object"
  return out


def r_variable(files: dict, path: str, variable: str):
  """The R object `variable` of a lazy-load database (`path` + .rdx/.rdb) or of an .rda file (`path`)."""
  if path.endswith(".rda"):
    data = gzip.decompress(files[path])
    assert data[:5] == b"RDX2\n" or data[:5] == b"RDX3\n", f"{path} is not an XDR .rda file"
    return pair_list(RReader(data[5:]).item())[variable]
  index_bytes = files[path + ".rdx"]
  index_data = gzip.decompress(index_bytes) if index_bytes[:2] == b"\x1f\x8b" else lazy_load_chunk(index_bytes)
  index = RReader(index_data).item()
  variables = index[index.attrs["names"].index("variables")]
  offset, size = variables[variables.attrs["names"].index(variable)]
  return RReader(lazy_load_chunk(files[path + ".rdb"][offset:offset + size])).item()


def book_lines(files: dict, book) -> list:
  """The book's text as lines (no line ends, NA lines as "")."""
  _, _, _, gutenberg_id, _, path, variable, _ = book
  value = r_variable(files, path, variable)
  if value.attrs.get("names") == ["gutenberg_id", "text", "title"]:   # tidytext's data frame of several books
    value = [text for number, text in zip(value[0], value[1]) if number == gutenberg_id]
  text = "\n".join(line or "" for line in value).replace("\ufeff", "").replace("\r\n", "\n")
  return text.split("\n")


# ---------------------------------------------------------------- documents
def chapters(title: str, lines: list, extra_headings: tuple) -> list:
  """[(document title, document text)]: one per chapter. The Project Gutenberg header and licence (if present), the
  front matter before the first heading, part title pages and editors' notes are dropped; the heading is the first
  paragraph; a paragraph (lines up to a blank line) becomes one line with runs of white space made single spaces."""
  start = next((i + 1 for i, line in enumerate(lines) if GUTENBERG_START.match(line)), 0)
  end = next((i for i, line in enumerate(lines) if i >= start and GUTENBERG_END.match(line)), len(lines))
  documents, paragraphs, paragraph, part, keep = [], None, [], "", False

  def close_paragraph():
    text = " ".join(" ".join(paragraph).split())
    if text and keep and not EDITORIAL.match(text):
      paragraphs.append(text)
    paragraph.clear()

  for line in lines[start:end] + [""]:
    line = line.strip()
    if CHAPTER.fullmatch(line) or line in extra_headings:
      close_paragraph()
      paragraphs, keep = [], True
      documents.append((" / ".join(name for name in (title, part, line) if name), paragraphs))
    elif PART.fullmatch(line):
      close_paragraph()
      part, keep = line, False
    elif line:
      paragraph.append(line)
      continue
    close_paragraph()
  titles = [name for name, _ in documents]
  assert len(set(titles)) == len(titles), f"{title}: two chapters with one title"
  return [(name, "\n".join([name.rsplit(" / ", 1)[1]] + paragraphs)) for name, paragraphs in documents]


def split_documents(documents: list) -> dict:
  """{split: [(title, text)]} in corpus order. Documents ordered by SHA-1 of their salted title fill test until it
  holds HELD_OUT_FRACTION of all bytes, then valid likewise; the rest is train."""
  total = sum(len(text.encode("utf-8")) for _, text in documents)
  order = sorted(documents, key=lambda doc: hashlib.sha1((SPLIT_SALT + doc[0]).encode("utf-8")).hexdigest())
  assigned, filled = {}, 0
  for split in ("test", "valid"):
    size = 0
    while size < HELD_OUT_FRACTION * total:
      title, text = order[filled]
      assigned[title], size, filled = split, size + len(text.encode("utf-8")), filled + 1
  return {split: [doc for doc in documents if assigned.get(doc[0], "train") == split]
          for split in ("train", "valid", "test")}


def gzip_file(path: str, data: bytes) -> None:
  """Writes `gzip -9 -n` of `data` (no name, no time stamp: the same bytes on every run)."""
  with open(path, "wb") as f:
    subprocess.run(["gzip", "-9", "-n", "-c"], input=data, stdout=f, check=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--debs", required=True, help="folder of the downloaded .deb files (a cache, reused)")
  parser.add_argument("--out", required=True, help="folder to write {train,valid,test}.txt.gz and stats.json into")
  args = parser.parse_args()
  os.makedirs(args.debs, exist_ok=True)
  os.makedirs(args.out, exist_ok=True)
  package_files, deb_sha256 = {}, {}
  for package, version, sha256 in PACKAGES:
    deb = fetch(args.debs, package, version, sha256)
    deb_sha256[package] = hashlib.sha256(deb).hexdigest()
    package_files[package] = deb_files(deb, R_LIBRARY)
  documents, books = [], []
  for book in BOOKS:
    title, author, year, gutenberg_id, package, _, _, extra_headings = book
    cut = chapters(title, book_lines(package_files[package], book), extra_headings)
    documents += cut
    books.append({"title": title, "author": author, "published": year, "gutenberg": gutenberg_id,
                  "package": package, "documents": len(cut), "bytes": sum(len(t.encode("utf-8")) for _, t in cut)})
  splits = split_documents(documents)
  stats = {"packages": [{"package": p, "version": v, "sha256": deb_sha256[p]} for p, v, _ in PACKAGES],
           "books": books, "splits": {}}
  for split, docs in splits.items():
    data = "".join(text + "\n\n" for _, text in docs)[:-1].encode("utf-8")
    gzip_file(os.path.join(args.out, f"{split}.txt.gz"), data)
    stats["splits"][split] = {"documents": len(docs), "bytes": len(data), "words": len(data.split()),
                              "titles": [title for title, _ in docs] if split != "train" else None}
    print(f"{split}: {len(docs)} documents, {len(data):,} bytes, {len(data.split()):,} words")
  with open(os.path.join(args.out, "stats.json"), "w", encoding="utf-8") as f:
    json.dump(stats, f, indent=1, ensure_ascii=False)
    f.write("\n")


if __name__ == "__main__":
  main()
