"""Data and tokenizers for the course, with an offline fallback for every download.

Every loader first tries the real thing from the Hugging Face Hub and, on any failure, falls back at
once (no retries) to deterministic synthetic data in the same schema, printing one visible line that
says so. Memory questions do not depend on the data being real: a batch of 8 x 128 token ids costs
the same bytes whatever the words are.

- ``load_imdb``: the IMDB review set, https://huggingface.co/datasets/stanfordnlp/imdb
  (Maas et al. 2011, "Learning Word Vectors for Sentiment Analysis"), columns ``text`` and
  ``label`` (0 = negative, 1 = positive).
- ``load_lm_text``: WikiText-2 raw, https://huggingface.co/datasets/Salesforce/wikitext
  (Merity et al. 2016, "Pointer Sentinel Mixture Models"), column ``text``.
- ``make_tokenizer``: the model's own tokenizer, else a small byte-level BPE trained with the
  ``tokenizers`` library (https://huggingface.co/docs/tokenizers).

Offline mode: ``huggingface_hub`` and ``datasets`` read ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``
once, when they are imported (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
So importing memlab checks the network and sets them first (``memlab.startup.ensure_offline_if_no_network``, run
by ``memlab/__init__.py`` before this module is imported), and this module imports ``datasets`` and
``transformers`` lazily, inside the functions.
"""

from __future__ import annotations

import functools
import os
import random

import torch

from memlab.i18n import _

__all__ = [
    "load_imdb",
    "load_lm_text",
    "make_tokenizer",
    "tokenize_dataset",
    "TensorDictDataset",
]

IMDB_SPLIT_SIZES = {"train": 25_000, "test": 25_000}  # as in stanfordnlp/imdb
LM_SPLIT_SIZES = {"train": 10_000, "validation": 1_000, "test": 1_000}  # synthetic paragraphs


def _say_fallback(what: str, instead: str) -> None:
    """The one visible line every fallback prints."""
    reason = _("offline") if os.environ.get("HF_HUB_OFFLINE") == "1" else _("download failed")
    from memlab.notebook import fill

    message = _("memlab.data: {what} not reachable ({reason}); using {instead}")
    print(fill(message.format(what=what, reason=reason, instead=instead)), flush=True)


def _shuffle_select(ds, n: int | None, seed: int):
    """Shuffle a real ``datasets.Dataset`` with ``seed`` and keep the first ``n`` rows (all if None)."""
    ds = ds.shuffle(seed=seed)
    if n is not None:
        ds = ds.select(range(min(n, len(ds))))
    return ds


# --------------------------------------------------------------------------------------------------
# IMDB
# --------------------------------------------------------------------------------------------------


def load_imdb(split: str = "train", n: int | None = None, seed: int = 0):
    """IMDB movie reviews as a ``datasets.Dataset`` with columns ``text`` (str) and ``label`` (0 neg, 1 pos).

    Tries ``datasets.load_dataset("stanfordnlp/imdb", split=split)``, shuffles it with ``seed`` and keeps
    ``n`` rows. On any failure, returns synthetic reviews in the same schema instead (see
    ``synthetic_imdb``) and prints one line saying so.
    """
    try:
        import datasets

        ds = datasets.load_dataset("stanfordnlp/imdb", split=split)
        return _shuffle_select(ds, n, seed)
    except Exception:
        ds = synthetic_imdb(split=split, n=n, seed=seed)
        _say_fallback("stanfordnlp/imdb", _("{n:,} synthetic reviews in IMDB's schema").format(n=len(ds)))
        return ds


