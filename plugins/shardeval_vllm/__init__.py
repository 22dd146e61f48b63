"""Built-in plugin: the managed `vllm` service — launch vLLM on the node, wait for health, stop it.

vLLM is run as a process (never imported). Like every built-in, this registers through the
`shardeval` entry-point group; copy it to start a plugin for another server (SGLang, TGI, ...).
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl


@hookimpl
def register_services(register):
    from shardeval_vllm.config import VllmServiceConfig
    from shardeval_vllm.service import vllm_service

    register("vllm", vllm_service, config=VllmServiceConfig)
