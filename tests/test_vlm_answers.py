"""Scoring for vision-language replies: multiple-choice letters as VLMs write them (option texts
included), VQA's answer normalisation, and its multi-reference accuracy."""

from __future__ import annotations

import pytest

from shardeval.api.benchmark import extract_choice_vlm, normalize_vqa, vqa_accuracy

SHAPES = ["circle", "square", "triangle", "star"]
IMAGES = ["the first image", "the second image"]


@pytest.mark.parametrize(
    "reply, letter, rule",
    [
        ("B", "B", "label"),
        ("(B)", "B", "label"),
        ("B.", "B", "label"),
        ("B)", "B", "label"),
        ("B: square", "B", "label"),
        ("**B**", "B", "label"),
        ("[B] square", "B", "label"),
        ("b", "B", "label"),
        ("b) square", "B", "label"),
        ("A. circle", "A", "label"),
        ("The answer is B", "B", "declaration"),
        ("The answer is B.", "B", "declaration"),
        ("Answer: B", "B", "declaration"),
        ("answer: b.", "B", "declaration"),
        ("The correct option is (D).", "D", "declaration"),
        ("I would choose D.", "D", "declaration"),
        ("#### C", "C", "declaration"),
        ("The answer is A because the circles outnumber the rest.", "A", "declaration"),
        ("The answer is a triangle.", "C", "declaration"),  # "a" is the article; the words name option C
        ("The answer is the square.", "B", "declaration"),
        ("Looking at it, B is wrong... Final answer: C", "C", "declaration"),  # the last declaration wins
        ("<answer>B</answer>", "B", "answer tag"),
        ("Thinking: maybe A. <answer>(C)</answer>", "C", "answer tag"),
        ("\\boxed{D}", "D", "boxed"),
        ("I think it's (C).", "C", "letter"),
        ("Option D fits best", "D", "letter"),
        ("the triangle", "C", "option text"),
        ("Triangles.", "C", "option text"),
        ("TRIANGLE", "C", "option text"),
        ("A circle appears most often.", "A", "option text"),  # "A" is the article here, the text says circle
        ("a circle", "A", "option text"),
    ],
)
def test_reply_forms(reply: str, letter: str, rule: str) -> None:
    assert extract_choice_vlm(reply, SHAPES) == (letter, rule)


@pytest.mark.parametrize(
    "reply, why",
    [
        ("A or B", "hedge"),
        ("A/B", "hedge"),
        ("A, B", "hedge"),
        ("The answer is A or B.", "hedge"),
        ("It could be (A) or maybe (C).", "hedge"),
        ("<answer>maybe</answer>", "abstain"),  # an answer tag with nothing in it: never an earlier guess
        ("B. <answer>no idea</answer>", "abstain"),
        ("I think B. <answer>C", "abstain"),  # a tag left open
        ("", "none"),
        ("Because of the light, I cannot tell.", "none"),  # letters inside words, the pronoun I
        ("See B.com or C:/images for details", "none"),  # a URL and a path are not labels
        ("There are 3 red shapes.", "none"),
        ("circle and square", "none"),  # two options' texts: no choice
        ("I count five", "none"),
        ("E", "none"),  # not among four options
    ],
)
def test_hostile_replies_choose_nothing(reply: str, why: str) -> None:
    assert extract_choice_vlm(reply, SHAPES) == (None, why)


def test_option_text_guards() -> None:
    assert extract_choice_vlm("The first image.", IMAGES) == ("A", "option text")
    assert extract_choice_vlm("The second image has more circles.", IMAGES) == ("B", "option text")
    assert extract_choice_vlm("Answer: the second image", IMAGES) == ("B", "declaration")
    long = "Let me look at both pictures carefully, counting each circle in turn, and compare: the second image"
    assert extract_choice_vlm(long, IMAGES) == (None, "none")  # over twice the options' length: no text match
    # one option's text inside another's: the longer one when that is all the reply says
    colours = ["red", "dark red", "blue"]
    assert extract_choice_vlm("dark red", colours) == ("B", "option text")
    assert extract_choice_vlm("red", colours) == ("A", "option text")
    assert extract_choice_vlm("red, not dark red", colours) == (None, "none")


@pytest.mark.parametrize(
    "text, want",
    [
        ("Three.", "3"),
        ("The cat", "cat"),
        ("an apple", "apple"),
        ("4,721", "4721"),
        ("3.5", "3.5"),
        ("It is 3.", "it is 3"),
        ("ten", "10"),
        ("eleven", "eleven"),  # only zero..ten become digits
        ("none", "0"),
        ("dont know", "don't know"),
        ("Yes!", "yes"),
        ("two  dogs\n", "2 dogs"),
        ("a (big) cat", "big cat"),  # punctuation next to a space is deleted
        ("black-and-white", "black and white"),  # elsewhere it becomes a space
        ("e.g", "eg"),
    ],
)
def test_normalize_vqa(text: str, want: str) -> None:
    assert normalize_vqa(text) == want


@pytest.mark.parametrize("m, accuracy", [(0, 0.0), (1, 0.3), (2, 0.6), (3, 0.9), (4, 1.0), (7, 1.0), (10, 1.0)])
def test_vqa_accuracy_of_m_matching_humans(m: int, accuracy: float) -> None:
    answers = ["two"] * m + ["three"] * (10 - m)
    assert vqa_accuracy("2", answers) == pytest.approx(accuracy)


def test_vqa_accuracy_with_one_answer_is_exact_match() -> None:
    # the leave-one-out mean would always give 0 with one answer: no other human left to agree
    assert vqa_accuracy("Three.", ["3"]) == 1.0
    assert vqa_accuracy("two", ["3"]) == 0.0
    assert vqa_accuracy("the Cat", ["cat"]) == 1.0
    assert vqa_accuracy("cat", []) == 0.0
