"""Answer extraction and normalisation shared by the built-in scorers."""

from __future__ import annotations

import re
from collections.abc import Callable

_FINAL = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str) -> str | None:
    """The text after the last `####` marker (GSM8K's convention), or None when there is none."""
    matches = _FINAL.findall(text)
    return matches[-1] if matches else None


def normalize(text: str) -> str:
    """Case, surrounding whitespace, a trailing period, `$` and thousands separators do not count."""
    text = " ".join(text.strip().lower().split())
    text = text.rstrip(".").strip()
    if _NUMBER.fullmatch(text.replace("$", "")):
        text = text.replace("$", "").replace(",", "")
    return text


def as_number(text: str | None) -> float | None:
    """The first number in `text` as a float (`$` and thousands commas ignored), or None."""
    match = _NUMBER.search(text.replace("$", "")) if text is not None else None
    return float(match.group().replace(",", "")) if match else None


# --- numeric answers (GSM8K and the BYO `numeric` scorer) --------------------------------------

# A number as models write it: optional sign (not when glued to a word, so "3-4" is 3 and 4),
# thousands groups or plain digits, optional decimals. "$" and "%" around it are ignored.
NUMBER_RE = re.compile(r"(?:(?<![\w.])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)")
_MARKER = re.compile(r"####")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_FRAC = re.compile(r"\\d?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(\d+)\s*\}")
NUMERIC_METHODS = ("####", "answer is", "boxed", "last number")


def _clean(text: str) -> str:
    """Unicode minus and dashes to '-', `$`, `%` and LaTeX `\\$ \\%` dropped (they never change the value)."""
    return text.replace("\u2212", "-").replace("\\$", "").replace("\\%", "").replace("$", "").replace("%", "")


def first_number(text: str | None) -> str | None:
    """The first number in `text`, as written minus `$`, `%` and thousands commas ("1,234.50" -> "1234.50")."""
    match = NUMBER_RE.search(_clean(text)) if text else None
    return match.group().replace(",", "") if match else None


def last_number(text: str | None) -> str | None:
    """The last number in `text` (same form as `first_number`)."""
    matches = NUMBER_RE.findall(_clean(text)) if text else None
    return matches[-1].replace(",", "") if matches else None


def extract_numeric(text: str) -> tuple[str | None, str | None]:
    """(the final numeric answer, how it was found) from a model reply, or (None, None).

    Order (the first kind that yields a number wins; within a kind, the LAST occurrence):
    1. `#### N` (GSM8K's own marker); 2. "The answer is N" / "answer: N" (the chain-of-thought
    convention, "final answer is" included); 3. `\\boxed{N}` (a simple `\\frac{a}{b}` inside is
    evaluated); 4. the last number anywhere in the text.
    """
    for marker, method in ((_MARKER, "####"), (_ANSWER_IS, "answer is")):
        for match in reversed(list(marker.finditer(text))):
            rest = text[match.end() :].split("\n", 1)[0]  # the rest of that line, up to the next marker
            nxt = marker.search(rest)
            if (n := first_number(rest[: nxt.start()] if nxt else rest)) is not None:
                return n, method
    for match in reversed(_BOXED.findall(text)):
        if frac := _FRAC.search(match):
            value = float(frac.group(1)) / float(frac.group(2))
            return (str(int(value)) if value.is_integer() else repr(value)), "boxed"
        if (n := first_number(match)) is not None:
            return n, "boxed"
    n = last_number(text)
    return (n, "last number") if n is not None else (None, None)


def numbers_equal(a: str | None, b: str | None) -> bool:
    """Numeric equality of two answers ("3.50" == "3.5", "1,000" == "1000"); False if either is not a number."""
    a, b = first_number(a), first_number(b)
    if a is None or b is None:
        return False
    x, y = float(a), float(b)  # first_number's digits always parse
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


# --- multiple-choice letters (the BYO `choice` scorer) -----------------------------------------

_CHOICE_PATTERNS = (
    r"(?i:answer)\s*(?:is|:)\s*:?\s*\(?([{L}])\)?(?![\w])",  # "The answer is (B)", "Answer: B"
    r"####\s*\(?([{L}])\)?(?![\w])",  # "#### B"
    r"\\boxed\s*\{\s*\(?([{L}])\)?\s*\}",  # "\boxed{B}"
    r"^\s*\(?([{L}])\)?\s*[.):]?\s*$",  # a reply that is only the letter
    r"(?<![\w])\(([{L}])\)",  # "(B)" anywhere
    r"(?<![\w'])([{L}])(?![\w'])",  # a lone capital letter anywhere
)


