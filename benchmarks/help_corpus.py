"""An English-German corpus of another domain than the bundled one (software UI strings): the prose of user-help
manuals, aligned paragraph by paragraph from the translated Mallard and DocBook pages that Debian 12 packages ship.

    python benchmarks/help_corpus.py --from_stored --pairs=18000 --out=runs/corpora/help_18k   # offline
    python benchmarks/help_corpus.py --cache=/tmp/helpcorpus --pairs=0 --out=runs/corpora/help_all
    python benchmarks/help_corpus.py --cache=/tmp/helpcorpus --store   # rebuild benchmarks/corpora/help_en_de

A German help page of these packages is made from the English page and a PO catalog (GNOME and MATE: itstool;
KDE: po2xml), so it keeps the English page's XML tree: the text blocks (p, title, desc, para, entry, ...) of the two
pages are paired by their position when the two pages give the same sequence of block tags; where they do not, the
two trees are compared section by section and only the parts that agree are paired (`matched`). Inline markup
(gui, link, em, key, ...) becomes its text, whitespace is collapsed, code blocks are left out, and so are pairs that
are empty, untranslated (German = English), longer than `MAX_WORDS` words or of an absurd length ratio; an English
source is kept once (its first pair, in the order of `PACKAGES`).

Every pair carries its manual (the help folder's name: /usr/share/help/<lang>/<manual>, KDE's
/usr/share/doc/HTML/<lang>/<manual>). The pairs of `VALID_MANUALS` give the valid split and those of `TEST_MANUALS`
the test split, `corpus_subsets.HELD_OUT_PAIRS` of each drawn with the seed; the training split is `--pairs` pairs
drawn with the seed from every other manual (0 = all of them). `--store` writes every aligned pair, by split pool,
to benchmarks/corpora/help_en_de ({split}.{src,tgt,doc}.gz), and `--from_stored` cuts the same subsets from that
copy without downloading anything; its README.md gives the provenance, the licences (per package) and the counts.
"""

from __future__ import annotations

import argparse
import gzip
import html.entities
import pathlib
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET

import corpus_subsets  # benchmarks/, beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]
STORED = REPO / "benchmarks" / "corpora" / "help_en_de"
# Debian 12 "bookworm" package: the version the stored copy was built from. Pairs are deduplicated in this order;
# kdoctools5 gives no pairs, only the entities (&kde;, &Ctrl;) that the KDE manuals' DTD declares.
PACKAGES = {
    "gnome-user-docs": "43.0-2", "accerciser": "3.40.0-2", "aisleriot": "1:3.22.23-1", "akregator": "4:22.12.3-1",
    "ark": "4:22.12.3-1+deb12u1", "artikulate": "4:22.12.3-1", "baobab": "43.0-1", "bijiben": "40.1-6",
    "blinken": "4:22.12.3-1", "bovo": "4:22.12.3-1", "brasero-common": "3.12.3-2", "cantor": "4:22.12.3-1",
    "cheese-common": "43.0-1", "dasher-data": "5.0.0~beta~repack2-4", "deja-dup": "44.0-2", "dolphin": "4:22.12.3-1",
    "dragonplayer": "4:22.12.3-1", "easytag": "2.4.3-5+b1", "engrampa-common": "1.26.0-1+deb12u2",
    "eog": "43.2-1+deb12u1", "eom-common": "1.26.0-2", "epiphany-browser-data": "43.1-1",
    "evince-common": "43.1-2+deb12u1", "evolution-common": "3.46.4-2+deb12u1", "file-roller": "43.0-1",
    "filelight": "4:22.12.3-1", "five-or-more": "1:3.32.3-1", "four-in-a-row": "1:3.38.1-1+b1",
    "gbrainy": "1:2.4.6-1", "gedit-common": "44.2-1", "glabels-data": "3.4.1-4", "glade": "3.40.0-3+b1",
    "gnome-boxes": "43.2-1", "gnome-calculator": "1:43.0.1-2", "gnome-chess": "1:43.1-1", "gnome-clocks": "43.0-1",
    "gnome-color-manager": "3.36.0-1+b1", "gnome-commander-data": "1.16.0-1", "gnome-connections": "43.0-1",
    "gnome-devel-docs": "40.3-1", "gnome-dictionary": "40.0-3", "gnome-klotski": "1:3.38.2-1", "gnome-logs": "43.0-1",
    "gnome-mahjongg": "1:3.38.3-2", "gnome-mines": "1:40.1-1", "gnome-music": "42.1-1", "gnome-nettool": "42.0-1",
    "gnome-nibbles": "1:3.38.2-2+b1", "gnome-photos": "43.0-2", "gnome-robots": "1:40.0-2",
    "gnome-sudoku": "1:43.1-1", "gnome-system-monitor": "42.0-2", "gnome-taquin": "3.38.1-2+b1",
    "gnome-terminal-data": "3.46.8-1", "gnome-tetravex": "1:3.38.2-3", "gnome-video-arcade": "0.8.8-5+b1",
    "gnote": "43.1-1", "goobox": "3.6.0-11", "granatier": "4:22.12.3-1", "gthumb-data": "3:3.12.2-3",
    "gtranslator": "42.0-1", "gucharmap": "1:15.0.2-1", "gwenview": "4:22.12.3-1", "hamster-time-tracker": "3.0.2-4",
    "hitori": "3.38.4-2", "juk": "4:22.12.3-1", "kaddressbook": "4:22.12.3-1", "kalzium-data": "4:22.12.3-1",
    "kanagram": "4:22.12.3-1", "kapman": "4:22.12.3-1", "kate5-data": "4:22.12.3-1", "katomic": "4:22.12.3-1",
    "kblackbox": "4:22.12.3-1", "kblocks": "4:22.12.3-1", "kbounce": "4:22.12.3-1", "kbreakout": "4:22.12.3-1",
    "kbruch": "4:22.12.3-1", "kcalc": "4:22.12.3-1", "kde-spectacle": "22.12.3-1",
    "kdenlive-data": "22.12.3-2+deb12u2", "kdf": "4:22.12.3-1", "kdiamond": "4:22.12.3-1", "kfind": "4:22.12.3-1",
    "kfourinline": "4:22.12.3-1", "kgeography-data": "4:22.12.3-1", "kget": "4:22.12.3-1",
    "kgoldrunner": "4:22.12.3-1", "kgpg": "4:22.12.3-1", "khelpcenter": "4:22.12.3-1", "kig": "4:22.12.3-1",
    "kigo": "4:22.12.3-1", "killbots": "4:22.12.3-1", "kinfocenter": "4:5.27.5-2", "kiten": "4:22.12.3-1",
    "kjumpingcube": "4:22.12.3-1", "kleopatra": "4:22.12.3-1", "klines": "4:22.12.3-1", "kmag": "4:22.12.3-1",
    "kmahjongg": "4:22.12.3-1", "kmail": "4:22.12.3-1", "kmines": "4:22.12.3-1", "kmix": "4:22.12.3-1",
    "kmousetool": "4:22.12.3-1", "kmouth": "4:22.12.3-1", "kmplot": "4:22.12.3-1", "knavalbattle": "4:22.12.3-1",
    "knetwalk": "4:22.12.3-1", "knotes": "4:22.12.3-1", "kolf": "4:22.12.3-1", "kollision": "4:22.12.3-1",
    "kompare": "4:22.12.3-1", "konqueror": "4:22.12.3-1", "konquest": "4:22.12.3-1", "konsole": "4:22.12.3-1+deb12u1",
    "kontact": "4:22.12.3-1", "korganizer": "4:22.12.3-1", "kpat": "4:22.12.3-1", "krdc": "4:22.12.3-1",
    "kreversi": "4:22.12.3-1", "krfb": "4:22.12.3-1", "kruler": "4:22.12.3-1", "krusader": "2:2.8.0-1",
    "kshisen": "4:22.12.3-1", "ksirk": "4:22.12.3-1", "kspaceduel": "4:22.12.3-1", "ksquares": "4:22.12.3-1",
    "ksudoku": "4:22.12.3-1", "ksystemlog": "4:22.12.3-1", "kteatime": "4:22.12.3-1", "ktimer": "4:22.12.3-1",
    "kturtle": "4:22.12.3-1", "kubrick": "4:22.12.3-1", "kwalletmanager": "4:22.12.3-1", "kwordquiz": "4:22.12.3-1",
    "kwrite": "4:22.12.3-1", "lightsoff": "1:40.0.1-1", "marble-data": "4:22.12.3-1",
    "mate-applets-common": "1.26.1-1", "mate-calc-common": "1.26.0-1",
    "mate-control-center-common": "1.26.0-2+deb12u1", "mate-panel-common": "1.27.0-1",
    "mate-system-monitor-common": "1.26.0-1", "mate-user-guide": "1.26.0-1", "mate-utils-common": "1.26.0-1+deb12u1",
    "meld": "3.22.0-2", "okular": "4:22.12.3-1+deb12u1", "orca": "43.1-1", "partitionmanager": "22.12.3-1",
    "picmi": "4:22.12.3-1", "pitivi": "2022.06-1+b1", "plasma-desktop-data": "4:5.27.5-2",
    "plasma-workspace-data": "4:5.27.5-2+deb12u2", "polari": "43.0-1", "quadrapassel": "1:40.2-1",
    "rhythmbox-data": "3.4.6-2", "rocs": "4:22.12.3-1", "seahorse": "43.0-1", "shotwell-common": "0.30.17-1",
    "simple-scan": "42.5-2", "sound-juicer": "3.38.0-2.1", "step": "4:22.12.3-1", "swell-foop": "1:41.1-1",
    "systemsettings": "4:5.27.5-2", "tali": "1:40.9-1", "totem-common": "43.0-2", "vinagre": "3.22.0-8.1",
    "zenity-common": "3.44.0-1", "kdoctools5": "5.103.0-1",
}
VALID_MANUALS = ("evolution",)  # GNOME's mail and calendar client (Mallard): 1.9k pairs.
TEST_MANUALS = ("orca", "konqueror")  # GNOME's screen reader (Mallard), KDE's web browser (DocBook): 1.6k pairs.
MAX_WORDS = 100
MAX_RATIO = 3.0  # longer / shorter side, in characters, when the longer side has over `RATIO_FROM` characters.
RATIO_FROM = 20

