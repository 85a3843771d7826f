"""The BiDAF references' tokens against the seed's (issues 36, 49): spaCy's blank English tokenizer
keeps `1939–1945`, `2–1`, `mid-1990s`, `and/or`, `1/2` whole, where the seed's process_tokens
(dawn-bench-models tensorflow/SQuAD squad/utils.py:71-80) cuts them, in every context
(squad/prepro.py:149-150) and in every question (squad/prepro.py:169-170). common.squad cuts both as the
seed does (SEED_SPLIT) and keeps every offset: an answer inside a cut token is a span of tokens, and a
question's `1939–1945` is the same three tokens as the context's."""
from __future__ import annotations

import json

import pytest
from squad_fixture import QUESTION_CASES, TOKEN_CASES, question_cases_json, token_cases_json

from bench import squad_tokens
from common import squad


@pytest.mark.parametrize("text, tokens", [
    ("1939–1945", ["1939", "–", "1945"]),
    ("2–1", ["2", "–", "1"]),
    ("5,000–6,000", ["5,000", "–", "6,000"]),
    ("mid-1990s", ["mid", "-", "1990s"]),
    ("and/or", ["and", "/", "or"]),
    ("1/2", ["1", "/", "2"]),
    ("100°C", ["100", "°", "C"]),
    ("don't", ["do", "n", "'", "t"]),
    ("a \u201cquote\u201d", ["a", "\u201c", "quote", "\u201d"]),
])
def test_a_contexts_tokens_are_cut_as_the_seeds(text, tokens):
    got = squad.tokenize(text, split=True)
    assert [t for t, _, _ in got] == tokens
    assert all(text[s:e] == t for t, s, e in got)


def write(tmp_path, dataset: dict):
    path = tmp_path / "d.json"
    path.write_text(json.dumps(dataset, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_questions_tokens_are_cut_as_the_seeds(tmp_path):
    """The seed cuts a question's tokens as a context's (squad/prepro.py:169-170, :149-150): a question's
    `1939–1945` and `and/or` are the context's pieces, so its words meet their twins in the context."""
    data = {"data": [{"title": "t", "paragraphs": [{"context": "It lasted 1939–1945, and/or longer.", "qas": [
        {"id": "q", "question": "Did it last 1939–1945 and/or longer?", "answers": [{"answer_start": 15, "text": "1945"}]}]}]}]}
    (paragraph,), (question,) = squad.read_squad(write(tmp_path, data))
    assert paragraph.tokens == ["It", "lasted", "1939", "–", "1945", ",", "and", "/", "or", "longer", "."]
    assert question.tokens == ["Did", "it", "last", "1939", "–", "1945", "and", "/", "or", "longer", "?"]
    assert (question.y1, question.y2) == (4, 4)


def test_real_format_questions_are_the_seeds_pieces(tmp_path):
    """QUESTION_CASES, in the official format, through read_squad: each question's tokens are the seed's
    pieces, its answer is still its context's text, and the seed's counts hold no uncut token."""
    paragraphs, questions = squad.read_squad(write(tmp_path, question_cases_json()))
    assert [q.tokens for q in questions] == [pieces for _, _, _, pieces in QUESTION_CASES]
    for q in questions:
        start, text = q.answers[0]
        assert squad.answer_text(paragraphs[q.paragraph], q.y1, q.y2) == text
    # The seed's counts (squad/prepro.py:208-212) are over these cut tokens: no whole `1939–1945` is counted.
    words, _ = squad.seed_counts(paragraphs, questions)
    assert all(len(w) == 1 or not set(w) & set(squad.SEED_SPLIT) for w in words)


def test_every_answer_inside_a_cut_token_is_a_span_of_tokens(tmp_path):
    paragraphs, questions = squad.read_squad(write(tmp_path, token_cases_json()))
    assert len(questions) == sum(len(answers) for _, answers in TOKEN_CASES)
    for q in questions:
        p = paragraphs[q.paragraph]
        start, text = q.answers[0]
        assert squad.aligned(p.spans, start, text), text
        assert squad.answer_text(p, q.y1, q.y2) == text, text


def test_the_count_of_unreachable_answers():
    """bench.squad_tokens' figures on TOKEN_CASES: 9 of its 25 answers lie inside a token spaCy keeps
    whole (the rest: spaCy already cuts `Paris–Rouen`, or the answer is the whole token); none after."""
    got = squad_tokens.count(token_cases_json())
    assert (got["answers"], got["unreachable_before"], got["unreachable_after"]) == (25, 9, 0)