def extract_choice(text: str, n_choices: int) -> str | None:
    """The chosen letter (A, B, …) for `n_choices` options, or None.

    Order: "answer is X" / "answer: X", then `#### X`, then `\\boxed{X}`, then a reply that is just
    the letter, then "(X)", then a lone capital letter; the last match of the first kind found wins.
    """
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: max(1, min(n_choices, 26))]
    for pattern in _CHOICE_PATTERNS:
        if matches := re.findall(pattern.replace("{L}", letters), text, re.MULTILINE):
            return matches[-1].upper()
    return None


_PUNCT = re.compile(r"[^\w\s]")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_text(text: str) -> str:
    """`normalize`, then (for non-numbers) punctuation and the articles a/an/the dropped, as in
    SQuAD/TriviaQA's answer matching: "The Indian Ocean." == "indian ocean"."""
    text = normalize(text)
    if _NUMBER.fullmatch(text):
        return text
    return " ".join(_ARTICLES.sub(" ", _PUNCT.sub(" ", text)).split())


# --- vision-language replies: multiple choice with option texts, VQA short answers -------------

_LABEL_WRAP = r"(?:\*\*|__|\*|_|\[|\(|\"|'|`|\$|\\text\{)*"  # what a model puts around a letter
_LABEL_CLOSE = r"(?:\*\*|__|\*|_|\]|\)|\"|'|`|\$|\})*"
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_DECLARATION = re.compile(
    r"(?:\b(?:final\s+|correct\s+|best\s+|right\s+)?(?:answer|option|choice)\s*(?:is|:|=|would\s+be|should\s+be)"
    r"|\bI\s+(?:choose|select|pick|would\s+choose|go\s+with)|####)\s*(?:option\s+|choice\s+)?",
    re.IGNORECASE,
)
_ALTERNATIVE = r"\s*(?:,|/|\bor\b|\band\b|&)\s*" + _LABEL_WRAP + r"([{L}])" + _LABEL_CLOSE + r"(?![\w])"
_AFTER_LABEL = frozenset(("is", "was", "because", "since", "as", "which", "seems", "looks", "appears", "fits", "matches"))
VLM_CHOICE_RULES = ("answer tag", "boxed", "declaration", "label", "letter", "option text")


def _letters(n: int) -> str:
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: max(1, min(n, 26))]


def _label_at(text: str, letters: str) -> tuple[str | None, bool]:
    """(the letter a label at the beginning of `text` names, whether it is one of alternatives).
    A label is a letter in its wrappers followed by the end, punctuation or a space; a lowercase
    letter counts only before the end or punctuation ("b." yes, "a circle" no), and "A"/"I" followed
    by a lowercase word are read as the English article and pronoun, not labels."""
    match = re.match(_LABEL_WRAP + r"([" + letters + letters.lower() + r"])" + _LABEL_CLOSE, text)
    if not match:
        return None, False
    letter, rest = match.group(1), text[match.end() :]
    if rest[:1].isalnum() or rest[:1] in ("_", "'", "-") or re.match(r"[.:]\w|:/", rest):
        return None, False  # inside a word, a URL ("B.com") or a path ("C:/")
    if re.match(_ALTERNATIVE.replace("{L}", letters + letters.lower()), rest):
        return None, True  # "A or B", "A/B", "A, B"
    wrapped = match.end(1) != match.end() or match.start(1) != 0
    word = re.match(r"\s+([a-z]\w*)", rest)
    if letter.islower() and not wrapped and re.match(r"\s+\S", rest):
        return None, False
    if not wrapped and word and (letter == "I" or (letter == "A" and word.group(1) not in _AFTER_LABEL)):
        return None, False  # "A circle", "I think" (but "A is right", "A because ...")
    return letter.upper(), False


