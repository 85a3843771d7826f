"""SQuAD v1.1 for the BiDAF references, framework-free: what the PyTorch and TensorFlow recipes share.

- reading the official JSON (or the harness's answer-free dev copy, which has no "answers");
- tokenizing with character offsets, offline: spaCy's blank English tokenizer (rules only, no
  downloaded model), white-space tokens dropped, so an answer maps back to the exact context text;
  every context's and every question's tokens are then cut as the seed cuts them (at dashes, slashes,
  quotes, the degree sign: SEED_SPLIT), so that an answer inside `1939–1945` or `mid-1990s` is a
  span of tokens and a question's `1939–1945` is the same three tokens as the context's;
- GloVe's text format, read for the words a role needs (frozen vectors are not a learned weight:
  each role looks its own words up in the same file);
- the seed's vocabulary (dawn-bench-models tensorflow/SQuAD: squad/prepro.py:157-212,
  basic/read_data.py:181-197): counts in which a context's tokens count once per question on it,
  the characters kept by count, and the frequent words GloVe lacks, which get trained vectors;
- padded numpy batches of word and character ids, and the span decoder (best start x end
  probability, start <= end, as the seed's get_best_span; optionally within a maximum length).

Everything here is numpy; a reference turns the batches into its framework's tensors.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PAD, OOV = 0, 1            # reserved ids in both the word and the character tables


# --- reading ----------------------------------------------------------------------------------

def view_file(data_root: str | Path, dataset: str, name: str) -> Path:
    """A file of the role's view (data_root/<dataset dir>/<name>), or the harness's one-line
    DatasetError with the command that fetches it."""
    from harness import datasets

    entry = datasets.manifest(dataset)
    path = Path(data_root) / entry["dir"] / name
    if not path.is_file():
        raise datasets.DatasetError(f"{name} of dataset {dataset!r} not found in {path.parent}; "
                                    f"run: {entry['fetch_command']}")
    return path


@dataclass
class Paragraph:
    context: str
    tokens: list[str]
    spans: list[tuple[int, int]]       # (start, end) character offsets of each token in `context`


@dataclass
class Question:
    id: str
    paragraph: int                     # index into the paragraphs list
    text: str
    tokens: list[str]
    answers: list[tuple[int, str]] = field(default_factory=list)   # (answer_start, text); none in the dev copy
    y1: int = -1                       # first and last context token of the first answer (training)
    y2: int = -1


_NLP = None


def _tokenizer():
    global _NLP
    if _NLP is None:
        import spacy

        _NLP = spacy.blank("en")       # tokenizer rules only: nothing to download
    return _NLP.tokenizer


# The characters at which the seed cuts its tokens, each kept as a token of its own: the set of
# process_tokens (dawn-bench-models tensorflow/SQuAD squad/utils.py:71-80, from allenai/bi-att-flow:
# hyphen, minus sign, em and en dash, slash, tilde, straight and curly quotes, degree sign), which
# squad/prepro.py applies to every context (:149-150) and to every question (:169-170) alike. spaCy's
# blank English tokenizer keeps `1939–1945`, `2–1`, `5,000–6,000`, `mid-1990s`, `and/or`, `1/2`
# whole: an answer inside one could not be produced, and a question's whole token would miss the
# pieces its context holds (and count as a word of its own in the seed's vocabulary counts).
SEED_SPLIT = "-\u2212\u2014\u2013/~\"'\u201c\u2019\u201d\u2018\u00b0"
_SEED_PIECES = re.compile(f"[{re.escape(SEED_SPLIT)}]|[^{re.escape(SEED_SPLIT)}]+")


def seed_split(tokens: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """(token, start, end) tokens cut at every SEED_SPLIT character, the character a token of its own,
    offsets kept. The seed's re.split also leaves empty strings (before a leading quote, ...): they hold
    no character and are not kept."""
    out = []
    for text, start, _ in tokens:
        out += [(m.group(), start + m.start(), start + m.end()) for m in _SEED_PIECES.finditer(text)]
    return out


def tokenize_many(texts: Iterable[str], split: bool = False) -> Iterator[list[tuple[str, int, int]]]:
    """(token, start, end) of every non-space token of each text; `text[start:end] == token`. With
    `split`, the tokens cut as the seed cuts a context's and a question's (seed_split)."""
    for doc in _tokenizer().pipe(texts, batch_size=256):
        tokens = [(t.text, t.idx, t.idx + len(t.text)) for t in doc if not t.is_space and t.text.strip()]
        yield seed_split(tokens) if split else tokens


def tokenize(text: str, split: bool = False) -> list[tuple[str, int, int]]:
    return next(tokenize_many([text], split))


def aligned(spans: list[tuple[int, int]], start: int, text: str) -> bool:
    """Whether the answer's characters [start, start + len(text)) begin at a token's start and end at
    a token's end: else no span of tokens is the answer, and predicting it scores less than 1."""
    end = start + len(text)
    return any(s == start for s, _ in spans) and any(e == end for _, e in spans)