# Elements whose text is one segment; a nested one (DocBook's entry > para, note > para) is a segment of its own.
TEXT_BLOCKS = frozenset({"p", "title", "subtitle", "desc", "para", "simpara", "term", "entry", "glossterm",
                         "member", "releaseinfo", "attribution"})
# Blocks of code or terminal text: kept in the structure, never paired.
CODE_BLOCKS = frozenset({"code", "screen", "programlisting", "synopsis", "literallayout", "cmdsynopsis",
                         "funcsynopsis", "classsynopsis"})
# Block containers that may sit inside a text block (DocBook allows lists, notes and listings in a para).
NESTED_BLOCKS = TEXT_BLOCKS | CODE_BLOCKS | frozenset({
    "itemizedlist", "orderedlist", "variablelist", "simplelist", "segmentedlist", "table", "informaltable",
    "figure", "informalfigure", "note", "tip", "warning", "important", "caution", "footnote", "blockquote",
    "mediaobject", "example", "informalexample", "procedure", "list", "steps", "terms", "tree", "sidebar"})
# Subtrees left out entirely: names and credits (the German pages add their translators), revision history,
# index terms and editorial comments, none of which is text a reader reads as the page.
SKIPPED = frozenset({"credit", "othercredit", "author", "authorgroup", "editor", "corpauthor", "publisher",
                     "revhistory", "revision", "copyright", "indexterm", "remark", "comment", "rules",
                     "legalnotice"})
