"""`benchmarks[].params` of `lm_eval`: lm-eval's own run options, under the CLI's names.

The first group is what `lm_eval --tasks … --num_fewshot …` takes; the second is what
`--model_args` gives `local-completions` / `local-chat-completions` (how a request is built,
tokenized and read: `think_end_token`, which only the chat model reads, strips a reasoning model's
inline thinking as lm-eval strips it; docs/lm-eval.md). `task` is set by shardeval when it expands
an entry into one benchmark per leaf task.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec

from shardeval.api.benchmark import ParamsStruct
from shardeval.api.plugin import Count, NonNegativeInt, UsageError

EXTRA = "pip install 'shardeval[lm-eval]' (the one file: shardeval plugins install 'lm-eval[api]>=0.4.13,<0.5' 'transformers>=4.40')"
MODELS = ("local-completions", "local-chat-completions")


class LmEvalParams(ParamsStruct):
    # as the lm_eval CLI
    tasks: list[str] | str
    include_path: str | None = None
    num_fewshot: NonNegativeInt | None = None
    apply_chat_template: bool | str = False
    fewshot_as_multiturn: bool | None = None  # None: lm-eval's default (True with a chat template)
    system_instruction: str | None = None
    gen_kwargs: dict[str, Any] | str | None = None
    limit: Annotated[float, msgspec.Meta(gt=0)] | None = None  # a count, or below 1 a fraction of each task
    seed: list[int | None] | int | None = None  # None: lm-eval's (0, 1234, 1234, 1234)
    bootstrap_iters: NonNegativeInt = 100000  # for the stderr of non-mean metrics in lm-eval's results file
    # as --model and --model_args: how requests are made
    model: Literal["local-completions", "local-chat-completions"] | None = None  # None: chat with a chat template
    tokenizer: str | None = None  # the served model's Hugging Face tokenizer (name or path); needed unless tokenizer_backend: none
    tokenizer_backend: Literal["huggingface", "none"] | None = None  # None: huggingface for completions
    tokenized_requests: bool | None = None  # None: lm-eval's default for the model
    max_length: Count = 2048
    max_gen_toks: Count = 256
    add_bos_token: bool = False
    # lm-eval's rule for inline thinking: the answer is the text after the last think_end_token, its
    # leading whitespace stripped (None: shardeval's rule, docs/reasoning.md); local-chat-completions only
    think_end_token: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    # set by shardeval: the one leaf task this benchmark is
    task: str | None = None

    def task_list(self) -> list[str]:
        return [t for item in ([self.tasks] if isinstance(self.tasks, str) else self.tasks) for t in item.split(",") if t]

    def wire_model(self) -> str:
        return self.model or ("local-chat-completions" if self.apply_chat_template else "local-completions")

    def model_args(self, served_model: str) -> dict[str, Any]:
        """The `--model_args` lm-eval would be given for these params (no base_url: nothing is sent by lm-eval)."""
        args: dict[str, Any] = {
            "model": served_model,
            "max_length": self.max_length,
            "max_gen_toks": self.max_gen_toks,
            "add_bos_token": self.add_bos_token,
        }
        chat = self.wire_model() == "local-chat-completions"
        backend = self.tokenizer_backend or ("none" if chat else "huggingface")
        args["tokenizer_backend"] = backend
        if backend != "none":
            args["tokenizer"] = self.tokenizer or served_model
        if self.tokenized_requests is not None:
            args["tokenized_requests"] = self.tokenized_requests
        if self.think_end_token is not None:
            args["think_end_token"] = self.think_end_token
        return args

    def plan_key(self) -> str:
        """What the plan depends on (everything but `task` and the merge-only options)."""
        keep = {k: v for k, v in _fields(self).items() if k not in ("task", "bootstrap_iters")}
        return json.dumps(keep, sort_keys=True, default=str)


def _fields(p: LmEvalParams) -> dict[str, Any]:
    return {name: getattr(p, name) for name in p.__struct_fields__}


def require_lm_eval() -> str:
    """lm-eval's version; a one-line error naming the extra when it is not installed."""
    from importlib import import_module
    from importlib.metadata import version

    try:
        import_module("lm_eval")
    except ImportError:
        raise UsageError(f"benchmark lm_eval: lm-evaluation-harness is not installed; {EXTRA}") from None
    return version("lm_eval")
