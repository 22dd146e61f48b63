"""An Inspect task over a local dataset, for examples/inspect_local/run.yaml: the capitals of
examples/lm_eval_local/capitals.jsonl asked as open questions, three epochs, scored by match()."""

from pathlib import Path

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.scorer import match
from inspect_ai.solver import generate

DATA = Path(__file__).resolve().parent.parent / "lm_eval_local" / "capitals.jsonl"


@task
def capitals():
    """Each question three times (the task's own epochs, reduced by their mean, as Inspect does)."""
    return Task(
        dataset=json_dataset(str(DATA), FieldSpec(input="question", target="answer", id="id")),
        solver=generate(),
        scorer=match(),
        epochs=Epochs(3, "mean"),
    )