def answer_tokens(spans: list[tuple[int, int]], start: int, text: str) -> tuple[int, int]:
    """First and last token covering the characters [start, start + len(text)); (-1, -1) when the
    answer covers no token (it lies in white space, or past the context)."""
    end = start + len(text)
    covered = [i for i, (s, e) in enumerate(spans) if s < end and e > start]
    return (covered[0], covered[-1]) if covered else (-1, -1)


def read_squad(path: str | Path) -> tuple[list[Paragraph], list[Question]]:
    """The paragraphs and questions of an official SQuAD v1.1 file (or its answer-free copy), in
    file order: the task's canonical order."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    contexts, raw = [], []
    for article in data:
        for paragraph in article["paragraphs"]:
            contexts.append(paragraph["context"])
            for qa in paragraph["qas"]:
                raw.append((len(contexts) - 1, qa))
    paragraphs = [Paragraph(c, [t for t, _, _ in toks], [(s, e) for _, s, e in toks])
                  for c, toks in zip(contexts, tokenize_many(contexts, split=True))]
    questions = []
    for (p, qa), toks in zip(raw, tokenize_many((qa["question"] for _, qa in raw), split=True)):
        answers = [(int(a["answer_start"]), a["text"]) for a in qa.get("answers", [])]
        y1, y2 = answer_tokens(paragraphs[p].spans, *answers[0]) if answers else (-1, -1)
        questions.append(Question(qa["id"], p, qa["question"], [t for t, _, _ in toks], answers, y1, y2))
    return paragraphs, questions


def to_wire(paragraph: Paragraph, question: Question) -> dict:
    """One dev question as JSON, as it travels with its timed request to the server (which holds no
    question): the question and its context, with their tokens."""
    return {"id": question.id, "question": question.text, "tokens": question.tokens,
            "context": paragraph.context, "context_tokens": paragraph.tokens, "spans": paragraph.spans}


def from_wire(example: dict) -> tuple[Paragraph, Question]:
    """What to_wire sent: the question's paragraph, and the question (its paragraph index 0)."""
    paragraph = Paragraph(example["context"], list(example["context_tokens"]), [tuple(s) for s in example["spans"]])
    return paragraph, Question(example["id"], 0, example["question"], list(example["tokens"]))


def answer_text(paragraph: Paragraph, start: int, end: int) -> str:
    """The exact context text from token `start` to token `end`, both included."""
    return paragraph.context[paragraph.spans[start][0]:paragraph.spans[end][1]]


# --- vocabularies ------------------------------------------------------------------------------

def glove_candidates(word: str) -> tuple[str, ...]:
    # BiDAF's lookup: GloVe 6B is lower case, 840B is cased.
    return (word, word.lower(), word.capitalize(), word.upper())


