"""Tests for memlab.models: real 7B shape, tiny models that train, deterministic init, mlp."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything imports Hugging Face libraries
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import time  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from memlab import data, models  # noqa: E402


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def tokenizer():
    return data.make_tokenizer("memlab-tests/no-such-tokenizer")


def test_llama2_7b_config_numbers():
    config = models.llama2_7b_config()
    assert (config.hidden_size, config.intermediate_size) == (4096, 11008)
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (32, 32, 32)
    assert (config.vocab_size, config.max_position_embeddings) == (32000, 4096)
    assert config.rms_norm_eps == 1e-5
    assert config.tie_word_embeddings is False


def test_llama2_7b_parameter_count_on_meta_device():
    start = time.perf_counter()
    model = models.build_model(models.llama2_7b_config(), device="meta", dtype=torch.float16)
    assert n_params(model) == 6_738_415_616 == models.LLAMA2_7B_PARAMETERS
    assert all(p.device.type == "meta" for p in model.parameters())
    assert next(model.parameters()).dtype == torch.float16
    assert time.perf_counter() - start < 10


def test_llama2_7b_count_matches_the_formula():
    """2*V*h (embedding + untied head) + L*(4h^2 + 3*h*f + 2h) + h (final norm)."""
    V, h, f, L = 32000, 4096, 11008, 32
    assert 2 * V * h + L * (4 * h * h + 3 * h * f + 2 * h) + h == models.LLAMA2_7B_PARAMETERS


def test_config_overrides():
    assert models.llama2_7b_config(num_hidden_layers=2).num_hidden_layers == 2
    assert models.tiny_llama_config(hidden_size=128).hidden_size == 128
    assert models.tiny_bert_config(num_hidden_layers=1).num_hidden_layers == 1


def test_tiny_configs_match_the_fallback_tokenizer(tokenizer):
    for config in (models.tiny_llama_config(), models.tiny_bert_config()):
        assert config.vocab_size == 2048 >= len(tokenizer)
        assert config.pad_token_id == tokenizer.pad_token_id


def test_tiny_llama_causal_lm_forward_backward(tokenizer):
    model = models.build_model(models.tiny_llama_config())
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config._attn_implementation == models.DEFAULT_ATTENTION
    batch = tokenizer(
        ["The story was gripping.", "It runs a little under two hours."], padding=True, return_tensors="pt"
    )
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    out = model(**batch, labels=labels)
    assert out.logits.shape == (*batch["input_ids"].shape, 2048)
    assert 6.0 < out.loss.item() < 9.0  # about ln(2048) = 7.6 at random init
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_tiny_llama_learns(tokenizer):
    """A few AdamW steps on one batch reduce the loss: the model trains."""
    model = models.build_model(models.tiny_llama_config())
    tokenized = data.tokenize_dataset(data.synthetic_lm_text(n=8), tokenizer, max_length=32)
    batch = tokenized[:8]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0


@pytest.mark.parametrize("config_fn", [models.tiny_llama_config, models.tiny_bert_config])
def test_seq_cls_with_padded_batch(tokenizer, config_fn):
    """Padding does not change a row's logits: the classifier reads the right token / respects the mask."""
    model = models.build_model(config_fn(), task="seq-cls", num_labels=2).eval()
    texts = ["Superb.", "The acting was dull and the ending was predictable. Avoid this one."]
    padded = tokenizer(texts, padding=True, return_tensors="pt")
    assert (padded["attention_mask"][0] == 0).any()
    out = model(**padded, labels=torch.tensor([1, 0]))
    assert out.logits.shape == (2, 2)
    out.loss.backward()
    alone = model(**tokenizer(texts[:1], return_tensors="pt"))
    torch.testing.assert_close(out.logits[:1], alone.logits, atol=1e-5, rtol=1e-4)


def test_seq_cls_sets_pad_token_id_without_touching_the_config():
    config = models.tiny_llama_config(pad_token_id=None)
    model = models.build_model(config, task="seq-cls", num_labels=3)
    assert model.config.pad_token_id == 0
    assert model.config.num_labels == 3
    assert config.pad_token_id is None


def test_build_model_is_deterministic_by_seed():
    config = models.tiny_llama_config()
    a, b = models.build_model(config, seed=0), models.build_model(config, seed=0)
    c = models.build_model(config, seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_build_model_dtype():
    model = models.build_model(models.tiny_llama_config(), dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_bert_tasks():
    assert (
        type(models.build_model(models.tiny_bert_config(), task="seq-cls")).__name__
        == "BertForSequenceClassification"
    )
    assert type(models.build_model(models.tiny_bert_config(), task="masked-lm")).__name__ == "BertForMaskedLM"
    with pytest.raises(ValueError, match="task must be one of"):
        models.build_model(models.tiny_bert_config(), task="translation")


def test_tiny_llama_under_fake_tensor_mode():
    """The default attention runs under FakeTensorMode on CPU (what memlab.estimate's simulation uses)."""
    with FakeTensorMode():
        model = models.build_model(models.tiny_llama_config(), task="seq-cls")
        ids = torch.randint(3, 2048, (2, 16))
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, 10:] = 0
        out = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1]))
        out.loss.backward()
        assert out.logits.shape == (2, 2)


def test_from_pretrained_or_random_falls_back_visibly(capsys):
    model = models.from_pretrained_or_random("memlab-tests/no-such-model", models.tiny_llama_config(), seed=0)
    assert "memlab.models: weights for memlab-tests/no-such-model not available" in capsys.readouterr().out
    reference = models.build_model(models.tiny_llama_config(), seed=0)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), reference.parameters(), strict=True))


def test_mlp():
    net = models.mlp([4, 8, 8, 2])
    assert [type(m).__name__ for m in net] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert n_params(net) == (4 * 8 + 8) + (8 * 8 + 8) + (8 * 2 + 2)
    assert net(torch.randn(3, 4)).shape == (3, 2)
    assert n_params(models.mlp([4, 2], bias=False)) == 8
    with pytest.raises(ValueError):
        models.mlp([4])


def test_the_shipped_tiny_base_is_pretrained_on_reviews():
    """memlab/assets/tiny-llama-reviews: loads like a Hub checkpoint, and its causal-LM loss on held-out synthetic
    reviews is far below a random model's of the same shape (it learned the text it is meant to be fine-tuned on)."""
    from memlab import data
    from memlab.models import build_model, load_tiny_base

    model, tokenizer = load_tiny_base()
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 128
    assert len(tokenizer) <= model.config.vocab_size and tokenizer.pad_token_id == 0
    texts = list(data.synthetic_imdb("test", n=32)["text"])
    enc = tokenizer(texts, max_length=128, truncation=True, padding="max_length", return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    random_model = build_model(model.config, seed=1)
    with torch.no_grad():
        trained = model(**enc, labels=labels).loss.item()
        untrained = random_model(**enc, labels=labels).loss.item()
    assert trained < 2.0 < untrained - 4, (trained, untrained)
    classifier, _ = load_tiny_base("seq-cls")
    assert classifier.config.pad_token_id == 0 and classifier.score.out_features == 2
