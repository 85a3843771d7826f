"""A tiny SQuAD v1.1 and GloVe in the exact official on-disk formats, for tests.

SQuAD v1.1 (``train-v1.1.json``, ``dev-v1.1.json``) is one JSON object: ``{"data": [article, ...],
"version": "1.1"}``; an article is ``{"title", "paragraphs": [{"context", "qas": [{"answers":
[{"answer_start", "text"}], "question", "id"}]}]}``. ``answer_start`` is a character offset into
the context (Python string index). Train questions have one answer, dev questions usually three
(crowd workers), some repeated. Ids are 24 hex digits.

GloVe is a text file of one token and ``dim`` numbers per line, separated by single spaces, in a
zip archive (``glove.6B.zip`` holds ``glove.6B.{50,100,200,300}d.txt``; ``glove.840B.300d.zip``
one file, whose tokens may hold spaces). The 6B tokens are lower case.

The paragraphs are built from templates, so a small model learns them: the answer to "Where was X
born?" always follows "born in". The contexts carry what the character offsets must survive:
unicode (accents, a non-breaking space, curly quotes), punctuation against words and runs of
white space.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np

from tests.cifar10_fixture import _toml_value, builtin_entry

PEOPLE = ["Marie Curie", "Niels Bohr", "Ada Lovelace", "Alan Turing", "Émilie du Châtelet", "Srinivasa Ramanujan",
          "Rosalind Franklin", "Enrico Fermi", "Lise Meitner", "Kurt Gödel", "Hedy Lamarr", "Grace Hopper"]
CITIES = ["Warsaw", "Copenhagen", "London", "Paris", "Kumbakonam", "Rome", "Vienna", "Brno", "New York",
          "Zürich", "São Paulo", "Kyoto"]
FIELDS = ["physics", "chemistry", "mathematics", "computing", "biology", "logic"]
PRIZES = ["the Nobel Prize", "the Copley Medal", "the Turing Award", "the Fields Medal"]
# Words of the texts that the fixture's GloVe lacks, as GloVe lacks some of SQuAD's: "born" is in
# every context and in two of its four questions, so the BiDAF references train a vector for it
# (common.squad.learned_words) and a predictor must read it from the saved model.
NOT_IN_GLOVE = ("born",)


def _qid(*parts) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode(), usedforsecurity=False).hexdigest()[:24]


def _paragraph(rng: np.random.Generator, article: int, index: int, answers_per_question: int) -> dict:
    person = PEOPLE[(article * 5 + index) % len(PEOPLE)]
    city = CITIES[int(rng.integers(len(CITIES)))]
    year = int(rng.integers(1800, 1950))
    field = FIELDS[int(rng.integers(len(FIELDS)))]
    prize = PRIZES[int(rng.integers(len(PRIZES)))]
    # Extra spaces, a non-breaking space, curly quotes and punctuation glued to the answers.
    context = (f"{person} was born in {city} in {year}.  {person.split()[0]}\u00a0studied {field} "
               f"(“the queen of sciences”), and later won {prize}; colleagues called the work "
               f"\u201cremarkable\u201d.\n The family moved to {CITIES[(index + 3) % len(CITIES)]} afterwards.")
    qas = []
    for kind, question, answer in (
        ("where", f"Where was {person} born?", city),
        ("when", f"In which year was {person} born?", str(year)),
        ("what", f"What did {person.split()[0]} study?", field),
        ("prize", f"Which award did {person} win?", prize),
    ):
        start = context.index(answer)
        answers = [{"answer_start": start, "text": answer}]
        if answers_per_question > 1:   # dev: the crowd's variants, a longer span and a repeat
            longer = f"{answer}." if kind == "when" else (f"in {answer}" if kind == "where" else answer)
            answers += [{"answer_start": context.index(longer), "text": longer}, answers[0]][: answers_per_question - 1]
        qas.append({"answers": answers, "question": question, "id": _qid(article, index, kind, answers_per_question)})
    return {"context": context, "qas": qas}


def squad_json(articles: int, paragraphs: int, answers_per_question: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    data = [{"title": f"Scientist_{a}", "paragraphs": [_paragraph(rng, a + seed * 100, p, answers_per_question)
                                                       for p in range(paragraphs)]} for a in range(articles)]
    return {"data": data, "version": "1.1"}


def dump(dataset: dict) -> bytes:
    """As the official files are written: compact separators, non-ASCII escaped."""
    return json.dumps(dataset, separators=(",", ":")).encode("ascii")


def questions(dataset: dict) -> int:
    return sum(len(p["qas"]) for a in dataset["data"] for p in a["paragraphs"])


def glove_text(words, dim: int = 100, seed: int = 0) -> bytes:
    """GloVe's text format: `token v1 ... vdim`, six decimals, one line per token."""
    rng = np.random.default_rng(seed)
    lines = []
    for word in words:
        vector = rng.normal(0, 0.5, dim)
        lines.append(word + " " + " ".join(f"{v:.6f}" for v in vector))
    return ("\n".join(lines) + "\n").encode("utf-8")


