"""`custom`: bring your own benchmark as a data file plus a short YAML mapping; no Python needed.

A config points at the mapping in either of two ways:

    benchmarks:
      - name: custom
        params: {spec: examples/byo/trivia.yaml}
      - name: examples/byo/trivia.yaml          # a .yaml/.yml path is routed here by make_benchmark

or gives the mapping inline as `params` (then `data` is relative to the working directory):

    benchmarks:
      - name: custom
        params: {data: trivia.jsonl, prompt: "Q: {input}\\nA:", scorer: exact}

The mapping (unknown keys are one-line errors naming the closest valid key):

    name: trivia                  # records and merged/ use it (default: the mapping file's stem)
    data: trivia.jsonl            # path (relative to the mapping file), http(s) URL, hf://…, pkg://…
    sha256: …                     # optional, checked for files and URLs
    format: jsonl                 # optional when the suffix says it (jsonl, json, csv, parquet)
    fields:                       # which row field plays which role
      id: id                      # stable problem id (default: the row index)
      input: question             # default: the first of question/prompt/input
      target: answer              # default: the first of answer/target/reference; a list = accepted aliases
      category: topic             # -> Problem.cluster: per-category breakdown, clustered errors
      choices: options            # choice scorer: one field holding a list, or a list of field names
      images: images              # images shown with the prompt: paths (relative to the data file), http(s) or
                                  # data: URLs (default: a row's `images` field); `<image>` in the prompt places them
    images_root: /data/images     # optional: a folder outside the data file's that rows may name images in
    prompt: "Question: {input}\\nAnswer:"   # str.format over the row's fields and {input} {target} {choices}
    system_prompt: Answer briefly.          # sent as a system turn (after the solver's own, if any)
    scorer: exact                 # exact | numeric | regex | choice | vlm_choice | vqa
    regex: "Final: (.+)"          # regex scorer: group 1 (or the whole match) of the LAST match
    metrics: [accuracy]           # merge's metrics for it unless the config's benchmarks[].metrics says so
    judge:                        # a judged benchmark (docs/judges.md): the config names the judge service
      mode: single                # single (`Rating: [[N]]`, score N/10) | pairwise (against the target)
      rubric: "…{question}…{answer}…{reference}…"   # the judge's prompt (default: MT-Bench's)
      verdict: "Rating: \\[\\[(\\d+)\\]\\]"       # regex; group 1 is the verdict (default: the mode's form)

What each scorer extracts and compares: docs/benchmarks.md, "Bring your own benchmark".
"""

from __future__ import annotations

import os
import re
import string
from typing import Any, Literal

import msgspec

from shardeval.api.benchmark import (
    ParamsStruct,
    Problem,
    RowsBenchmark,
    Rubric,
    Score,
    decode_params,
    extract_choice,
    extract_choice_vlm,
    extract_numeric,
    final_answer,
    normalize,
    normalize_text,
    numbers_equal,
    open_rows,
    vqa_accuracy,
)
from shardeval.api.plugin import UsageError

Scorer = Literal["exact", "numeric", "regex", "choice", "vlm_choice", "vqa"]
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*:?\s*([^\n]+)", re.IGNORECASE)


class Fields(ParamsStruct):
    id: str | None = None
    input: str | None = None
    target: str | None = None
    category: str | None = None
    choices: str | list[str] | None = None
    images: str | None = None


class JudgeMapping(ParamsStruct):
    """How a BYO benchmark is judged; the config's `judge: {service: …}` names who judges."""

    mode: Literal["single", "pairwise"] = "single"
    rubric: str | None = None  # over {question} {answer} {reference}; None: the mode's default
    verdict: str | None = None  # a regex whose group 1 (or whole match) is the verdict