# Inline elements whose children a reader sees joined: Ctrl+C, File ▸ Open (Ctrl+O).
JOINED = {"keyseq": "+", "keycombo": "+", "guiseq": " ▸ ", "menuchoice": " ▸ "}
# Inline elements that a reader sees as the title of another page when they are empty: such a block has a hole.
REFERENCES = frozenset({"link", "xref"})
XML_ENTITIES = frozenset({"amp", "lt", "gt", "quot", "apos"})
HOLE = "\ue000"  # stands for text that is not in the page itself (an unresolved entity)


def local(tag) -> str:
  """An element's name without its namespace ("{http://projectmallard.org/1.0/}p" -> "p"); "" for comments."""
  return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def parse(text: str, declared: dict[str, str] | None = None) -> ET.Element:
  """The XML tree of a help page. A DocBook page's DOCTYPE is resolved here, by hand: its internal entities
  (&app; -> <application>Pluma</application>) are substituted and HTML ones (&mdash;) become their characters;
  any other entity (an external file such as a chapter or &legal;, or one from a DTD not read here) becomes `HOLE`,
  which drops a text block that holds it (a chapter file is aligned on its own). `declared`: entities of the DTD the
  page names (KDE's, `kde_entities`); the page's own declarations come first, as in XML."""
  entities = dict(declared or {})
  text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # a DOCTYPE may sit in a comment
  doctype = re.search(r"<!DOCTYPE[^\[>]*(\[.*?\]\s*)?>", text, re.S)
  if doctype:
    entities.update(declarations(doctype[0]))
    text = text[:doctype.start()] + text[doctype.end():]

  def substitute(match):
    name = match[1]
    if name in XML_ENTITIES:
      return match[0]
    if name in entities:
      return entities[name]
    return html.entities.html5.get(name + ";", HOLE)

  for _ in range(4):  # entities may name entities
    text = re.sub(r"&([A-Za-z][\w.-]*);", substitute, text)
  return ET.fromstring(text.encode("utf-8"))


def flatten(element: ET.Element) -> str | None:
  """The text a reader sees in a text block: inline markup becomes its text, nested blocks and skipped subtrees
  are left out (they are segments of their own, or not text); None when the block holds an empty reference,
  whose text a viewer fills in from another page (the segment would have a hole)."""
  pieces = [element.text or ""]
  for child in element:
    tag = local(child.tag)
    if tag and tag not in NESTED_BLOCKS and tag not in SKIPPED:
      if tag in JOINED:  # DocBook's menuchoice may hold its shortcut, shown after the menu path
        parts = [(local(c.tag), flatten(c)) for c in child if local(c.tag)]
        inner = None if any(p is None for _, p in parts) else (
            JOINED[tag].join(p.strip() for name, p in parts if name != "shortcut")
            + "".join(f" ({p.strip()})" for name, p in parts if name == "shortcut"))
      else:
        inner = flatten(child)
        if tag in REFERENCES and inner is not None and not inner.strip():
          inner = None
      if inner is None:
        return None
      pieces.append(inner)
    pieces.append(child.tail or "")
  return "".join(pieces)


def blocks(root: ET.Element) -> list[tuple[str, str | None]]:
  """(tag path, text) of every text and code block of a page in document order; the text is None for a code
  block and a block with a hole. Skipped subtrees (credits, index terms) are not in the list."""
  found = []

  def walk(element, path):
    tag = local(element.tag)
    if not tag or tag in SKIPPED:
      return
    path = f"{path}/{tag}"
    if tag in CODE_BLOCKS:
      found.append((path, None))
      return
    children = list(element)
    if tag in TEXT_BLOCKS:
      text = flatten(element)
      found.append((path, None if text is None or HOLE in text else " ".join(text.split())))
      children = [c for c in children if local(c.tag) in NESTED_BLOCKS]
    for child in children:
      walk(child, path)

  walk(root, "")
  return found