def vocabulary(*datasets: dict) -> list[str]:
    """The lower-case words of the fixtures' texts (split on white space and punctuation), plus
    punctuation, as GloVe 6B would have them."""
    import re

    words: dict[str, None] = {}
    for dataset in datasets:
        for article in dataset["data"]:
            for paragraph in article["paragraphs"]:
                texts = [paragraph["context"]] + [qa["question"] for qa in paragraph["qas"]]
                for text in texts:
                    for token in re.findall(r"\w+|[^\w\s]", text.lower()):
                        words.setdefault(token)
    return list(words) + ["the", ",", "."]


def glove_zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def write_squad_fixture(folder: Path, *, seed: int = 0, train_articles: int = 3, train_paragraphs: int = 4,
                        dev_articles: int = 2, dev_paragraphs: int = 2, dim: int = 100) -> dict:
    """Write train-v1.1.json, dev-v1.1.json (official formats) and glove.6B.zip (holding
    glove.6B.100d.txt and glove.6B.50d.txt) into `folder`; returns what a test needs to know."""
    train = squad_json(train_articles, train_paragraphs, 1, seed)
    dev = squad_json(dev_articles, dev_paragraphs, 3, seed + 1)
    return write_squad_files(folder, train, dev, seed=seed, dim=dim)


def write_squad_files(folder: Path, train: dict, dev: dict, *, seed: int = 0, dim: int = 100) -> dict:
    """Write `train` and `dev` (SQuAD v1.1 datasets) as train-v1.1.json and dev-v1.1.json, and a
    glove.6B.zip of random vectors for their words, into `folder`; returns what
    write_squad_fixture returns."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train-v1.1.json": dump(train), "dev-v1.1.json": dump(dev)}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    words = [w for w in vocabulary(train, dev) if w not in NOT_IN_GLOVE]
    vectors = glove_text(words, dim, seed)
    archive = glove_zip({"glove.6B.50d.txt": glove_text(words, 50, seed), "glove.6B.100d.txt": vectors})
    (folder / "glove.6B.zip").write_bytes(archive)
    return {"train": train, "dev": dev, "files": files, "glove_words": words, "glove_vectors": vectors,
            "glove_zip": archive, "dev_questions": questions(dev), "train_questions": questions(train)}


def fixture_manifest(path: Path, fixture: dict) -> Path:
    """A DAWNBENCH_DATASETS_MANIFEST file: the built-in [squad] and [glove] entries with the
    fixture's checksums, sizes and vector shape."""
    squad = builtin_entry("squad")
    for name, data in fixture["files"].items():
        squad["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    glove = builtin_entry("glove")
    archive = glove["archives"]["glove.6B.zip"]
    archive["size"] = len(fixture["glove_zip"])
    archive["vectors"]["glove.6B.100d"]["lines"] = len(fixture["glove_words"])
    lines = ["# Test override of harness/data/datasets.toml, written by tests/squad_fixture.py"]
    for name, entry in (("squad", squad), ("glove", glove)):
        lines.append(f"[{name}]")
        lines += [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in entry.items()]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)


