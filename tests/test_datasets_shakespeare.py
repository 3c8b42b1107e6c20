"""fpsim.datasets.shakespeare_chars: the shipped text is the char-rnn file byte for byte, and
the split and vocabulary are nanoGPT's shakespeare_char ones (its prepare.py prints vocab 65,
1,003,854 train and 111,540 val tokens)."""

from __future__ import annotations

import hashlib
import lzma
from importlib import resources

import numpy as np

from fpsim.datasets import shakespeare_chars

SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"  # fpsim/data/README


def _text() -> str:
    raw = lzma.decompress(resources.files("fpsim").joinpath(
        "data/tinyshakespeare.txt.xz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == SHA256
    return raw.decode("ascii")


def test_split_and_vocabulary_are_nanogpts():
    text = _text()
    train, val, vocab = shakespeare_chars()
    chars = sorted(set(text))  # prepare.py: chars = sorted(list(set(data)))
    assert vocab == "".join(chars) and len(vocab) == 65
    stoi = {c: i for i, c in enumerate(chars)}
    n = len(text)
    assert (train.size, val.size) == (1003854, 111540) == (int(n * 0.9), n - int(n * 0.9))
    assert train.dtype == val.dtype == np.uint8
    # the ids decode to the text, and match a per-character encoding on samples
    assert "".join(np.array(list(vocab))[np.concatenate([train, val])]) == text
    for start in (0, 500_000, n - 100):
        assert [stoi[c] for c in text[start:start + 100]] == \
            np.concatenate([train, val])[start:start + 100].tolist()


def test_each_call_returns_fresh_arrays():
    a, _, _ = shakespeare_chars()
    a[:] = 0
    b, _, _ = shakespeare_chars()
    assert b[:5].tolist() != [0] * 5
