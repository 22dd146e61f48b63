"""An Inspect task on a node without internet (docs/offline.md): its datasets as Inspect loaded them,
kept by `shardeval prepare` and given back to the task in a prepared shard.

A task file reads its dataset itself, when Inspect creates the task (`json_dataset("https://…")`,
`hf_dataset("org/name", split=…)`, a CSV on S3): the call is inside the user's code, so shardeval
cannot point it elsewhere. Instead Inspect's dataset loaders (`inspect_ai.dataset.json_dataset`,
`csv_dataset`, `file_dataset`, `hf_dataset`) are wrapped once per process, before a task file is
imported. Each call is keyed by the loader and its plain arguments (the source, split, name,
limit, ...; functions such as `record_to_sample` by their name). Where the network is, the samples
the loader returned are recorded (`shardeval prepare` writes them, as Inspect's own Sample JSON,
under the preparation); in a prepared shard the same call returns them from there without
running the loader, so neither the network nor the Hugging Face cache nor `datasets` is touched.
Recording samples rather than pre-filling the HF cache covers every loader alike (files on S3 or
an https URL have no cache at all) and hands the task exactly what was checksummed and planned.

A loader whose source is remote and that fails without a preparation says, in one line, that the
run should be prepared; a prepared shard whose task reads a dataset that was not prepared (the task
file changed since) says the same, before any sample runs.

Files a sample names by URL (`Sample.files` values and its `setup` script: Inspect fetches them when
the sample's sandbox starts, mid-run) are fetched by `shardeval prepare` too, each once, into the
task's folder (`files/`, indexed by URL in `files.json`); a prepared shard gives Inspect copies of
the samples whose URLs name those files instead (the samples the fingerprint covers, and the task
file, are left as they are).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from shardeval.api.benchmark import PREPARE_HINT, prepared_folder
from shardeval.api.plugin import UsageError

if TYPE_CHECKING:
    from inspect_ai import Task
    from inspect_ai.dataset import Dataset, Sample

LOADERS = ("json_dataset", "csv_dataset", "file_dataset", "hf_dataset")
PREPARED_KEY = "inspect"  # the plugin's folder in a preparation: one subfolder per task
INDEX = "datasets.json"


class _Session:
    """What the wrapped loaders do now: record the datasets of one task's creation, or give back a
    prepared task's (`folder`); `discovering`: Inspect is only finding the task (no arguments yet)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, Dataset]] | None = None
        self.folder: str | None = None
        self.discovering = False


_SESSION = _Session()


def task_key(spec: str, args_json: str) -> str:
    """The folder of one task (spec and arguments) in the preparation."""
    return hashlib.sha256(f"{spec}\n{args_json}".encode()).hexdigest()[:24]


def prepared_task_folder(spec: str, args_json: str) -> str | None:
    """The prepared folder of the task in a prepared shard (None: not prepared)."""
    root = prepared_folder(PREPARED_KEY)
    folder = os.path.join(root, task_key(spec, args_json)) if root else None
    return folder if folder is not None and os.path.isfile(os.path.join(folder, INDEX)) else None


def install() -> None:
    """Wrap Inspect's dataset loaders (once per process; before a task file imports them)."""
    import inspect_ai.dataset as module

    for name in LOADERS:
        original = getattr(module, name)
        if not getattr(original, "__shardeval_wrapped__", False):
            setattr(module, name, _wrapped(name, original))


def _wrapped(name: str, original: Callable[..., Dataset]) -> Callable[..., Dataset]:
    @functools.wraps(original)
    def loader(*args: Any, **kwargs: Any) -> Dataset:
        key = call_key(name, args, kwargs)
        if _SESSION.folder is not None:
            return _replay(_SESSION.folder, key, name, args, kwargs)
        try:
            dataset = original(*args, **kwargs)
        except Exception as exc:
            if _remote(name, args, kwargs):
                raise UsageError(
                    f"Inspect's {name}({_source(args, kwargs)!r}) could not read it: {type(exc).__name__}: "
                    f"{_first_line(str(exc))}; on a node without internet {PREPARE_HINT}"
                ) from None
            raise
        if _SESSION.recorded is not None and not _SESSION.discovering:
            _SESSION.recorded.append((key, dataset))
        return dataset

    loader.__shardeval_wrapped__ = True  # type: ignore[attr-defined]
    return loader


