"""lm-eval's wire semantics: the request bodies `local-completions` / `local-chat-completions`
send for an Instance, and how they read a response, taken from lm-eval's own model classes.

The model object is built exactly as `--model_args` builds it, and never sends anything: its
tokenizer and its `_create_payload` / `create_message` make the bodies, its `parse_logprobs` /
`parse_generations` read the answers. Loglikelihood pairs and rolling windows are tokenized by
lm-eval itself (`loglikelihood` / `loglikelihood_rolling`), which hands its token lists to
`_loglikelihood_tokens`: that one method is replaced on the instance to keep them. Each request
is one body (batch_size 1), as lm-eval's concurrent path (`num_concurrent` > 1) sends it.
"""

from __future__ import annotations

import copy
from typing import Any

LOGLIKELIHOOD = ("loglikelihood", "loglikelihood_rolling")


def build_model(name: str, args: dict[str, Any]) -> Any:
    """lm-eval's registered API model `name` built from `args` (tokenizer loaded, nothing sent)."""
    from lm_eval.api.registry import get_model

    return get_model(name)(**args)


class Wire:
    """Request bodies for one lm-eval API model."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._windows: list[tuple[Any, list[int], list[int]]] = []
        model._loglikelihood_tokens = self._keep_windows  # lm-eval tokenizes, we keep its token lists

    def _keep_windows(self, requests: list[Any], **_: Any) -> list[tuple[float, bool]]:
        self._windows.extend(requests)
        return [(0.0, False)] * len(requests)

    def requests(self, instance: Any) -> list[dict[str, Any]]:
        """The bodies one Instance sends, each {"body": …} plus "ctxlen" for a scored one; the
        body's "model" is left out (the solver names the served model)."""
        kind = instance.request_type
        if kind in LOGLIKELIHOOD:
            self._windows = []
            getattr(self.model, kind)([instance], disable_tqdm=True)
            inputs, ctxlens, _ = self.model.batch_loglikelihood_requests([self._windows])
            return [
                {"body": self._body(self.model.create_message([tokens]), generate=False), "ctxlen": ctxlen}
                for tokens, ctxlen in zip(inputs, ctxlens)
            ]
        if kind == "generate_until":
            context, gen_kwargs = instance.args[0], instance.args[1]
            message: Any = context
            if self.model.tokenized_requests:
                tokens = self.model.tok_encode(context, add_special_tokens=self.model.add_bos_token)
                max_gen_toks = gen_kwargs.get("max_gen_toks", self.model._max_gen_toks)
                message = tokens[-(self.model.max_length - max_gen_toks) :]
            return [{"body": self._body(self.model.create_message([message]), generate=True, gen_kwargs=copy.deepcopy(gen_kwargs))}]
        raise ValueError(f"request type {kind!r}")

    def _body(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        body = self.model._create_payload(messages, seed=self.model._seed, **kwargs)
        return {k: v for k, v in body.items() if k != "model"}


def read_loglikelihood(model: Any, token_logprobs: list, top_logprobs: list | None, prompt: Any, ctxlen: int) -> tuple[float, bool]:
    """(log-likelihood, is_greedy) of one echo response, read by lm-eval's parse_logprobs."""
    choice = {"index": 0, "logprobs": {"token_logprobs": token_logprobs, "top_logprobs": top_logprobs}}
    (answer,) = model.parse_logprobs(outputs={"choices": [choice]}, tokens=prompt, ctxlens=[ctxlen])
    return answer


def read_generation(model: Any, text: str, chat: bool) -> str:
    """The generated text as lm-eval's parse_generations reads it (None: its placeholder)."""
    from lm_eval.models.api_models import LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER

    choice = {"index": 0, "message": {"content": text}} if chat else {"index": 0, "text": text}
    (answer,) = model.parse_generations(outputs={"choices": [choice]})
    return LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER if answer is None else answer