class BenchmarkMapping(ParamsStruct):
    """A BYO benchmark: where the rows are, which field is what, the prompt, the scorer."""

    data: str
    name: str | None = None
    description: str | None = None
    sha256: str | None = None
    format: str | None = None
    fields: Fields = msgspec.field(default_factory=Fields)
    images_root: str | None = None  # a folder outside the data file's that rows may name images in (relative as `data` is)
    prompt: str = "{input}"
    system_prompt: str | None = None
    scorer: Scorer = "exact"
    regex: str | None = None
    metrics: list[str] | None = None
    judge: JudgeMapping | None = None


def load_mapping(params: dict[str, Any]) -> tuple[BenchmarkMapping, str, str | None]:
    """(mapping, where it came from for messages, the directory relative data paths start from)."""
    if "spec" in params:
        extra = sorted(set(params) - {"spec"})
        if extra:
            raise UsageError(f"benchmark custom: params.spec names a mapping file; put {extra[0]!r} in that file instead")
        spec = str(params["spec"])
        from shardeval.api.plugin import read_yaml  # the config's reader: same YAML errors, duplicate keys refused

        if not os.path.isfile(spec):
            raise UsageError(
                f"benchmark custom: {spec}: no such mapping file (looked at {os.path.abspath(spec)}); give params.spec=path/to/mapping.yaml"
            )
        data = read_yaml(spec)
        mapping = decode_params(data, BenchmarkMapping, source=spec, prefix="")
        if mapping.name is None:
            mapping = msgspec.structs.replace(mapping, name=os.path.basename(spec).split(".")[0])
        return mapping, spec, os.path.dirname(os.path.abspath(spec))
    if not params:
        raise UsageError(
            "benchmark custom: needs params.spec=path/to/mapping.yaml (or the mapping itself as params: data, fields, prompt, scorer)"
        )
    return decode_params(params, BenchmarkMapping, source="benchmark custom"), "benchmark custom params", None