def call_key(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A loader call as stable text: its plain arguments as given, functions by their name."""

    def plain(value: Any) -> Any:
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        return f"<{getattr(value, '__qualname__', type(value).__qualname__)}>"

    return json.dumps([name, plain(list(args)), plain(kwargs)], sort_keys=True)


def _source(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    first = args[0] if args else next((kwargs[k] for k in ("json_file", "csv_file", "file", "path") if k in kwargs), "")
    return str(first)


def _remote(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A source read over the network: a URL or a bucket, or a hub dataset (not a local folder)."""
    source = _source(args, kwargs)
    if name == "hf_dataset":
        return not os.path.exists(source)
    return "://" in source and not source.startswith("file://")


def _first_line(text: str) -> str:
    text = (text or "").strip()
    return text.splitlines()[0][:300] if text else "(no message)"


@contextlib.contextmanager
def recording(discovering: bool = False) -> Iterator[list[tuple[str, Dataset]]]:
    """The datasets the task's creation inside reads, recorded (what `shardeval prepare` keeps)."""
    recorded: list[tuple[str, Dataset]] = []
    _SESSION.recorded, _SESSION.discovering = recorded, discovering
    try:
        yield recorded
    finally:
        _SESSION.recorded, _SESSION.discovering = None, False


@contextlib.contextmanager
def replaying(folder: str | None, discovering: bool = False) -> Iterator[None]:
    """In a prepared shard (`folder`: the task's), the loaders return the prepared samples."""
    _SESSION.folder, _SESSION.discovering = folder, discovering
    try:
        yield
    finally:
        _SESSION.folder, _SESSION.discovering = None, False


def keep(folder: str, recorded: list[tuple[str, Dataset]]) -> str:
    """Write the recorded datasets into `folder` (the task's, in the preparation); the hash of what was kept."""
    index: list[dict[str, Any]] = []
    digest = hashlib.sha256()
    for n, (key, dataset) in enumerate(recorded):
        lines = b"".join(sample.model_dump_json(exclude_none=True).encode() + b"\n" for sample in dataset)
        file = f"dataset_{n}.jsonl"
        with open(os.path.join(folder, file), "wb") as f:
            f.write(lines)
        index.append({"key": key, "file": file, "name": dataset.name, "location": dataset.location, "shuffled": dataset.shuffled})
        digest.update(key.encode() + b"\n" + lines)
    with open(os.path.join(folder, INDEX), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    return "sha256:" + digest.hexdigest()


def _replay(folder: str, key: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Dataset:
    from inspect_ai.dataset import MemoryDataset, Sample

    with open(os.path.join(folder, INDEX), encoding="utf-8") as f:
        entry = next((e for e in json.load(f) if e["key"] == key), None)
    if entry is None:
        if _SESSION.discovering:  # Inspect finding the task before its arguments: its default dataset need not be prepared
            return MemoryDataset([])
        raise UsageError(
            f"Inspect's {name}({_source(args, kwargs)!r}) is not in the run's preparation (the task file or its "
            f"arguments changed since it was prepared); {PREPARE_HINT} again"
        )
    with open(os.path.join(folder, entry["file"]), "rb") as f:
        samples = [Sample.model_validate_json(line) for line in f if line.strip()]
    return MemoryDataset(samples, name=entry["name"], location=entry["location"], shuffled=entry["shuffled"])


# --- files a sample names by URL ------------------------------------------------------------------

FILES_INDEX = "files.json"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")  # one token with a scheme: not inline text, not a data: URI


def remote_files(samples: Iterable[Sample]) -> list[str]:
    """The distinct `files` values and `setup` scripts of `samples` that Inspect would read over the
    network (http(s), s3://, ...: any scheme but file://), in the samples' order."""
    found: dict[str, None] = {}
    for sample in samples:
        for value in [*(sample.files or {}).values(), sample.setup]:
            if isinstance(value, str) and _URL.fullmatch(value) and not value.startswith("file://"):
                found.setdefault(value, None)
    return list(found)


def keep_files(folder: str, urls: list[str]) -> None:
    """`shardeval prepare`: each URL's bytes into `folder`/files/, indexed by URL in files.json
    (none: nothing written)."""
    if not urls:
        return
    index: dict[str, str] = {}
    for url in urls:
        name = os.path.basename(url.split("?", 1)[0].rstrip("/")) or "file"
        relative = os.path.join("files", hashlib.sha256(url.encode()).hexdigest()[:24], name)
        os.makedirs(os.path.join(folder, os.path.dirname(relative)), exist_ok=True)
        with open(os.path.join(folder, relative), "wb") as f:
            f.write(_fetch_file(url))
        index[url] = relative
    with open(os.path.join(folder, FILES_INDEX), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1, sort_keys=True)


def _fetch_file(url: str) -> bytes:
    """A sample file's bytes: http(s) with urllib (the system's trust store, SSL_CERT_FILE), any
    other scheme through Inspect's own file reader (fsspec: s3:// with its credentials, ...)."""
    import urllib.error
    import urllib.request

    try:
        if url.startswith(("http://", "https://")):
            with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "shardeval"}), timeout=60) as response:
                return bytes(response.read())
        from inspect_ai._util.file import file

        with file(url, "rb") as f:
            return bytes(f.read())
    except urllib.error.HTTPError as exc:
        why = f"HTTP {exc.code} {exc.reason}"
    except Exception as exc:  # the network's, fsspec's or the store's: one line either way
        why = f"{type(exc).__name__}: {_first_line(str(getattr(exc, 'reason', None) or exc))}"
    raise UsageError(f"a sample's file {url}: download failed ({why}); check the URL, or give the sample a local path")