def read_glove(path: str | Path, words: Iterable[str] | None, dim: int) -> tuple[dict[str, int], np.ndarray]:
    """A word table for `words` from a GloVe text file: ({word: id}, vectors (n, dim) float32).
    Ids 0 and 1 are padding and out-of-vocabulary, both zero vectors; a word is in the table when
    GloVe has it in one of BiDAF's casings. Lines split from the right: 840B tokens hold spaces.
    `words` None: every GloVe token as GloVe spells it (the server of timed requests, which knows no
    question before it is asked; its Encoder matches the casings, `any_casing`)."""
    if words is None:
        return _whole_glove(path, dim)
    wanted: dict[str, list[str]] = {}
    for word in set(words):
        for candidate in glove_candidates(word):
            wanted.setdefault(candidate, []).append(word)
    found: dict[str, np.ndarray] = {}
    rank: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").rsplit(" ", dim)
            token = parts[0]
            if token not in wanted:
                continue
            vector = None
            for word in wanted[token]:
                order = glove_candidates(word).index(token)
                if order < rank.get(word, 99):
                    vector = vector if vector is not None else np.asarray(parts[1:], dtype=np.float32)
                    found[word], rank[word] = vector, order
    index = {word: i + 2 for i, word in enumerate(sorted(found))}
    vectors = np.zeros((len(index) + 2, dim), dtype=np.float32)
    for word, i in index.items():
        vectors[i] = found[word]
    return index, vectors


def _whole_glove(path: str | Path, dim: int) -> tuple[dict[str, int], np.ndarray]:
    """Every token of a GloVe text file (its first line where it has several, as read_glove) -> id."""
    found: dict[str, np.ndarray] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").rsplit(" ", dim)
            if parts[0] not in found:
                found[parts[0]] = np.asarray(parts[1:], dtype=np.float32)
    index = {word: i + 2 for i, word in enumerate(sorted(found))}
    vectors = np.zeros((len(index) + 2, dim), dtype=np.float32)
    for word, i in index.items():
        vectors[i] = found[word]
    return index, vectors


def seed_counts(paragraphs: list[Paragraph], questions: list[Question]) -> tuple[Counter, Counter]:
    """(lower-cased word counts, character counts) as the seed counts them (squad/prepro.py:157-162,
    208-212, with lower_word = True): every token of a context once per question asked on it, every
    question token once; characters of the tokens likewise. Weighting by questions counts a word as
    often as the model reads it in an epoch."""
    asked = Counter(q.paragraph for q in questions)
    words, chars = Counter(), Counter()
    for i, paragraph in enumerate(paragraphs):
        if asked[i]:
            for token, n in Counter(paragraph.tokens).items():
                words[token.lower()] += n * asked[i]
                for c in token:
                    chars[c] += n * asked[i]
    for question in questions:
        for token in question.tokens:
            words[token.lower()] += 1
            chars.update(token)
    return words, chars


def char_table(char_counts: Counter, min_count: int) -> list[str]:
    """The characters counted at least `min_count` times (seed_counts), most frequent first: ids 2, 3, ..."""
    return [c for c, n in sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0]))
            if n >= min_count and not c.isspace()]


def learned_words(word_counts: Counter, glove_index: dict[str, int], min_count: int) -> list[str]:
    """The lower-case words counted at least `min_count` times (seed_counts) that GloVe lacks: each
    gets a trained vector, as in the seed (basic/read_data.py:190-194, finetune False: words with
    count > word_count_th and not in GloVe). A word is in GloVe when some data word of the same
    lower case is in `glove_index` (read_glove's table): for the lower-case GloVe 6B, exactly the
    seed's test."""
    known = {word.lower() for word in glove_index}
    return sorted(w for w, n in word_counts.items() if n >= min_count and w not in known)


def data_words(paragraphs: list[Paragraph], questions: list[Question]) -> set[str]:
    return {t for p in paragraphs for t in p.tokens} | {t for q in questions for t in q.tokens}


# --- batches -----------------------------------------------------------------------------------