class CustomBenchmark(RowsBenchmark):
    """A benchmark defined by a mapping (see the module docstring)."""

    scorer_version = "1"  # bump when score() or its answer extraction changes
    judge_rubric: Rubric | None = None  # set by a mapping's `judge:` section

    def __init__(self, params: dict[str, Any]) -> None:
        mapping, where, base_dir = load_mapping(params)
        self.mapping = mapping
        self.where = where
        self.name = mapping.name or "custom"
        if mapping.metrics is not None:
            self.metrics = tuple(mapping.metrics)
        self._regex = _compile(mapping, where)
        if mapping.judge is not None:  # shardeval.run.judging reads it: the config's judge service asks with it
            j = mapping.judge
            try:
                self.judge_rubric = Rubric(mode=j.mode, template=j.rubric, pattern=j.verdict)
            except UsageError as exc:
                raise UsageError(f"{where}: {exc}") from None
            if mapping.metrics is None:
                self.metrics = ("mean",)  # graded scores, not right/wrong
        self._fields_used = _template_fields(mapping.prompt, where, "prompt")
        self.rows = open_rows(mapping.data, sha256=mapping.sha256, name_hint=self.name, format=mapping.format, base_dir=base_dir)
        first = self.rows.row(0) if len(self.rows) else {}
        f = mapping.fields
        self.input_field = f.input or self.first_field(first, ("question", "prompt", "input"))
        self.target_field = f.target or self.first_field(first, ("answer", "target", "reference"))
        if mapping.scorer in ("choice", "vlm_choice") and f.choices is None:
            raise UsageError(f"{where}: scorer {mapping.scorer} needs fields.choices: a field holding a list, or a list of field names")
        if mapping.scorer == "regex" and self._regex is None:
            raise UsageError(f"{where}: scorer regex needs `regex:`, a pattern whose group 1 (or whole match) is the answer")
        images_field = f.images or ("images" if "images" in first else None)
        root = mapping.images_root and os.path.abspath(os.path.join(base_dir or os.getcwd(), os.path.expanduser(mapping.images_root)))
        if root and not os.path.isdir(root):
            raise UsageError(f"{where}: images_root {root} is not a folder; name the folder that holds the rows' images")
        self.use_images(images_field, _data_dir(mapping.data, base_dir), f"{where} (data {self.rows.origin})", root or None)
        if first:
            self.row_problem(0, first)  # a mapping mistake shows now, not halfway through a shard

    # -- rows to problems ------------------------------------------------------------------------

    def _check_row(self, row: dict[str, Any], idx: int) -> None:
        f = self.mapping.fields
        named = {"id": f.id, "input": self.input_field, "target": self.target_field, "category": f.category, "images": f.images}
        if isinstance(f.choices, str):
            named["choices"] = f.choices
        else:  # each choice field of a list (a dict comprehension over one key kept only the last)
            named.update({f"choices[{i}]": c for i, c in enumerate(f.choices or [])})
        for role, field in named.items():
            if field is not None and field not in row:
                raise UsageError(
                    f"{self.where}: fields.{role} is {field!r}, but row {idx} of {self.rows.origin} has no such field "
                    f"(it has {', '.join(sorted(row))})"
                )
        for name in self._fields_used:
            if name not in ("input", "target", "choices") and name not in row:
                raise UsageError(
                    f"{self.where}: prompt uses {{{name}}}, but row {idx} of {self.rows.origin} has no field {name!r} "
                    f"(it has {', '.join(sorted(row))}; {{input}}, {{target}}, {{choices}} are the mapped ones)"
                )
        if "input" in self._fields_used and self.input_field is None:
            raise UsageError(f"{self.where}: prompt uses {{input}} but no field is mapped to it; set fields.input")

    def _choices(self, row: dict[str, Any]) -> list[str]:
        spec = self.mapping.fields.choices
        if spec is None:
            return []
        if isinstance(spec, str):
            value = row.get(spec)
            if not isinstance(value, list):
                raise UsageError(f"{self.where}: fields.choices {spec!r} must hold a list in every row, got {type(value).__name__}")
            return [str(v) for v in value]
        return [str(row.get(name, "")) for name in spec]

    def row_problem(self, idx: int, row: dict[str, Any]) -> Problem:
        self._check_row(row, idx)
        f = self.mapping.fields
        choices = self._choices(row)
        target = row.get(self.target_field) if self.target_field else None
        aliases = [str(t) for t in target] if isinstance(target, list) else ([] if target is None else [str(target)])
        if self.mapping.scorer in ("choice", "vlm_choice") and aliases:
            aliases = [_letter(aliases[0], choices, self.where, idx)]
        values = {k: v for k, v in row.items() if isinstance(k, str)}
        values["input"] = row.get(self.input_field, "") if self.input_field else ""
        values["target"] = aliases[0] if aliases else ""
        values["choices"] = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
        prompt = self.mapping.prompt.format_map(values)
        messages = None
        if self.mapping.system_prompt:
            messages = [{"role": "system", "content": self.mapping.system_prompt}, {"role": "user", "content": prompt}]
        metadata: dict[str, Any] = {}
        if len(aliases) > 1:
            metadata["aliases"] = aliases
        if choices:
            metadata["n_choices"] = len(choices)
        if choices and self.mapping.scorer == "vlm_choice":
            metadata["options"] = choices  # the option texts a reply may name instead of a letter
        if self.mapping.scorer == "vqa" and aliases:
            metadata["answers"] = aliases  # every human answer, repeats kept: they weigh in VQA accuracy
            metadata.pop("aliases", None)
        row_id = str(row[f.id]) if f.id else str(idx)
        problem = Problem(
            idx=idx,
            id=row_id,
            prompt=None if messages else prompt,
            messages=messages,
            reference=aliases[0] if aliases else None,
            cluster=str(row[f.category]) if f.category and row.get(f.category) is not None else None,
            metadata=metadata,
        )
        return self.with_images(problem, row, prompt, f"{self.where}: row {idx} (id {row_id})")

    # -- scoring ---------------------------------------------------------------------------------

    def score(self, problem: Problem, response: str) -> Score:
        scorer = self.mapping.scorer
        if problem.reference is None:
            return Score(score=0.0, extracted=None)
        if scorer == "numeric":
            extracted, _ = extract_numeric(response)
            right = numbers_equal(extracted, problem.reference)
        elif scorer == "choice":
            extracted = extract_choice(response, int(problem.metadata.get("n_choices", 26)))
            right = extracted == problem.reference
        elif scorer == "vlm_choice":
            extracted, _ = extract_choice_vlm(response, list(problem.metadata.get("options", [])))
            right = extracted == problem.reference
        elif scorer == "vqa":
            extracted = _extract_text(response)
            return Score(score=vqa_accuracy(extracted, list(problem.metadata.get("answers") or [problem.reference])), extracted=extracted)
        else:
            extracted = self._extract_regex(response) if scorer == "regex" else _extract_text(response)
            accepted = problem.metadata.get("aliases") or [problem.reference]
            right = extracted is not None and normalize_text(extracted) in {normalize_text(a) for a in accepted}
        return Score(score=float(right), extracted=extracted)

    def _extract_regex(self, response: str) -> str | None:
        assert self._regex is not None
        matches = list(self._regex.finditer(response))
        return matches[-1].group(1 if self._regex.groups else 0).strip() if matches else None

    def simulated_reply(self, reference: str, correct: bool) -> str | None:
        """For `choice`, a reply that names a letter (right, or the next one); else the simulator's default."""
        if self.mapping.scorer not in ("choice", "vlm_choice"):
            return None
        letter = reference if correct else ("B" if reference == "A" else "A")
        return f"Looking at the options, the answer is ({letter})."


