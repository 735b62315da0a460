"""benchmarks/help_corpus.py: English-German pairs aligned from translated help pages (Mallard and DocBook), and the
corpora cut from them with valid and test from manuals the training pairs do not come from."""

import pathlib

import pytest

from helpers import import_benchmark

REPO = pathlib.Path(__file__).resolve().parents[1]

ENGLISH = """<page xmlns="http://projectmallard.org/1.0/" id="bounce">
  <info>
    <credit type="author"><name>Shaun McCance</name></credit>
    <desc>Ignore quickly-repeated key presses.</desc>
  </info>
  <title>Turn on <em>bounce</em> keys</title>
  <p>Open the <gui xref="shell">Activities</gui>
     overview and press
     <keyseq><key>Ctrl</key><key>C</key></keyseq>.</p>
  <steps>
    <item><p>Click <link xref="prefs">Preferences</link>.</p></item>
    <item><p>Settings</p></item>
  </steps>
  <screen>gsettings set org.gnome.desktop.a11y bounce true</screen>
  <p>See <link xref="other"/> for more.</p>
</page>"""

GERMAN = """<?xml version="1.0" encoding="utf-8"?>
<page xmlns="http://projectmallard.org/1.0/" id="bounce" xml:lang="de">
  <info>
    <credit type="author"><name>Shaun McCance</name></credit>
    <desc>Schnell wiederholtes Drücken von Tasten ignorieren.</desc>
    <mal:credit xmlns:mal="http://projectmallard.org/1.0/" type="translator copyright">
      <mal:name>Mario Blättermann</mal:name><mal:years>2012</mal:years>
    </mal:credit>
  </info>
  <title><em>Tastenprellung</em> einschalten</title>
  <p>Öffnen Sie die <gui xref="shell">Aktivitäten</gui>-Übersicht
     und drücken Sie <keyseq><key>Strg</key><key>C</key></keyseq>.</p>
  <steps>
    <item><p>Klicken Sie auf <link xref="prefs">Einstellungen</link>.</p></item>
    <item><p>Settings</p></item>
  </steps>
  <screen>gsettings set org.gnome.desktop.a11y bounce true</screen>
  <p>Siehe <link xref="other"/> für mehr.</p>
</page>"""


@pytest.fixture(scope="module")
def help_corpus():
  return import_benchmark("help_corpus")


def test_matching_pages_give_their_blocks_flattened_and_without_code_or_untranslated_ones(help_corpus):
  pairs, left_out = help_corpus.align(ENGLISH, GERMAN)
  assert left_out == 0
  assert pairs == [
      ("Ignore quickly-repeated key presses.", "Schnell wiederholtes Drücken von Tasten ignorieren."),
      ("Turn on bounce keys", "Tastenprellung einschalten"),
      ("Open the Activities overview and press Ctrl+C.",
       "Öffnen Sie die Aktivitäten-Übersicht und drücken Sie Strg+C."),
      ("Click Preferences.", "Klicken Sie auf Einstellungen."),
  ]  # "Settings" is untranslated, the screen is code, the empty link would leave a hole: none is a pair.


def test_a_page_whose_structure_differs_gives_no_pair_and_a_part_that_differs_is_left_out(help_corpus):
  pairs, left_out = help_corpus.align(ENGLISH, GERMAN.replace("<screen>", "<p>Neu.</p><screen>"))
  assert pairs == [] and left_out == 7  # desc, title, 2 p, 2 item p, screen
  pairs, left_out = help_corpus.align(ENGLISH, GERMAN.replace("<item><p>Settings</p></item>", ""))
  assert [p[0] for p in pairs] == ["Ignore quickly-repeated key presses.", "Turn on bounce keys",
                                   "Open the Activities overview and press Ctrl+C."] and left_out == 2


def test_sections_that_agree_are_kept_when_the_page_as_a_whole_does_not(help_corpus):
  english = ("<page xmlns='http://projectmallard.org/1.0/'><section><title>First part</title><p>One thing here.</p>"
             "</section><section><title>Second part</title><p>Another thing.</p><p>More.</p></section></page>")
  german = ("<page xmlns='http://projectmallard.org/1.0/'><section><title>Erster Teil</title><p>Eine Sache hier.</p>"
            "</section><section><title>Zweiter Teil</title><p>Eine andere Sache.</p></section></page>")
  assert help_corpus.align(english, german) == ([("First part", "Erster Teil"),
                                                 ("One thing here.", "Eine Sache hier.")], 3)