def use_prepared_files(task: Task, samples: tuple[Sample, ...], folder: str) -> None:
    """A prepared shard: the task runs copies of `samples` whose remote files are the prepared ones
    (`samples` themselves, which the fingerprint covers, keep their URLs). A URL the preparation
    lacks is one line before any sample runs: Inspect would fetch it mid-run, and this node cannot."""
    urls = remote_files(samples)
    if not urls:
        return
    from inspect_ai import task_with
    from inspect_ai.dataset import MemoryDataset

    try:
        with open(os.path.join(folder, FILES_INDEX), encoding="utf-8") as f:
            index: dict[str, str] = json.load(f)
    except FileNotFoundError:
        index = {}
    if missing := [url for url in urls if url not in index]:
        raise UsageError(
            f"a sample's file {missing[0]} is not in the run's preparation (the task or its data changed since it "
            f"was prepared), and a prepared shard does not fetch; {PREPARE_HINT} again"
        )

    def local(value: str | None) -> str | None:
        return os.path.join(folder, index[value]) if value in index else value

    copies = []
    for sample in samples:
        copy = sample.model_copy(deep=True)
        if copy.files:
            copy.files = {name: local(value) or value for name, value in copy.files.items()}
        copy.setup = local(copy.setup)
        copies.append(copy)
    dataset = task.dataset
    task_with(task, dataset=MemoryDataset(copies, name=dataset.name, location=dataset.location, shuffled=dataset.shuffled))


# --- sandbox images ------------------------------------------------------------------------------

DEFAULT_IMAGE = "aisiuk/inspect-tool-support"  # Inspect's docker sandbox without a compose file or Dockerfile
SANDBOX_FILE = "sandbox.json"


def sandbox_images(configs: list[Any], base_dir: str) -> tuple[list[str], list[str]]:
    """The images a docker sandbox runs (`configs`: each docker sandbox's config, as the task or
    params give it: a compose file, a Dockerfile or None) and the services it builds from a
    Dockerfile instead (they are built on the node, from what the build names)."""
    images: list[str] = []
    built: list[str] = []
    for config in configs:
        compose = _compose_file(config, base_dir)
        if compose is None:
            if _dockerfile(config, base_dir):
                built.append(config if isinstance(config, str) else os.path.join(base_dir, "Dockerfile"))
            else:
                images.append(DEFAULT_IMAGE)
            continue
        for service, spec in _compose_services(compose).items():
            if isinstance(spec, dict) and isinstance(spec.get("image"), str):
                images.append(spec["image"])
            elif isinstance(spec, dict) and spec.get("build") is not None:
                built.append(f"{service} ({compose})")
    return sorted(set(images)), sorted(set(built))


def _compose_file(config: Any, base_dir: str) -> str | None:
    if isinstance(config, str) and not os.path.basename(config).startswith("Dockerfile"):
        return config if os.path.isabs(config) else os.path.join(base_dir, config)
    if config is None:
        for name in ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"):
            if os.path.isfile(os.path.join(base_dir, name)):
                return os.path.join(base_dir, name)
    return None


def _dockerfile(config: Any, base_dir: str) -> bool:
    return isinstance(config, str) or os.path.isfile(os.path.join(base_dir, "Dockerfile"))


def _compose_services(path: str) -> dict[str, Any]:
    from shardeval.api.plugin import read_yaml

    try:
        data = read_yaml(path)
    except UsageError:
        return {}
    services = data.get("services") if isinstance(data, dict) else None
    return services if isinstance(services, dict) else {}


def images_line(task: str, images: list[str], built: list[str]) -> str:
    """The one line `shardeval prepare` prints for a task that runs in a docker sandbox."""
    need = f"the image(s) {', '.join(images)} must be present on the nodes" if images else "no image is named"
    also = f"; built on the node from a Dockerfile: {', '.join(built)} (its base images must be there too)" if built else ""
    return (
        f"shardeval prepare: inspect task {task} runs in a docker sandbox: {need} (docker pull or docker load them "
        f"there: shardeval prepare does not move images, and a node without internet cannot pull){also}"
    )


def missing_images(images: list[str]) -> list[str]:
    """The images this node's docker does not have (`docker image inspect`)."""
    import subprocess

    missing = []
    for image in images:
        try:
            found = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            missing.append(image)
            continue
        if found.returncode != 0:
            missing.append(image)
    return missing
