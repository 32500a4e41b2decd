"""Tests for memlab.data: offline fallbacks, determinism, tokenizer, tokenized tensors."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before memlab.data imports anything from Hugging Face
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import socket  # noqa: E402
import time  # noqa: E402

import datasets  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from memlab import data, startup  # noqa: E402


@pytest.fixture
def hub_down(monkeypatch):
    """Make every Hub download fail, whatever the local cache holds, so the fallbacks always run."""

    def fail(*args, **kwargs):
        raise ConnectionError("no network in this test")

    monkeypatch.setattr(datasets, "load_dataset", fail)


# ---- offline switch --------------------------------------------------------------------------------


def test_offline_variables_are_set_in_tests():
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["HF_DATASETS_OFFLINE"] == "1"


def test_offline_check_is_skipped_when_already_offline(monkeypatch):
    def no_network_calls(*args, **kwargs):
        raise AssertionError("must not touch the network when HF_HUB_OFFLINE=1")

    monkeypatch.setattr(socket, "create_connection", no_network_calls)
    startup._hub_reachable.cache_clear()
    assert startup.ensure_offline_if_no_network() is True


def test_unreachable_hub_sets_both_variables(monkeypatch):
    def unreachable(*args, **kwargs):
        raise OSError("unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.setattr(socket, "create_connection", unreachable)
    startup._hub_reachable.cache_clear()
    try:
        assert startup.ensure_offline_if_no_network() is True
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert os.environ["HF_DATASETS_OFFLINE"] == "1"
    finally:
        startup._hub_reachable.cache_clear()


# ---- IMDB --------------------------------------------------------------------------------------------


def test_imdb_fallback_schema_and_balance(hub_down):
    ds = data.load_imdb("train", n=1000, seed=0)
    assert isinstance(ds, datasets.Dataset)
    assert ds.column_names == ["text", "label"]
    assert len(ds) == 1000
    labels = list(ds["label"])
    assert set(labels) == {0, 1}
    assert sum(labels) == 500  # exactly balanced
    assert ds.features["label"].names == ["neg", "pos"]  # same ClassLabel as stanfordnlp/imdb
    assert all(isinstance(t, str) and t for t in ds["text"])


def test_imdb_fallback_lengths_vary_like_reviews(hub_down):
    lengths = [len(t.split()) for t in data.load_imdb(n=500)["text"]]
    assert min(lengths) >= 20
    assert max(lengths) <= 230
    assert max(lengths) - min(lengths) > 100
    assert len(set(data.load_imdb(n=500)["text"])) > 490  # reviews are not copies of each other


def test_imdb_fallback_is_deterministic(hub_down):
    a = data.load_imdb(n=300, seed=0)
    b = data.load_imdb(n=300, seed=0)
    c = data.load_imdb(n=300, seed=1)
    assert list(a["text"]) == list(b["text"]) and list(a["label"]) == list(b["label"])
    assert list(a["text"]) != list(c["text"])
    # seeds shuffle one fixed corpus (as shuffling the real data would), so samples overlap
    overlap = set(data.load_imdb(n=2000, seed=0)["text"]) & set(data.load_imdb(n=2000, seed=1)["text"])
    assert 50 < len(overlap) < 400  # about 2000 * 2000 / 25000 = 160 expected


def test_imdb_train_and_test_splits_differ(hub_down):
    assert set(data.load_imdb("train", n=200)["text"]).isdisjoint(data.load_imdb("test", n=200)["text"])


def test_imdb_fallback_prints_one_line(hub_down, capsys):
    data.load_imdb(n=2000)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines == [
        "memlab.data: stanfordnlp/imdb not reachable (offline); using 2,000 synthetic reviews in IMDB's schema"
    ]


@pytest.fixture
def no_connection(monkeypatch):
    """Every attempt to open a network connection, recorded and refused: the fallbacks are fast because they never
    try the network, whatever the machine's load (a timing would fail for the load, not for a retry)."""
    import socket

    attempts = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError("no connection in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def test_imdb_fallback_never_tries_the_network(hub_down, no_connection):
    assert len(data.load_imdb(n=5000, seed=3)) == 5000
    assert no_connection == []


def test_load_imdb_offline_without_patching_never_tries_the_network(no_connection):
    """The real call: with the offline variables set, datasets fails (or reads its cache) without a connection."""
    ds = data.load_imdb(n=500)
    assert ds.column_names == ["text", "label"] and len(ds) == 500
    assert no_connection == []


def test_synthetic_reviews_are_learnable():
    """Sentiment words carry the label: counting them beats chance by far, but not perfectly."""
    ds = data.synthetic_imdb("train", n=1000)
    positive, negative = set(data._POSITIVE), set(data._NEGATIVE)

    def guess(text):
        words = text.lower().replace(".", " ").replace(",", " ").split()
        return int(sum(w in positive for w in words) >= sum(w in negative for w in words))

    accuracy = sum(guess(t) == y for t, y in zip(ds["text"], ds["label"], strict=True)) / len(ds)
    assert 0.7 < accuracy < 0.99


# ---- causal-LM text ----------------------------------------------------------------------------------


def test_lm_text_fallback(hub_down, capsys):
    ds = data.load_lm_text("train", n=200, seed=0)
    assert ds.column_names == ["text"] and len(ds) == 200
    assert all(t.strip() for t in ds["text"])  # no empty lines
    assert list(ds["text"]) == list(data.load_lm_text("train", n=200, seed=0)["text"])
    assert list(ds["text"]) != list(data.load_lm_text("train", n=200, seed=1)["text"])
    assert "memlab.data: Salesforce/wikitext not reachable" in capsys.readouterr().out


# ---- tokenizer ---------------------------------------------------------------------------------------


def test_make_tokenizer_fallback(capsys, no_connection):
    data._make_tokenizer_cached.cache_clear()
    tokenizer = data.make_tokenizer("memlab-tests/no-such-tokenizer")
    out = capsys.readouterr().out
    assert "memlab.data: tokenizer memlab-tests/no-such-tokenizer not reachable" in out
    assert no_connection == []  # the fallback came at once, not after retries
    assert tokenizer.pad_token is not None and tokenizer.pad_token_id == 0
    assert (tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert 500 < len(tokenizer) <= 2048  # fits tiny_llama_config's vocabulary


def test_make_tokenizer_is_cached():
    first = data.make_tokenizer("memlab-tests/no-such-tokenizer")
    start = time.perf_counter()
    second = data.make_tokenizer("memlab-tests/no-such-tokenizer")
    assert second is first
    assert time.perf_counter() - start < 0.01


def test_tokenizer_round_trip():
    tokenizer = data.make_tokenizer("memlab-tests/no-such-tokenizer")
    text = "The acting was brilliant, but the ending felt weak.<br /><br />7/10 – naïve fun!"
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == text  # byte-level: exact, even for unseen chars
    assert len(ids) < len(text.encode()) // 2  # it really merged bytes into subwords


def test_trained_tokenizer_has_requested_vocab_size():
    texts = list(data.synthetic_imdb(n=500)["text"])
    start = time.perf_counter()
    tokenizer = data.train_bpe_tokenizer(texts, vocab_size=512)
    assert time.perf_counter() - start < 3.0
    assert len(tokenizer) == 512


# ---- tokenize_dataset --------------------------------------------------------------------------------


def test_tokenize_classification_dataset(hub_down):
    tokenizer = data.make_tokenizer("memlab-tests/no-such-tokenizer")
    ds = data.load_imdb(n=32)
    tokenized = data.tokenize_dataset(ds, tokenizer, max_length=64)
    assert len(tokenized) == 32
    assert tokenized.tensors["input_ids"].shape == (32, 64)
    assert tokenized.tensors["attention_mask"].shape == (32, 64)
    assert torch.equal(tokenized.tensors["labels"], torch.tensor(list(ds["label"])))
    batch = next(iter(torch.utils.data.DataLoader(tokenized, batch_size=8)))
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].shape == (8, 64) and batch["labels"].shape == (8,)


def test_tokenize_lm_dataset_masks_padding(hub_down):
    tokenizer = data.make_tokenizer("memlab-tests/no-such-tokenizer")
    tokenized = data.tokenize_dataset(data.load_lm_text(n=8), tokenizer, max_length=256)
    ids, mask, labels = (tokenized.tensors[k] for k in ("input_ids", "attention_mask", "labels"))
    assert (mask == 0).any(), "some rows should be padded at max_length=256"
    assert torch.equal(labels[mask == 1], ids[mask == 1])
    assert (labels[mask == 0] == -100).all()