@dataclass
class Encoder:
    """Tokens to word and character ids. Word ids: 0 padding, 1 unknown, 2 .. K+1 the K learned
    words (learned_words), then the GloVe words (read_glove's ids shifted by K), so a network keeps
    one trained table for ids below K + 2 and the frozen GloVe rows for the rest. A token is looked
    up as the seed's _get_word (basic/model.py:426-436): its lower case among the learned words
    first, then GloVe (read_glove matched its casings), else unknown.

    Each token list's ids are remembered: an epoch reads a
    paragraph about five times (once per question), and its character ids are a Python loop (35 ms
    a batch of 60 on a 2-core CPU uncached, 0.6 ms cached). Keyed by the list's identity; the cache
    holds the list, so the identity stays its own while the entry lives."""
    words: dict[str, int]
    chars: dict[str, int]
    max_word_chars: int
    learned: dict[str, int] = field(default_factory=dict)
    any_casing: bool = False        # `words` is the whole GloVe table: match BiDAF's casings as read_glove does
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, glove_index: dict[str, int], char_list: list[str], max_word_chars: int,
              learned: list[str] = (), any_casing: bool = False) -> Encoder:
        k = len(learned)
        return cls({w: i + k for w, i in glove_index.items()}, {c: i + 2 for i, c in enumerate(char_list)},
                   max_word_chars, {w: i + 2 for i, w in enumerate(learned)}, any_casing)

    def word_id(self, token: str) -> int:
        found = self.learned.get(token.lower()) or self.words.get(token)
        if found is None and self.any_casing:
            found = next((self.words[c] for c in glove_candidates(token) if c in self.words), None)
        return found or OOV

    def _cached(self, kind: str, tokens: list[str], encode) -> np.ndarray:
        key = (kind, id(tokens))
        if key not in self._cache:
            self._cache[key] = (tokens, encode(tokens))
        return self._cache[key][1]

    def word_ids(self, tokens: list[str]) -> np.ndarray:
        return self._cached("w", tokens, lambda t: np.array([self.word_id(w) for w in t], dtype=np.int64))

    def char_ids(self, tokens: list[str]) -> np.ndarray:
        return self._cached("c", tokens, self._char_ids)

    def _char_ids(self, tokens: list[str]) -> np.ndarray:
        out = np.zeros((len(tokens), self.max_word_chars), dtype=np.int64)
        for i, token in enumerate(tokens):
            ids = [self.chars.get(c, OOV) for c in token[: self.max_word_chars]]
            out[i, : len(ids)] = ids
        return out


