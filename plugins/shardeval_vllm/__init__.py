"""Built-in plugin: the managed `vllm` service — launch vLLM on the node, wait for health, stop it.

vLLM is run as a process (never imported). Like every built-in, this registers through the
`shardeval` entry-point group; copy it to start a plugin for another server (SGLang, TGI, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.plugin import Register


@hookimpl
def register_services(register: Register) -> None:
    from shardeval_vllm.config import VllmServiceConfig
    from shardeval_vllm.service import vllm_service

    register("vllm", vllm_service, config=VllmServiceConfig)