def _option_text(text: str, options: list[str]) -> int | None:
    """The one option whose text `text` is, or holds (VLMEvalKit's guard: `text` at most twice the
    options' total length), a plural "s"/"es" allowed; an option found only inside another found
    option ("red" within "dark red") does not count; none or several found: None. Compared after
    `normalize_text` (case, punctuation and articles do not count)."""
    reply = normalize_text(text)
    texts = [normalize_text(o) for o in options]
    if not reply or not all(texts):
        return None
    if reply in texts and texts.count(reply) == 1:
        return texts.index(reply)
    if len(reply) > 2 * sum(len(t) for t in texts):
        return None
    spans: dict[int, list[tuple[int, int]]] = {}
    for k, t in enumerate(texts):
        found = [(m.start(), m.end()) for m in re.finditer(r"(?<!\w)" + re.escape(t) + r"(?:e?s)?(?!\w)", reply)]
        if found:
            spans[k] = found

    def inside(span: tuple[int, int], k: int) -> bool:
        return any(j != k and len(texts[j]) > len(texts[k]) and s <= span[0] and span[1] <= e for j, js in spans.items() for s, e in js)

    kept = [k for k, found in spans.items() if not all(inside(span, k) for span in found)]
    return kept[0] if len(kept) == 1 else None


def extract_choice_vlm(text: str, options: list[str]) -> tuple[str | None, str]:
    """(the chosen letter, the rule that found it) for a multiple-choice reply to `options`
    (their texts, A first), or (None, why not): "none", "hedge" or "abstain".

    The ways vision-language models answer, in this order; the first rule that applies decides:

    1. `answer tag`: the last `<answer>…</answer>`, read as a reply of its own (nothing found in
       it, or a tag left open: abstain, never a guess from the words around it);
    2. `boxed`: the last `\\boxed{X}`;
    3. `declaration`: the last "the answer is X", "Answer: X", "correct option is (X)", "I choose X",
       "#### X" (its words may also be an option's text: "The answer is the triangle");
    4. `label`: a reply that starts with the letter ("B", "(B)", "B.", "B)", "B:", "**B**", "[B] square");
    5. `letter`: exactly one letter standing alone anywhere ("I think (C).");
    6. `option text`: the reply is, or holds, exactly one option's text (see `_option_text`).

    Alternatives ("A or B", "A/B", two letters) are a hedge: None. Letters inside words, URLs and
    paths, the article "a"/"A" and the pronoun "I" in prose are never labels.
    """
    letters = _letters(len(options))
    text = text.strip()
    if not text:
        return None, "none"
    for rule in _VLM_RULES:
        decided = rule(text, options, letters)
        if decided is not None:
            return decided
    return None, "none"


Decided = tuple[str | None, str]  # (the chosen letter or None, the rule that found it, or why there is none)


def _by_answer_tag(text: str, options: list[str], letters: str) -> Decided | None:
    """Rule 1: the last `<answer>…</answer>` read as a reply of its own; a tag left open abstains."""
    tags = _ANSWER_TAG.findall(text)
    if tags:
        inner = tags[-1].strip()
        if "<answer>" in inner.lower():
            return None, "abstain"
        letter, how = extract_choice_vlm(inner, options) if inner else (None, "abstain")
        return (letter, "answer tag") if letter else (None, "hedge" if how == "hedge" else "abstain")
    if "<answer>" in text.lower():
        return None, "abstain"  # an answer tag left open: no guess from the words around it
    return None


def _by_boxed(text: str, options: list[str], letters: str) -> Decided | None:
    """Rule 2: the last `\\boxed{X}`."""
    boxed = _BOXED.findall(text)
    if boxed:
        letter, hedge = _label_at(boxed[-1].strip(), letters)
        if letter:
            return letter, "boxed"
        if hedge:
            return None, "hedge"
    return None


def _by_declaration(text: str, options: list[str], letters: str) -> Decided | None:
    """Rule 3: the last declaration ("the answer is X"), naming a letter or an option's text."""
    for match in reversed(list(_DECLARATION.finditer(text))):
        rest = text[match.end() :]
        letter, hedge = _label_at(rest, letters)
        if hedge:
            return None, "hedge"
        if letter:
            return letter, "declaration"
        said = re.split(r"[.\n;]|\bbecause\b|\bsince\b", rest, maxsplit=1)[0]
        if (k := _option_text(said, options)) is not None:
            return letters[k], "declaration"
    return None


def _by_label(text: str, options: list[str], letters: str) -> Decided | None:
    """Rule 4: a reply that starts with the letter."""
    letter, hedge = _label_at(text, letters)
    if hedge:
        return None, "hedge"
    return (letter, "label") if letter else None