def _pad(rows: list[np.ndarray], length: int) -> np.ndarray:
    out = np.zeros((len(rows), length) + rows[0].shape[1:], dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row[:length]
    return out


def make_batch(encoder: Encoder, paragraphs: list[Paragraph], questions: list[Question]) -> dict[str, np.ndarray]:
    """Padded ids of a batch: cw (B, Lc), cc (B, Lc, W), qw (B, Lq), qc (B, Lq, W), and the answer
    token positions y1, y2 (B,) (-1 where a question has none). Padding is id 0 everywhere."""
    contexts = [paragraphs[q.paragraph].tokens for q in questions]
    lc = max(1, max(len(c) for c in contexts))
    lq = max(1, max(len(q.tokens) for q in questions))
    return {
        "cw": _pad([encoder.word_ids(c) for c in contexts], lc),
        "cc": _pad([encoder.char_ids(c) if c else np.zeros((0, encoder.max_word_chars), np.int64) for c in contexts], lc),
        "qw": _pad([encoder.word_ids(q.tokens) for q in questions], lq),
        "qc": _pad([encoder.char_ids(q.tokens) if q.tokens else np.zeros((0, encoder.max_word_chars), np.int64)
                    for q in questions], lq),
        "y1": np.array([q.y1 for q in questions], dtype=np.int64),
        "y2": np.array([q.y2 for q in questions], dtype=np.int64),
    }


def trainable(paragraphs: list[Paragraph], questions: list[Question], max_context: int, max_question: int) -> list[Question]:
    """The training questions BiDAF learns from: an answer that maps to tokens, a context and a
    question within the length limits (the seed dropped the others too)."""
    return [q for q in questions if 0 <= q.y1 <= q.y2 < max_context
            and len(paragraphs[q.paragraph].tokens) <= max_context and 0 < len(q.tokens) <= max_question]


def batch_order(paragraphs: list[Paragraph], questions: list[Question], batch_size: int,
                rng: np.random.Generator | None) -> list[list[int]]:
    """Question indices in batches. With `rng` (training): shuffled, then sorted by context length
    within windows of 100 batches so a batch pads little, then the batches shuffled. Without: file
    order (evaluation keeps the canonical order)."""
    n = len(questions)
    if rng is None:
        return [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]
    order = rng.permutation(n)
    window = batch_size * 100
    chunks = []
    for i in range(0, n, window):
        part = sorted(order[i:i + window], key=lambda k: len(paragraphs[questions[k].paragraph].tokens))
        chunks += [part[j:j + batch_size] for j in range(0, len(part), batch_size)]
    return [[int(k) for k in chunks[i]] for i in rng.permutation(len(chunks))]


def synthetic_batch(batch_size: int, context_len: int, question_len: int, word_chars: int, vocab: int,
                    chars: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A SQuAD-shaped batch of random ids, for benchmarks (make bench-gpu)."""
    y1 = rng.integers(0, context_len - 3, batch_size)
    return {"cw": rng.integers(2, vocab, (batch_size, context_len)),
            "cc": rng.integers(2, chars, (batch_size, context_len, word_chars)),
            "qw": rng.integers(2, vocab, (batch_size, question_len)),
            "qc": rng.integers(2, chars, (batch_size, question_len, word_chars)),
            "y1": y1, "y2": y1 + rng.integers(0, 3, batch_size)}


# --- decoding ----------------------------------------------------------------------------------

def best_spans(p1: np.ndarray, p2: np.ndarray, lengths: np.ndarray,
               max_span: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the (start, end) with start <= end, both within the row's length, that
    maximizes p1[start] * p2[end]; with `max_span`, also end < start + max_span. p1, p2: (B, L)
    probabilities (or any positive scores); lengths: (B,) context lengths.

    Without a cap it is the seed's get_best_span (squad/utils.py:83-100), vectorized: for each end,
    the best start up to it (a running maximum), then the best end; ties go to the earliest end,
    and for it to the earliest start, as the seed's strict comparisons do. With a cap, ties go to
    the earliest start, then the shortest span."""
    p1, p2 = np.asarray(p1, dtype=np.float64), np.asarray(p2, dtype=np.float64)
    batch, length = p1.shape
    valid = np.arange(length)[None, :] < np.asarray(lengths)[:, None]
    p1, p2 = np.where(valid, p1, -1.0), np.where(valid, p2, -1.0)
    rows = np.arange(batch)
    if not max_span:
        best_start = np.maximum.accumulate(p1, axis=1)
        # The earliest start of each running maximum: the position where the maximum last grew.
        grew = np.concatenate([np.ones((batch, 1), bool), p1[:, 1:] > best_start[:, :-1]], axis=1)
        start_at = np.maximum.accumulate(np.where(grew, np.arange(length)[None, :], 0), axis=1)
        score = np.where(valid, best_start * p2, -np.inf)
        end = score.argmax(axis=1)
        return start_at[rows, end], end
    best = np.full(batch, -np.inf)
    start = np.zeros(batch, dtype=np.int64)
    end = np.zeros(batch, dtype=np.int64)
    for k in range(min(max_span, length)):
        score = np.where((p1[:, : length - k] >= 0) & (p2[:, k:] >= 0), p1[:, : length - k] * p2[:, k:], -np.inf)
        i = score.argmax(axis=1)
        value = score[rows, i]
        better = (value > best) | ((value == best) & (i < start))
        best = np.where(better, value, best)
        start = np.where(better, i, start)
        end = np.where(better, i + k, end)
    return start, end