def keep(source: str, target: str) -> bool:
  """Whether a pair goes into the corpus: both sides hold a letter, the German differs from the English (not an
  untranslated copy), neither side is over `MAX_WORDS` words, and the lengths are not absurdly apart."""
  if not re.search(r"[^\W\d_]", source) or not re.search(r"[^\W\d_]", target) or source == target:
    return False
  if max(len(source.split()), len(target.split())) > MAX_WORDS:
    return False
  longer, shorter = max(len(source), len(target)), min(len(source), len(target))
  return longer <= RATIO_FROM or longer <= MAX_RATIO * shorter


def matched(english: ET.Element, german: ET.Element) -> tuple[list[tuple[str, str]], int]:
  """(English, German) texts of the blocks of two elements, position by position where their block structures are
  the same, and the number of English blocks left out where they are not. Two elements whose blocks differ (a
  German page translated from an older English one, or with its translators added as a paragraph) are matched child
  by child when they have the same sequence of child elements: the sections that agree are kept."""
  source, target = blocks(english), blocks(german)
  if [path for path, _ in source] == [path for path, _ in target]:
    return [(s, t) for (_, s), (_, t) in zip(source, target) if s is not None and t is not None], 0
  children = [[c for c in e if local(c.tag) and local(c.tag) not in SKIPPED] for e in (english, german)]
  if local(english.tag) in TEXT_BLOCKS or [local(c.tag) for c in children[0]] != [local(c.tag) for c in children[1]]:
    return [], len(source)
  pairs, left_out = [], 0
  for pair in zip(*children):
    found, missed = matched(*pair)
    pairs += found
    left_out += missed
  return pairs, left_out


def align(english: str, german: str, entities: tuple[dict, dict] = ({}, {})) -> tuple[list[tuple[str, str]], int]:
  """The kept (English, German) pairs of a page and its translation, by position in the parts of the two pages
  whose block structures are the same (`matched`), and the number of English blocks in the parts that differ.
  `entities`: the English and the German DTD entities (KDE's)."""
  pairs, left_out = matched(parse(english, entities[0]), parse(german, entities[1]))
  return [(s, t) for s, t in pairs if keep(s, t)], left_out


def declarations(text: str) -> dict[str, str]:
  """{name: value} of the general entities a DTD file declares; an external one (SYSTEM/PUBLIC) is a `HOLE`."""
  text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
  found = {}
  for name, external, double, single in re.findall(
      r"""<!ENTITY\s+([\w.-]+)\s+(SYSTEM|PUBLIC)?\s*(?:"([^"]*)"|'([^']*)')""", text):
    found.setdefault(name, HOLE if external else double or single)
  return found


def kde_entities(root: pathlib.Path, lang: str) -> dict[str, str]:
  """The entities a KDE DocBook page of `lang` ("en", "de") gets from kdoctools' DTD: the language's own files first
  (&Ctrl; is "Strg" in German), then the general ones (&kde;, application names); {} when kdoctools is not there."""
  folder = root / "kdoctools5" / "usr/share/kf5/kdoctools/customization"
  entities = {}
  for path in [folder / lang / f"{n}.entities" for n in ("user", "strings", "lang")] + sorted(
      (folder / "entities").glob("*.entities")):
    if path.is_file():
      for name, value in declarations(path.read_text(encoding="utf-8")).items():
        entities.setdefault(name, value)
  return entities


