"""analysis.measures.scan_inputs.read_texts: a file is one text per non-blank line (split at newlines only), a
folder one text per regular lower-case ``*.txt`` file; what was skipped is named by kind, where each text came from
is kept, and a path that leads to nothing says what it is."""
import csv
import os

import pytest

from analysis.errors import InputError
from analysis.measures import scan, scan_inputs


def test_read_texts(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("first line\n\n   \nsecond line\n", encoding="utf-8")
    assert scan_inputs.read_texts(f) == ["first line", "second line"]
    folder = tmp_path / "many"
    folder.mkdir()
    (folder / "b.txt").write_text("text b\nstill b", encoding="utf-8")
    (folder / "a.txt").write_text("text a", encoding="utf-8")
    (folder / "c.md").write_text("ignored", encoding="utf-8")
    assert scan_inputs.read_texts(folder) == ["text a", "text b\nstill b"]
    with pytest.raises(InputError, match="not found"):
        scan_inputs.read_texts(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no text"):
        scan_inputs.read_texts(tmp_path / "empty.txt")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError, match="UTF-8"):
        scan_inputs.read_texts(tmp_path / "bin.txt")
    (tmp_path / "nul.txt").write_bytes(b"text\x00more")
    with pytest.raises(InputError, match="binary"):
        scan_inputs.read_texts(tmp_path / "nul.txt")
    (tmp_path / "big.txt").write_text("a line\n" * 100, encoding="utf-8")
    with pytest.raises(InputError, match="more than"):
        scan_inputs.read_texts(tmp_path / "big.txt", limit=200)
    os.mkfifo(tmp_path / "pipe")  # would block a plain open()
    with pytest.raises(InputError, match="named pipe"):
        scan_inputs.read_texts(tmp_path / "pipe")
    (tmp_path / "bom.txt").write_bytes("\ufefffirst\nsecond".encode("utf-8"))
    assert scan_inputs.read_texts(tmp_path / "bom.txt") == ["first", "second"]


def test_a_folder_names_what_it_skipped_by_kind(tiny_model, tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("text a", encoding="utf-8")
    os.symlink("loop.txt", folder / "loop.txt")  # a link to itself
    os.symlink("/dev/null", folder / "null.txt")
    for k in range(5):
        os.mkfifo(folder / f"pipe{k}.txt")
    (folder / "sub.txt").mkdir()
    os.symlink(tmp_path / "gone", folder / "gone.txt")
    texts = scan_inputs.read_texts(folder)
    assert texts == ["text a"]
    why = "(only regular .txt files are scanned)"
    assert texts.warnings == (
        f"Skipped 1 broken symbolic link in {folder}: gone.txt {why}.",
        f"Skipped 1 symbolic link loop in {folder}: loop.txt {why}.",
        f"Skipped 1 device in {folder}: null.txt {why}.",
        f"Skipped 5 named pipes in {folder}: pipe0.txt, pipe1.txt, pipe2.txt and 2 more {why}.",
        f"Skipped 1 folder in {folder}: sub.txt {why}.",
    )
    result = scan.scan_texts(tiny_model, texts)
    assert result.warnings == texts.warnings and result.summary()["warnings"] == list(texts.warnings)
    assert scan_inputs.read_texts(folder / "a.txt").warnings == ()
    (folder / "a.txt").unlink()
    with pytest.raises(InputError) as caught:
        scan_inputs.read_texts(folder)
    message = str(caught.value)
    assert message.startswith(f"{folder} has no regular .txt files to scan") and "5 named pipes" in message
    assert "\n" not in message


def test_a_file_is_split_at_newlines_only(tiny_model, tmp_path):
    inside = "one\x0btwo\x0cthree\x1cfour\x1dfive\x1esix\x85seven\u2028eight\u2029nine\rten"
    f = tmp_path / "t.txt"
    f.write_bytes(f"{inside}\r\nsecond\n\x0c\nthird".encode("utf-8"))
    assert scan_inputs.read_texts(f) == [inside, "second", "third"]  # a line of only \x0c is blank
    assert scan.scan_texts(tiny_model, scan_inputs.read_texts(f)).n_texts == 3


def test_a_folder_names_its_blank_files_and_its_names_in_another_case_of_txt(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("text a", encoding="utf-8")
    (folder / "blank.txt").write_bytes("\ufeff\n  \n\r\n".encode("utf-8"))  # a BOM and blank lines
    (folder / "empty.txt").write_bytes(b"")
    (folder / "B.TXT").write_text("text b", encoding="utf-8")
    (folder / "c.Txt").write_text("text c", encoding="utf-8")
    (folder / "notes.md").write_text("not a text", encoding="utf-8")
    texts = scan_inputs.read_texts(folder)
    assert texts == ["text a"] and texts.sources == ("a.txt",)
    assert texts.warnings == (
        f"Skipped 2 names in another case of .txt in {folder}: B.TXT, c.Txt (only names ending in .txt, in lower "
        "case, are scanned).",
        f"Skipped 2 blank files in {folder}: blank.txt, empty.txt (they hold no text).",
    )
    (folder / "a.txt").unlink()
    with pytest.raises(InputError) as caught:
        scan_inputs.read_texts(folder)
    assert str(caught.value) == f"{folder} holds no text to scan: its .txt files are blank (blank.txt, empty.txt)."
    for f in folder.glob("*.txt"):
        f.unlink()
    with pytest.raises(InputError) as caught:
        scan_inputs.read_texts(folder)
    assert str(caught.value) == (f"{folder} has no regular .txt files to scan (2 names in another case of .txt: "
                                 "B.TXT, c.Txt).")


def test_texts_csv_says_where_each_text_came_from(tiny_model, tmp_path):
    from analysis.export.writers import write_scan_texts_csv

    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "b.txt").write_text("text b\n\nmore of b", encoding="utf-8")
    (folder / "a.txt").write_text("text a", encoding="utf-8")
    lines = tmp_path / "lines.txt"
    lines.write_text("\ufeffone\n\n  \ntwo\r\nthree\n", encoding="utf-8")
    assert scan_inputs.read_texts(folder).sources == ("a.txt", "b.txt")
    assert scan_inputs.read_texts(lines).sources == ("line 1", "line 4", "line 5")  # blank lines keep their numbers
    sample = scan_inputs.read_texts(scan_inputs.SAMPLE_TEXTS)
    assert sample.sources[:2] == ("sample line 1", "sample line 2") and len(sample.sources) == len(sample)
    result = scan.scan_texts(tiny_model, scan_inputs.read_texts(lines), max_texts=2)
    assert result.sources == ("line 1", "line 4")
    with open(write_scan_texts_csv(result, tmp_path / "texts.csv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert [row[4:] for row in rows] == [["source", "content"], ["line 1", "one"], ["line 4", "two"]]


@pytest.mark.parametrize("link, said", [("loop", "is a symbolic link loop (following it never reaches a file)"),
                                        ("dangling", "is a broken symbolic link to {gone}, which does not exist")])
def test_texts_given_as_a_link_to_nothing_say_what_the_link_is(tmp_path, link, said):
    path, gone = tmp_path / "texts.txt", tmp_path / "gone.txt"
    os.symlink(path if link == "loop" else gone, path)
    with pytest.raises(InputError) as caught:
        scan_inputs.read_texts(path)
    assert str(caught.value) == f"Cannot read texts: {path} {said.format(gone=gone)}."
    with pytest.raises(InputError, match=r"^Texts not found: .* does not exist\.$"):
        scan_inputs.read_texts(tmp_path / "nothing.txt")