def synthetic_imdb(split: str = "train", n: int | None = None, seed: int = 0):
    """A deterministic stand-in for IMDB: a fixed corpus per split, shuffled by ``seed``, ``n`` rows kept.

    Review ``i`` of a split is generated from its own RNG, so any subset is cheap to build and always
    identical. Labels are exactly balanced (``n // 2`` of each, the odd one negative), then shuffled.
    Reviews are about 20-200 words of plausible prose whose sentiment words mostly, not always, agree with
    the label, so a small classifier can learn it without it being trivial.
    """
    import datasets

    if split not in IMDB_SPLIT_SIZES:
        raise ValueError(f"split must be one of {sorted(IMDB_SPLIT_SIZES)}, got {split!r}")
    size = IMDB_SPLIT_SIZES[split]
    n = size if n is None else min(n, size)
    indices = _balanced_indices(size, n, seed)
    texts = [_review(split, i) for i in indices]
    labels = [i % 2 for i in indices]  # even index -> negative, odd -> positive
    return datasets.Dataset.from_dict({"text": texts, "label": labels}, features=_imdb_features())


def _imdb_features():
    import datasets

    return datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
    )


def _balanced_indices(size: int, n: int, seed: int) -> list[int]:
    """``n`` corpus indices, half even (negative) and half odd (positive), in a seeded random order."""
    rng = random.Random(seed)
    negatives = list(range(0, size, 2))
    positives = list(range(1, size, 2))
    rng.shuffle(negatives)
    rng.shuffle(positives)
    chosen = negatives[: n - n // 2] + positives[: n // 2]
    rng.shuffle(chosen)
    return chosen


_TITLES = [
    "The Long Harbor", "Midnight Circus", "A Winter in Lisbon", "Iron Orchard", "The Glass Detective",
    "Paper Kingdoms", "Red River Crossing", "The Last Lighthouse", "Silent Frequencies", "Northbound",
    "The Velvet Heist", "Echoes of Saturn", "My Cousin's Wedding", "Dust and Thunder", "The Quiet Year",
]  # fmt: skip
_GENRES = ["drama", "comedy", "thriller", "western", "horror film", "romance", "sci-fi movie",
           "war film", "mystery", "musical", "documentary", "family film"]  # fmt: skip
_PEOPLE = ["a retired detective", "an estranged sister", "a young pilot", "a small-town teacher",
           "a struggling musician", "an aging boxer", "a family of farmers", "a lonely astronaut",
           "a con artist", "a war veteran", "a newspaper editor", "a group of teenagers"]  # fmt: skip
_PLOTS = ["tries to make sense of a strange inheritance", "returns home after twenty years",
          "gets caught up in a robbery gone wrong", "falls in love during a long summer",
          "hunts for a missing child", "has one night to save the family business",
          "uncovers a secret about the town", "travels across the country by train"]  # fmt: skip
_ASPECTS = ["acting", "script", "story", "direction", "cinematography", "soundtrack", "dialogue",
            "pacing", "ending", "cast", "editing", "lead performance", "special effects"]  # fmt: skip
_POSITIVE = ["brilliant", "wonderful", "superb", "moving", "excellent", "gripping", "beautiful",
             "charming", "outstanding", "delightful", "masterful", "hilarious", "touching", "great",
             "stunning", "memorable", "clever", "heartfelt", "fantastic", "engaging", "perfect"]  # fmt: skip
_NEGATIVE = ["terrible", "awful", "boring", "dull", "clumsy", "painful", "weak", "lifeless",
             "predictable", "dreadful", "horrible", "pointless", "bad", "forgettable",
             "tedious", "stupid", "mediocre", "annoying", "disappointing", "confusing", "poor"]  # fmt: skip
_INTENSIFIERS = ["", "", "really ", "truly ", "absolutely ", "genuinely ", "quite ", "simply "]
_POSITIVE_VERDICTS = ["I loved every minute of it.", "Highly recommended.", "A must-see.",
                      "I would happily watch it again.", "One of the best films of the year.",
                      "It deserves a much bigger audience."]  # fmt: skip
_NEGATIVE_VERDICTS = ["What a waste of time.", "Avoid this one.", "I wanted my money back.",
                      "I nearly walked out.", "One of the worst films I have seen.",
                      "I cannot recommend it to anyone."]  # fmt: skip
_ACTORS = ["Maria Keller", "James Holloway", "Ana Duarte", "Tom Brennan", "Yuki Sato", "Omar Haddad",
           "Claire Dubois", "Viktor Lenz", "Grace Okafor", "Daniel Reyes", "Ingrid Nilsson", "Sam Whitaker"]  # fmt: skip
_SETTINGS = ["a fishing village", "New York", "a boarding school", "the desert", "1970s Paris",
             "a space station", "a snowed-in hotel", "the Scottish highlands", "a border town", "Tokyo"]  # fmt: skip
_NEUTRAL = [
    "I saw it on a rainy Sunday afternoon.", "It runs a little under two hours.",
    "The film was shot on location in {place}.", "My friend had told me about it months ago.",
    "I went in knowing almost nothing about it.", "The trailer gives away more than it should.",
    "It is based on a novel I have not read.", "Most of the story takes place in {place}.",
    "There is a long flashback in the middle.", "{actor} plays {role}.",
    "{actor} also appears in a small part.", "It was released in {year}.",
    "The {aspect} reminded me of older films from the {decade}s.", "I watched it with my parents.",
    "The story is set in {place}.", "{actor} carries most of the scenes.",
    "There are a couple of songs in it.", "It was remade a few years later.",
]  # fmt: skip


def _review(split: str, index: int) -> str:
    """Review ``index`` of ``split``: even index negative, odd positive; about 20-200 words."""
    rng = random.Random(f"imdb/{split}/{index}")
    positive = index % 2 == 1
    agreement = rng.uniform(0.55, 0.9)  # how consistently this reviewer's opinions match the label
    target_words = int(min(200, 20 + rng.expovariate(1 / 90)))
    sentences = [_opening(rng)]
    words = len(sentences[0].split())
    while words < target_words:
        sentence = _review_sentence(rng, positive, agreement)
        sentences.append(sentence)
        words += len(sentence.split())
    if rng.random() < 0.4:
        sentences.append(_verdict(rng, positive))
    text = " ".join(sentences)
    if rng.random() < 0.3:  # real IMDB reviews often contain HTML line breaks
        middle = len(sentences) // 2
        text = " ".join(sentences[:middle]) + "<br /><br />" + " ".join(sentences[middle:])
    return text


def _opening(rng: random.Random) -> str:
    title, genre = rng.choice(_TITLES), rng.choice(_GENRES)
    return rng.choice(
        [
            f'"{title}" is a {genre} about {rng.choice(_PEOPLE)} who {rng.choice(_PLOTS)}.',
            f"I watched {title} last night.",
            f"{title} follows {rng.choice(_PEOPLE)} who {rng.choice(_PLOTS)}.",
            f"This {genre} came out a few years ago and I finally caught it.",
        ]
    )


def _review_sentence(rng: random.Random, positive: bool, agreement: float) -> str:
    """A neutral sentence, or an opinion that agrees with the label with probability ``agreement``."""
    if rng.random() < 0.4:
        return _neutral_sentence(rng)
    agrees = rng.random() < agreement
    adjectives = _POSITIVE if positive == agrees else _NEGATIVE
    adjective, aspect = rng.choice(adjectives), rng.choice(_ASPECTS)
    intensifier = rng.choice(_INTENSIFIERS)
    return rng.choice(
        [
            f"The {aspect} was {intensifier}{adjective}.",
            f"I thought the {aspect} was {intensifier}{adjective}, and the {rng.choice(_ASPECTS)} too.",
            f"What a {adjective} {rng.choice(_GENRES)}.",
            f"Honestly, the {aspect} is {intensifier}{adjective} from start to finish.",
            f"Even the {aspect} felt {adjective}.",
            f"Critics called it {adjective}, and I have to agree about the {aspect}.",
        ]
    )


def _neutral_sentence(rng: random.Random) -> str:
    year = rng.randint(1950, 2010)
    return rng.choice(_NEUTRAL).format(
        actor=rng.choice(_ACTORS), role=rng.choice(_PEOPLE), aspect=rng.choice(_ASPECTS),
        year=year, decade=year // 10 * 10, place=rng.choice(_SETTINGS),
    )  # fmt: skip


def _verdict(rng: random.Random, positive: bool) -> str:
    """A closing verdict (IMDB's labels come from the rating: <= 4 negative, >= 7 positive)."""
    verdict = rng.choice(_POSITIVE_VERDICTS if positive else _NEGATIVE_VERDICTS)
    if rng.random() < 0.5:
        return verdict
    return f"{verdict} {rng.randint(7, 10) if positive else rng.randint(1, 4)}/10."


# --------------------------------------------------------------------------------------------------
# Causal-LM text
# --------------------------------------------------------------------------------------------------


def load_lm_text(split: str = "train", n: int | None = None, seed: int = 0):
    """Plain English text for causal-LM training, as a ``datasets.Dataset`` with a ``text`` column.

    Tries WikiText-2 raw (``load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1", split=split)``),
    drops its empty lines, shuffles with ``seed`` and keeps ``n`` rows. On any failure, returns
    synthetic paragraphs in the same schema (see ``synthetic_lm_text``) and prints one line saying so.
    """
    try:
        import datasets

        ds = datasets.load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1", split=split)
        ds = ds.filter(lambda row: row["text"].strip() != "")
        return _shuffle_select(ds, n, seed)
    except Exception:
        ds = synthetic_lm_text(split=split, n=n, seed=seed)
        _say_fallback("Salesforce/wikitext", _("{n:,} synthetic English paragraphs").format(n=len(ds)))
        return ds


def synthetic_lm_text(split: str = "train", n: int | None = None, seed: int = 0):
    """Deterministic encyclopedia-style paragraphs: a fixed corpus per split, shuffled by ``seed``."""
    import datasets

    if split not in LM_SPLIT_SIZES:
        raise ValueError(f"split must be one of {sorted(LM_SPLIT_SIZES)}, got {split!r}")
    size = LM_SPLIT_SIZES[split]
    n = size if n is None else min(n, size)
    indices = list(range(size))
    random.Random(seed).shuffle(indices)
    return datasets.Dataset.from_dict({"text": [_paragraph(split, i) for i in indices[:n]]})


_PLACES = ["the river valley", "the northern coast", "the old capital", "the mountain towns",
           "the eastern provinces", "the island harbour", "the southern plains", "the city centre"]  # fmt: skip
_SUBJECTS = ["The railway", "The cathedral", "The university", "The bridge", "The festival",
             "The observatory", "The trading company", "The orchestra", "The canal", "The library"]  # fmt: skip
_EVENTS = ["was founded in {year}", "was rebuilt after a fire in {year}", "opened to the public in {year}",
           "was expanded during the {decade}s", "was first described in {year}",
           "became widely known in the {decade}s"]  # fmt: skip
_FACTS = [
    "It is located near {place} and is reached by a short road from the station.",
    "Its design was influenced by buildings in {place}.",
    "Local historians have written several books about its early years.",
    "During the war it was used as a storage depot and later restored.",
    "The site attracts a large number of visitors every summer.",
    "A small museum nearby displays photographs from {year}.",
    "Its name comes from an older word for the hill on which it stands.",
    "The original plans were drawn up by an engineer from {place}.",
    "Several of its members later became well known in {place}.",
    "The structure is built mostly of local stone and timber.",
    "In {year} a new wing was added to the east side.",
    "It remains one of the most important landmarks in {place}.",
]  # fmt: skip


def _paragraph(split: str, index: int) -> str:
    """Paragraph ``index`` of ``split``: 3-10 sentences of plain encyclopedic English; deterministic."""
    rng = random.Random(f"lm/{split}/{index}")
    year = rng.randint(1700, 1990)
    sentences = [f"{rng.choice(_SUBJECTS)} of {rng.choice(_PLACES)} "
                 + rng.choice(_EVENTS).format(year=year, decade=year // 10 * 10) + "."]  # fmt: skip
    for _sentence in range(rng.randint(2, 9)):
        fact = rng.choice(_FACTS)
        sentences.append(fact.format(place=rng.choice(_PLACES), year=rng.randint(year, 2000)))
    return " ".join(sentences)


# --------------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------------

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: the same ids as Llama-2's tokenizer


def make_tokenizer(name: str = "meta-llama/Llama-2-7b-hf", texts=None, vocab_size: int = 2048):
    """The tokenizer of model ``name`` if it can be loaded, else a small byte-level BPE trained on ``texts``.

    Either way ``pad_token`` is set (Llama has none; sequence classification needs ``pad_token_id``):
    it is ``<unk>``, id 0, as commonly done for Llama-2, so it matches ``config.pad_token_id = 0``.
    The fallback has ``<unk>``=0, ``<s>``=1 (prepended like Llama's), ``</s>``=2, ``vocab_size`` entries,
    and is trained on ``texts`` (default: the synthetic IMDB and LM texts). Results are cached per
    process, so repeated calls with the same arguments return the same object instantly.
    """
    return _make_tokenizer_cached(name, None if texts is None else tuple(texts), vocab_size)


@functools.lru_cache(maxsize=8)
def _make_tokenizer_cached(name: str, texts: tuple[str, ...] | None, vocab_size: int):
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name)
    except Exception:
        if texts is None:
            texts = tuple(synthetic_imdb("train", n=2_000)["text"]) + tuple(
                synthetic_lm_text("train", n=1_000)["text"]
            )
        tokenizer = train_bpe_tokenizer(texts, vocab_size=vocab_size)
        from memlab.notebook import fill

        print(
            fill(
                _(
                    "memlab.data: tokenizer {name} not reachable (offline or gated); using a byte-level BPE "
                    "with {tokens:,} tokens trained on {texts:,} local texts"
                ).format(name=name, tokens=len(tokenizer), texts=len(texts))
            ),
            flush=True,
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.unk_token or tokenizer.eos_token
    return tokenizer


def train_bpe_tokenizer(texts, vocab_size: int = 2048):
    """Train a byte-level BPE (GPT-2 style) on ``texts`` and wrap it in a ``PreTrainedTokenizerFast``.

    Source: the tokenizers quicktour, https://huggingface.co/docs/tokenizers/quicktour, and
    https://huggingface.co/docs/transformers/fast_tokenizers (wrapping a ``tokenizers.Tokenizer``).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<unk>",
        clean_up_tokenization_spaces=False,
    )


# --------------------------------------------------------------------------------------------------
# Tokenized tensors for a DataLoader
# --------------------------------------------------------------------------------------------------


class TensorDictDataset(torch.utils.data.Dataset):
    """Rows of a dict of equal-length tensors; a DataLoader batches them into the dict a HF model takes."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def __len__(self) -> int:
        return len(next(iter(self.tensors.values())))

    def __getitem__(self, i):
        return {key: value[i] for key, value in self.tensors.items()}


def tokenize_dataset(ds, tokenizer, max_length: int = 128, padding: str = "max_length") -> TensorDictDataset:
    """Tokenize ``ds["text"]`` into ``input_ids``, ``attention_mask`` and ``labels`` tensors.

    ``labels`` is ``ds["label"]`` when the dataset has one (classification), else a copy of
    ``input_ids`` with padding set to -100 so the causal-LM loss ignores it (the HF convention).
    Padding to a fixed ``max_length`` by default keeps every batch the same shape, so its memory is
    the same every step. Use ``DataLoader(tokenize_dataset(...), batch_size=8)`` and ``model(**batch)``.
    """
    encoded = tokenizer(
        list(ds["text"]), max_length=max_length, truncation=True, padding=padding, return_tensors="pt"
    )
    input_ids, attention_mask = encoded["input_ids"], encoded["attention_mask"]
    if "label" in ds.column_names:
        labels = torch.tensor(list(ds["label"]), dtype=torch.long)
    else:
        labels = input_ids.masked_fill(attention_mask == 0, -100)
    return TensorDictDataset({"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels})