def install_glove(data_root: Path, fixture: dict) -> Path:
    """What `dawnbench data fetch glove` leaves, without a server: the vector file, the record and
    the prepared manifest (dawnbench.fetch writes the same through its own checks)."""
    from harness import datasets

    directory = Path(data_root) / "glove"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "glove.6B.100d.txt").write_bytes(fixture["glove_vectors"])
    record = {"format": "dawnbench-glove-1", "official": False,
              "unofficial_reasons": ["written by tests/squad_fixture.py, not fetched"],
              "vectors": {"glove.6B.100d": {"file": "glove.6B.100d.txt", "lines": len(fixture["glove_words"]),
                                            "dim": 100, "sha256": hashlib.sha256(fixture["glove_vectors"]).hexdigest()}}}
    (directory / "dawnbench-prepared.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    datasets.write_prepared_manifest(directory)
    return directory


def install_squad(data_root: Path, fixture: dict) -> Path:
    directory = Path(data_root) / "squad"
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in fixture["files"].items():
        (directory / name).write_bytes(data)
    return directory


def install_fixture(tmp: Path, fixture: dict | None = None) -> dict:
    """The fixture written under `tmp` (or `fixture`, what write_squad_files returned), its checksums
    in a manifest file, and a data root holding SQuAD and GloVe as the fetches leave them:
    {"fixture", "manifest", "root"}. The caller points $DAWNBENCH_DATASETS_MANIFEST at "manifest"
    for as long as it uses them."""
    fixture = fixture or write_squad_fixture(Path(tmp) / "files")
    root = Path(tmp) / "data"
    install_squad(root, fixture)
    install_glove(root, fixture)
    return {"fixture": fixture, "manifest": fixture_manifest(Path(tmp) / "datasets-squad.toml", fixture), "root": root}


# Contexts written for the tokenizer's test and bench/squad_tokens.py: answers inside the tokens that
# spaCy's blank English tokenizer keeps whole and the seed's process_tokens cuts (ranges with an en
# dash, scores, hyphenated and slashed words, fractions), in the official SQuAD v1.1 format. Each
# (context, answer) pair: the answer is the first occurrence of its text in the context.
TOKEN_CASES = (
    ("The Second World War lasted from 1939–1945 and reshaped Europe.", ("1939", "1945", "1939–1945")),
    ("Arsenal won the final 2–1 after extra time.", ("2", "2–1")),
    ("The town grew to 5,000–6,000 inhabitants by 1800.", ("5,000", "6,000", "5,000–6,000")),
    ("The format declined in the mid-1990s as CDs spread.", ("1990s", "mid-1990s")),
    ("Members may vote and/or abstain at the meeting.", ("and", "or", "and/or")),
    ("About 1/2 of the land is forest.", ("1", "1/2")),
    ("The Paris–Rouen race of 1869 was the first city-to-city race.", ("Paris", "Rouen", "city-to-city")),
    ("Water boils at 100°C at sea level.", ("100", "100°C")),
    ("The so-called \"Iron Curtain\" divided the continent.", ("Iron Curtain", "so-called")),
    ("It ran on the London–Brighton line, opened in 1841.", ("London", "Brighton", "1841")),
)


def token_cases_json() -> dict:
    """TOKEN_CASES as a SQuAD v1.1 dataset: one question per answer, one answer each."""
    paragraphs = []
    for i, (context, answers) in enumerate(TOKEN_CASES):
        qas = [{"answers": [{"answer_start": context.index(a), "text": a}], "question": f"What is answer {j}?",
                "id": _qid("token-cases", i, j)} for j, a in enumerate(answers)]
        paragraphs.append({"context": context, "qas": qas})
    return {"data": [{"title": "Token_cases", "paragraphs": paragraphs}], "version": "1.1"}


# Questions as SQuAD's crowd writes them, on contexts of TOKEN_CASES, each holding a token spaCy's blank
# English tokenizer keeps whole and the seed's process_tokens cuts (dawn-bench-models tensorflow/SQuAD
# squad/prepro.py:169-170 cuts every question as :149-150 cuts every context). Each case: (context,
# question, answer, the question's tokens as the seed cuts them, written out by hand from its rule:
# every cut character a token of its own, re.split's empty pieces left out as common.squad leaves them).
QUESTION_CASES = (
    (TOKEN_CASES[0][0], "What did the war of 1939–1945 and/or its aftermath reshape?", "Europe",
     ["What", "did", "the", "war", "of", "1939", "–", "1945", "and", "/", "or", "its", "aftermath", "reshape", "?"]),
    (TOKEN_CASES[1][0], "Who won the final 2–1 after extra time?", "Arsenal",
     ["Who", "won", "the", "final", "2", "–", "1", "after", "extra", "time", "?"]),
    (TOKEN_CASES[2][0], "What was the town’s population by 1800?", "5,000–6,000",
     ["What", "was", "the", "town", "’", "s", "population", "by", "1800", "?"]),
    (TOKEN_CASES[3][0], "What spread in the mid-1990s?", "CDs",
     ["What", "spread", "in", "the", "mid", "-", "1990s", "?"]),
    (TOKEN_CASES[5][0], "Is 1/2 of the land forest or farm?", "forest",
     ["Is", "1", "/", "2", "of", "the", "land", "forest", "or", "farm", "?"]),
    (TOKEN_CASES[8][0], "What did the so-called \"Iron Curtain\" divide?", "the continent",
     ["What", "did", "the", "so", "-", "called", '"', "Iron", "Curtain", '"', "divide", "?"]),
)


def question_cases_json(answers_per_question: int = 1) -> dict:
    """QUESTION_CASES as a SQuAD v1.1 dataset, one paragraph a case; with several answers a question
    repeats its one, as dev questions repeat the crowd's answers."""
    paragraphs = [{"context": context, "qas": [{
        "answers": [{"answer_start": context.index(answer), "text": answer}] * answers_per_question,
        "question": question, "id": _qid("question-cases", i, answers_per_question)}]}
        for i, (context, question, answer, _) in enumerate(QUESTION_CASES)]
    return {"data": [{"title": "Question_cases", "paragraphs": paragraphs}], "version": "1.1"}