def pages(root: pathlib.Path, package: str):
  """(manual, English page, German page or None) of every help page a package ships, in path order: Mallard and
  DocBook pages under usr/share/help/{C,de}/<manual>/ (GNOME, MATE) and DocBook under
  usr/share/doc/HTML/{en,de}/<manual>/ (KDE). Figures and symlinks (a second name for a page) are left out."""
  for english_dir, german_dir in (("usr/share/help/C", "usr/share/help/de"), ("usr/share/doc/HTML/en",
                                                                               "usr/share/doc/HTML/de")):
    base = root / package / english_dir
    for path in sorted(base.rglob("*")) if base.is_dir() else []:
      if path.suffix in (".page", ".xml", ".docbook") and path.is_file() and not path.is_symlink():
        relative = path.relative_to(base)
        german = root / package / german_dir / relative
        yield relative.parts[0], path, german if german.is_file() and not german.is_symlink() else None


def build(root: pathlib.Path, packages=None) -> tuple[list[tuple[str, str, str]], dict]:
  """(manual, English, German) of every kept pair of `packages` (extracted under `root/<package>/`), each English
  source once (its first pair, in package order), and the counts per package and manual for the README."""
  packages = list(packages or PACKAGES)
  entities = (kde_entities(root, "en"), kde_entities(root, "de"))
  pairs, seen = [], set()
  stats = {"pages": 0, "untranslated_pages": 0, "mismatched_pages": {}, "manuals": {}}
  for package in packages:
    for manual, english, german in pages(root, package):
      if german is None:
        stats["untranslated_pages"] += 1
        continue
      stats["pages"] += 1
      aligned, left_out = align(english.read_text(encoding="utf-8"), german.read_text(encoding="utf-8"),
                                entities if "/doc/HTML/" in str(english) else ({}, {}))
      if left_out:
        stats["mismatched_pages"][str(english.relative_to(root))] = left_out
      counts = stats["manuals"].setdefault(f"{package}/{manual}", {"aligned": 0, "kept": 0})
      counts["aligned"] += len(aligned)
      for source, target in aligned:
        if source not in seen:
          seen.add(source)
          counts["kept"] += 1
          pairs.append((manual, source, target))
  return pairs, stats


def download(cache: pathlib.Path, packages=None) -> pathlib.Path:
  """Fetch each package (at its recorded version, else the archive's current one, with a warning) into
  `cache`/debs and extract its help files, copyright and kdoctools' entities into `cache`/tree/<package>; both
  are reused when already there. Returns the tree."""
  debs, tree = cache / "debs", cache / "tree"
  debs.mkdir(parents=True, exist_ok=True)
  for package, version in (packages or PACKAGES).items():
    target = tree / package
    if target.is_dir():
      continue
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
      if subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=debs).returncode:
        print(f"warning: {package} {version} is not in the archive; taking its current version", file=sys.stderr)
        subprocess.run(["apt-get", "download", package], cwd=debs, check=True)
      found = sorted(debs.glob(f"{package}_*.deb"))
    extract(found[-1], target)
  return tree


def extract(deb: pathlib.Path, target: pathlib.Path) -> None:
  """The regular files of a .deb that `build` reads (help pages in English and German, the copyright file,
  kdoctools' entity files), written under `target`; images and everything else are left in the .deb."""
  wanted = re.compile(r"\./usr/share/(help/(C|de)/.*\.(page|xml|docbook)|doc/HTML/(en|de)/.*\.docbook|"
                      r"doc/[^/]+/copyright|kf5/kdoctools/customization/.*\.entities)$")
  process = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
  partial = target.with_name(target.name + ".partial")
  with tarfile.open(fileobj=process.stdout, mode="r|*") as archive:
    for member in archive:
      if member.isfile() and wanted.match(member.name):
        archive.extract(member, partial, filter="data")
  if process.wait():
    raise SystemExit(f"dpkg-deb failed on {deb}")
  partial.rename(target)


