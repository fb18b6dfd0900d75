"""What a scan says (``analysis.measures.scan``, ``scan_inputs``): which texts it cut, a byte limit naming the
folder or the file that passed it, and the text that has no tokens."""
import pytest

from analysis.errors import InputError
from analysis.measures import scan, scan_inputs

SHORT = "The cat sat on the mat because it was tired. The cat sat on the mat."
LONG = "The cat sat on the mat because it was tired. " * 40  # far more than the tiny model's 64 positions


@pytest.mark.slow
def test_scan_result_names_the_texts_it_cut(tiny_model):
    result = scan.scan_texts(tiny_model, [SHORT, LONG, LONG + " again"], batch_size=3, bos=True)
    assert result.truncated == (False, True, True)
    warning = result.truncation_warning()
    assert warning.startswith("2 of 3 texts were longer than the 64 tokens")
    assert scan.scan_texts(tiny_model, [SHORT], bos=True).truncation_warning() is None


def test_scan_folder_limit_names_the_folder_not_a_file(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("a" * 600, encoding="utf-8")
    (folder / "b.txt").write_text("b" * 600, encoding="utf-8")  # each under the limit, together over it
    with pytest.raises(InputError) as caught:
        scan_inputs.read_texts(folder, limit=1000)
    message = str(caught.value)
    assert message.startswith(f"The .txt files in {folder} hold more than 1,000 bytes of text in all")
    assert "b.txt" not in message
    assert scan_inputs.read_texts(folder, limit=1200) == ["a" * 600, "b" * 600]  # exactly at the limit: read
    (folder / "c.txt").write_text("", encoding="utf-8")  # an empty file after the limit is reached is fine
    assert scan_inputs.read_texts(folder, limit=1200) == ["a" * 600, "b" * 600]


def test_scan_file_limit_names_the_file(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text("a line\n" * 100, encoding="utf-8")
    with pytest.raises(InputError, match=r"big.txt holds more than 200 bytes of text; scan a part of it"):
        scan_inputs.read_texts(f, limit=200)


def test_scan_names_the_text_that_has_no_tokens(family_run):
    loaded, _ = family_run("bert")
    with pytest.raises(InputError) as caught:
        scan.scan_texts(loaded, ["The cat sat", "\u200b"], bos=False)
    assert str(caught.value).startswith("Text 2: ") and "no tokens" in str(caught.value)