def test_docbook_entities_are_resolved_and_a_block_with_an_external_one_is_dropped(help_corpus):
  head = ('<?xml version="1.0"?>\n<!DOCTYPE article PUBLIC "-//OASIS//DTD DocBook XML V4.1.2//EN" "x.dtd" [\n'
          '  <!ENTITY app "<application>Pluma</application>">\n  <!ENTITY legal SYSTEM "legal.xml">\n]>\n')
  english = head + ("<article><para>&app; is a text editor&mdash;small.</para><para>&legal; Copyright.</para>"
                    "<para>Choose <menuchoice><shortcut><keycombo><keycap>Ctrl</keycap><keycap>S</keycap></keycombo>"
                    "</shortcut><guimenu>File</guimenu><guimenuitem>Save</guimenuitem></menuchoice>.</para></article>")
  german = head + ("<article><para>&app; ist ein Texteditor&mdash;klein.</para><para>&legal; Urheberrecht.</para>"
                   "<para>Wählen Sie <menuchoice><shortcut><keycombo><keycap>Strg</keycap><keycap>S</keycap>"
                   "</keycombo></shortcut><guimenu>Datei</guimenu><guimenuitem>Speichern</guimenuitem></menuchoice>."
                   "</para></article>")
  assert help_corpus.align(english, german) == ([
      ("Pluma is a text editor\u2014small.", "Pluma ist ein Texteditor\u2014klein."),
      ("Choose File ▸ Save (Ctrl+S).", "Wählen Sie Datei ▸ Speichern (Strg+S)."),
  ], 0)


def test_pairs_too_long_or_of_an_absurd_length_ratio_are_dropped(help_corpus):
  assert help_corpus.keep("Open the file.", "Öffnen Sie die Datei.")
  assert not help_corpus.keep("Open the file now please.", "Öffnen Sie die Datei jetzt bitte, und dann lesen Sie "
                              "sie sorgfältig durch, Zeile für Zeile, bis zum Ende.")
  assert not help_corpus.keep("word " * 101, "Wort " * 90)
  assert not help_corpus.keep("Open the file.", "Open the file.") and not help_corpus.keep("42", "42.")


def test_the_subsets_keep_the_valid_and_test_manuals_out_of_train(help_corpus, monkeypatch):
  valid, test = help_corpus.VALID_MANUALS[0], help_corpus.TEST_MANUALS[0]
  pairs = [(manual, f"{manual} source {i}", f"{manual} Ziel {i}")
           for manual, count in (("train-a", 40), (valid, 30), ("train-b", 25), (test, 20)) for i in range(count)]
  monkeypatch.setattr(help_corpus.corpus_subsets, "HELD_OUT_PAIRS", 10)
  splits = help_corpus.subsets(pairs, 50, seed=3)
  assert splits == help_corpus.subsets(pairs, 50, seed=3) != help_corpus.subsets(pairs, 50, seed=4)
  everything = help_corpus.subsets(pairs, 0, seed=3)["train"]
  assert [len(splits[s]) for s in ("train", "valid", "test")] == [50, 10, 10]
  assert {p[0] for p in splits["train"]} == {"train-a", "train-b"}
  assert {p[0] for p in splits["valid"]} == {valid} and {p[0] for p in splits["test"]} == {test}
  assert everything == [p for p in pairs if p[0].startswith("train")]


def test_the_stored_copy_cuts_offline_into_the_named_sizes(help_corpus, tmp_path):
  pairs = help_corpus.read_stored()
  assert len(pairs) > 35_000 and len({p[1] for p in pairs}) == len(pairs)
  assert all(p[1] and p[2] and "\t" not in p[1] + p[2] for p in pairs)
  help_corpus.main(["--from_stored", "--pairs=5000", f"--out={tmp_path}"])
  lines = {f"{s}.{x}": (tmp_path / f"{s}.{x}").read_text(encoding="utf-8").split("\n")[:-1]
           for s in ("train", "valid", "test") for x in ("src", "tgt")}
  assert [len(lines[f"{s}.src"]) for s in ("train", "valid", "test")] == [5000, 1500, 1500]
  assert all(len(lines[f"{s}.src"]) == len(lines[f"{s}.tgt"]) for s in ("train", "valid", "test"))
  manual = {p[1]: p[0] for p in pairs}
  assert {manual[s] for s in lines["valid.src"]} == set(help_corpus.VALID_MANUALS)
  assert {manual[s] for s in lines["test.src"]} == set(help_corpus.TEST_MANUALS)
  assert not {manual[s] for s in lines["train.src"]} & (set(help_corpus.VALID_MANUALS) | set(help_corpus.TEST_MANUALS))
  assert "valid: 1,500 pairs" in (tmp_path / "SOURCE.txt").read_text(encoding="utf-8")
