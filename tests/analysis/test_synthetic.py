"""The tiny models the tests and the baseline recordings build are the same in every process."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VOCAB = ("import hashlib, json; from analysis.model.synthetic import tiny_wordpiece_tokenizer; "
         "print(hashlib.sha256(json.dumps(sorted(tiny_wordpiece_tokenizer().get_vocab().items())).encode()).hexdigest())")


@pytest.mark.slow
def test_the_wordpiece_tokenizer_numbers_its_pieces_alike_in_every_process():
    """The trainer numbered the '##' pieces in hash-map order: 41 of 300 ids moved between two processes, so a
    tiny BERT built twice was two models. Two interpreters with different hash seeds now agree."""
    digests = {subprocess.run([sys.executable, "-c", VOCAB], cwd=ROOT, capture_output=True, text=True, check=True,
                              env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}).stdout for seed in ("1", "2", "3")}
    assert len(digests) == 1