def _data_dir(data: str, base_dir: str | None) -> str | None:
    """The folder of a local data file, where its rows' relative image paths start (None: a URL or
    a hub dataset; relative image paths then start at the working directory)."""
    if "://" in data:
        return None
    return os.path.dirname(os.path.abspath(os.path.join(base_dir or os.getcwd(), os.path.expanduser(data))))


def _extract_text(response: str) -> str:
    """The reply's answer for text comparison: after `####`, else after "answer is", else the whole reply."""
    marked = final_answer(response)
    if marked is not None:
        return marked.strip()
    matches = _ANSWER_IS.findall(response)
    return (matches[-1] if matches else response).strip()


def _letter(target: str, choices: list[str], where: str, idx: int) -> str:
    """A choice target as its letter: 'B', '1' (0-based index) or the option's own text."""
    text = target.strip()
    if len(text) == 1 and text.upper() in LETTERS[: len(choices)]:
        return text.upper()
    if text.isdigit() and int(text) < len(choices):
        return LETTERS[int(text)]
    for i, option in enumerate(choices):
        if normalize(option) == normalize(text):
            return LETTERS[i]
    raise UsageError(
        f"{where}: row {idx}: target {target!r} is not a letter A-{LETTERS[len(choices) - 1] if choices else 'A'}, "
        "a 0-based index, or the text of one of the choices"
    )


def _compile(mapping: BenchmarkMapping, where: str) -> re.Pattern[str] | None:
    if mapping.regex is None:
        return None
    try:
        return re.compile(mapping.regex, re.MULTILINE)
    except re.error as exc:
        raise UsageError(f"{where}: regex {mapping.regex!r} is not a valid pattern: {exc}") from None


def _template_fields(template: str, where: str, key: str) -> set[str]:
    """The `{names}` a str.format template uses; only plain names are allowed."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise UsageError(f"{where}: {key} is not a valid template ({exc}); write {{{{ and }}}} for literal braces") from None
    for name in names:
        if not re.fullmatch(r"[^\W\d]\w*", name):  # "" ({}), a position or an attribute/index
            raise UsageError(f"{where}: {key} uses {{{name}}}; use plain field names like {{input}} or {{question}}")
    return set(names)
