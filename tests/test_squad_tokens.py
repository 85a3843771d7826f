"""The BiDAF references' tokens against the seed's (issue 36): spaCy's blank English tokenizer keeps
`1939–1945`, `2–1`, `mid-1990s`, `and/or`, `1/2` whole, where the seed's process_tokens
(allenai/bi-att-flow squad/utils.py, applied to every context token by squad/prepro.py) cuts them,
so an answer inside one was no span of tokens and scored below 1. common.squad now cuts a
context's tokens as the seed does (SEED_SPLIT) and keeps every offset."""
from __future__ import annotations

import json

import pytest
from squad_fixture import TOKEN_CASES, token_cases_json

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


def test_read_squad_cuts_contexts_not_questions(tmp_path):
    """The seed cuts the contexts' tokens only: its questions are NLTK's tokens as they are."""
    data = {"data": [{"title": "t", "paragraphs": [{"context": "It lasted 1939–1945.", "qas": [
        {"id": "q", "question": "Was it 1939–1945?", "answers": [{"answer_start": 15, "text": "1945"}]}]}]}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    (paragraph,), (question,) = squad.read_squad(path)
    assert paragraph.tokens == ["It", "lasted", "1939", "–", "1945", "."]
    assert question.tokens == ["Was", "it", "1939–1945", "?"]
    assert (question.y1, question.y2) == (4, 4)


def test_every_answer_inside_a_cut_token_is_a_span_of_tokens(tmp_path):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(token_cases_json(), ensure_ascii=False), encoding="utf-8")
    paragraphs, questions = squad.read_squad(path)
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