def _by_lone_letter(text: str, options: list[str], letters: str) -> Decided | None:
    """Rule 5: exactly one letter standing alone anywhere (two or an alternative: a hedge)."""
    found: list[str] = []
    for match in re.finditer(r"(?<![\w'.$/\\-])(?=[\[(*_\"'`]*[" + letters + r"])", text):
        got, alt = _label_at(text[match.start() :], letters)
        if alt:
            return None, "hedge"
        if got and got not in found:
            found.append(got)
    if len(found) == 1:
        return found[0], "letter"
    if len(found) > 1:
        return None, "hedge"
    return None


def _by_option_text(text: str, options: list[str], letters: str) -> Decided | None:
    """Rule 6: the reply is, or holds, exactly one option's text."""
    if (k := _option_text(text, options)) is not None:
        return letters[k], "option text"
    return None


_VLM_RULES: tuple[Callable[[str, list[str], str], Decided | None], ...] = (
    _by_answer_tag,
    _by_boxed,
    _by_declaration,
    _by_label,
    _by_lone_letter,
    _by_option_text,
)


# VQA's answer normalisation (the VQA challenge's evaluation, as lmms-eval and VLMEvalKit apply it).
_VQA_PUNCT = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
_VQA_COMMA_NUMBER = re.compile(r"\d,\d")
_VQA_PERIOD = re.compile(r"\.(?!\d)")  # a period no digit follows ("3.5" and ".5" keep theirs)
VQA_NUMBERS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
_VQA_ARTICLES = frozenset(("a", "an", "the"))
# Contractions written without their apostrophe, restored (the common ones; VQA's table is longer).
VQA_CONTRACTIONS = {
    "aint": "ain't",
    "arent": "aren't",
    "cant": "can't",
    "couldnt": "couldn't",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hadnt": "hadn't",
    "hasnt": "hasn't",
    "havent": "haven't",
    "hes": "he's",
    "im": "i'm",
    "isnt": "isn't",
    "ive": "i've",
    "mightnt": "mightn't",
    "mustnt": "mustn't",
    "shouldnt": "shouldn't",
    "thats": "that's",
    "theres": "there's",
    "theyre": "they're",
    "theyve": "they've",
    "wasnt": "wasn't",
    "werent": "weren't",
    "whats": "what's",
    "wheres": "where's",
    "whos": "who's",
    "wont": "won't",
    "wouldnt": "wouldn't",
    "youre": "you're",
    "youve": "you've",
}


def normalize_vqa(text: str) -> str:
    """A short answer as the VQA evaluation compares it: whitespace collapsed, lowercase; each of
    ``; / [ ] " { } ( ) = + \\ _ - > < @ ` , ? !`` deleted where a space is next to it (or the text has
    a comma between digits: "1,000" -> "1000"), else replaced by a space; a period dropped unless
    a digit follows it; the number words none/zero..ten made digits; the articles a, an, the
    dropped; apostrophe-less contractions restored ("dont" -> "don't")."""
    text = " ".join(text.replace("\n", " ").replace("\t", " ").split())
    glue = _VQA_COMMA_NUMBER.search(text) is not None
    for p in _VQA_PUNCT:
        if p in text:
            text = text.replace(p, "" if glue or p + " " in text or " " + p in text else " ")
    text = _VQA_PERIOD.sub("", text)
    words = [VQA_NUMBERS.get(w, w) for w in text.lower().split()]
    return " ".join(VQA_CONTRACTIONS.get(w, w) for w in words if w not in _VQA_ARTICLES)


def vqa_accuracy(prediction: str, answers: list[str]) -> float:
    """VQA accuracy of `prediction` against the human `answers`, both normalised (`normalize_vqa`).

    Several answers: the official min(#humans who gave it / 3, 1), averaged over the leave-one-out
    subsets (each answer left out once, the prediction counted against the others): with m of 10
    matching, 0, 0.3, 0.6, 0.9, then 1 from m = 4. One answer: plain exact match (1 or 0), because
    the leave-one-out mean is always 0 there (no other human is left to agree). No answers: 0."""
    if not answers:
        return 0.0
    got = normalize_vqa(prediction)
    said = [normalize_vqa(a) for a in answers]
    if len(said) == 1:
        return float(got == said[0])
    matches = sum(a == got for a in said)
    total = sum(min(1.0, (matches - (a == got)) / 3.0) for a in said)
    return total / len(said)