def subsets(pairs: list[tuple[str, str, str]], train_pairs: int, seed: int) -> dict[str, list[tuple[str, str, str]]]:
  """{split: pairs}: valid and test from their manuals, train from the others (`corpus_subsets.subsets`)."""
  return corpus_subsets.subsets(pairs, train_pairs, seed, VALID_MANUALS, TEST_MANUALS)


def pools(pairs: list[tuple[str, str, str]]) -> dict[str, list[tuple[str, str, str]]]:
  """Every pair, by the split its manual feeds: what `--store` keeps (the subsets are drawn from these)."""
  return corpus_subsets.partition(pairs, VALID_MANUALS, TEST_MANUALS)


def read_stored(folder: pathlib.Path = STORED) -> list[tuple[str, str, str]]:
  """(manual, source, target) of every pair of the stored copy, its train, valid and test pools in order."""
  return corpus_subsets.read_pairs(folder, "doc")


def store(pairs: list[tuple[str, str, str]], folder: pathlib.Path = STORED) -> None:
  """Write every pair, by split pool, as {split}.{doc,src,tgt}.gz (gzip -9, no name or time: reproducible)."""
  folder.mkdir(parents=True, exist_ok=True)
  for split, chosen in pools(pairs).items():
    for index, suffix in ((0, "doc"), (1, "src"), (2, "tgt")):
      data = "".join(p[index] + "\n" for p in chosen).encode("utf-8")
      with open(folder / f"{split}.{suffix}.gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as packed:
          packed.write(data)


def write(out: pathlib.Path, splits: dict[str, list[tuple[str, str, str]]], command: str) -> str:
  """The parallel_text folder: {split}.{src,tgt} and a SOURCE.txt naming the manuals of each split."""
  out.mkdir(parents=True, exist_ok=True)
  for split, chosen in splits.items():
    for index, suffix in ((1, "src"), (2, "tgt")):
      (out / f"{split}.{suffix}").write_text("".join(p[index] + "\n" for p in chosen), encoding="utf-8")
  lines = [f"English-German user-help manuals (Debian 12 packages; provenance and licences, per package: "
           f"benchmarks/corpora/help_en_de/README.md), cut by {command}."]
  for split, chosen in splits.items():
    manuals = sorted({p[0] for p in chosen})
    lines.append(f"{split}: {len(chosen):,} pairs from {len(manuals)} manuals: {', '.join(manuals)}")
  (out / "SOURCE.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
  return (out / "SOURCE.txt").read_text(encoding="utf-8")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--pairs", type=int, default=0, help="training pairs (0 = every pair of the train manuals)")
  parser.add_argument("--out", help="the corpus folder to write (created)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--from_stored", action="store_true", help="cut from benchmarks/corpora/help_en_de, offline")
  parser.add_argument("--cache", default="/tmp/helpcorpus", help="where the .deb files and their extracts go")
  parser.add_argument("--store", action="store_true", help="(re)write benchmarks/corpora/help_en_de's .gz files")
  args = parser.parse_args(argv)
  if args.from_stored:
    pairs = read_stored()
  else:
    pairs, stats = build(download(pathlib.Path(args.cache)))
    print(f"{stats['pages']:,} translated pages ({stats['untranslated_pages']} English pages have no German one), "
          f"{len(stats['mismatched_pages'])} of them aligned in part (structures differ), "
          f"{sum(stats['mismatched_pages'].values()):,} English blocks left out there; {len(pairs):,} pairs",
          file=sys.stderr)
    for name, left_out in stats["mismatched_pages"].items():
      print(f"  {left_out:5d} blocks left out: {name}", file=sys.stderr)
    if args.store:
      store(pairs)
  if args.out:
    command = (f"benchmarks/help_corpus.py --pairs={args.pairs} --seed={args.seed}"
               f"{' --from_stored' if args.from_stored else ''}")
    print(write(pathlib.Path(args.out), subsets(pairs, args.pairs, args.seed), command), end="")
  return 0


if __name__ == "__main__":
  sys.exit(main())
