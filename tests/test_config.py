"""The config loader (core/shardeval/config/) and the slurm plugin's config section.

Every user mistake must be one line naming the file, the key path and the fix; the CLI tests at
the end run the real `shardeval run` in a subprocess and check there is no traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from conftest import shardeval_cmd

from shardeval.config import Config
from shardeval.config.loading import config_for_manifest, load_config
from shardeval.identity import config_hash
from shardeval.errors import UsageError

FIXTURES = Path(__file__).parent / "fixtures"
SEED = FIXTURES / "seed_slurm_gsm8k_sharded.yaml"

BASE = """\
services:
  model:
    type: api
    url: http://127.0.0.1:9/v1
    model: llama
benchmarks:
  - name: arith
    params: {n: 20}
    repeats: 2
    solver:
      service: model
      generation: {temperature: 0.0}
"""


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tmp_path so messages name `config.yaml`, as a user who typed that name sees them."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(text: str, name: str = "config.yaml") -> str:
    Path(name).write_text(text)
    return name


def load(text: str = BASE, *overrides: str, quick: dict | None = None, env: dict | None = None) -> Config:
    return load_config(write(text), list(overrides), quick, env if env is not None else {})


def error(text: str = BASE, *overrides: str, quick: dict | None = None, env: dict | None = None) -> str:
    with pytest.raises(UsageError) as err:
        load(text, *overrides, quick=quick, env=env)
    message = str(err.value)
    assert "\n" not in message
    return message


# --- the seed example --------------------------------------------------------------------------


def test_seed_example_loads_unchanged() -> None:
    config = load_config(str(SEED), env={})
    service = config.services["model"]
    assert service.type == "vllm" and service.protocol == "chat_completions"
    assert service.model == "nvidia/Llama-3.1-70B-Instruct"
    assert service.tensor_parallel_size == 4 and service.port == 8000
    assert service.node_pool == "compute"
    assert [b.name for b in config.benchmarks] == ["gsm8k"]
    assert config.benchmarks[0].solver.service == "model"
    cluster = config.cluster
    assert (cluster.type, cluster.shards, cluster.walltime) == ("slurm", 16, "02:00:00")
    pool = cluster.node_pools["compute"]
    assert (pool.partition, pool.nodes, pool.ntasks_per_node, pool.gres) == ("batch", 1, 1, "gpu:4")


def test_seed_cluster_section_with_the_model_pointed_at_an_endpoint() -> None:
    """--model-url turns the vllm service into an api one; the slurm section decodes on its own."""
    config = load_config(str(SEED), quick={"model_url": "http://node17:8000/v1"}, env={})
    service = config.services["model"]
    assert (service.type, service.url, service.model) == (
        "api",
        "http://node17:8000/v1",
        "nvidia/Llama-3.1-70B-Instruct",
    )
    assert type(config.cluster).__name__ == "SlurmClusterConfig" and config.cluster.shards == 16


# --- unknown keys and wrong types --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE + "benchmark: []\n", "config.yaml: unknown key 'benchmark'; did you mean 'benchmarks'?"),
        (
            BASE.replace("repeats: 2", "repets: 2"),
            "config.yaml: unknown key 'benchmarks[0].repets'; did you mean 'repeats'?",
        ),
        (
            BASE.replace("temperature:", "temprature:"),
            "config.yaml: unknown key 'benchmarks[0].solver.generation.temprature'; did you mean 'temperature'?",
        ),
        (
            BASE.replace("model: llama", "model: llama\n    modle_id: x"),
            "config.yaml: unknown key 'services.model.modle_id'; did you mean 'model'?",
        ),
        (
            BASE.replace("model: llama", "model: llama\n    timeouts: {conect: 3}"),
            "config.yaml: unknown key 'services.model.timeouts.conect'; did you mean 'connect'?",
        ),
        (
            BASE + "cluster: {type: slurm, walltime: '1:00:00', partiton: batch}\n",
            "config.yaml: unknown key 'cluster.partiton'; did you mean 'partition'?",
        ),
        (
            BASE + "cluster: {type: slurm, walltime: '1:00', node_pools: {gpu: {nodes: 1}, cpu: {gres: x, nodez: 2}}}\n",
            "config.yaml: unknown key 'cluster.node_pools.cpu.nodez'; did you mean 'nodes'?",
        ),
    ],
)
def test_unknown_key_names_path_and_closest_key(in_tmp: Path, text: str, expected: str) -> None:
    assert error(text) == expected


def test_unknown_key_without_a_close_match_lists_the_valid_ones(in_tmp: Path) -> None:
    message = error(BASE + "output: {zzz: 1}\n")
    assert message.startswith("config.yaml: unknown key 'output.zzz'; valid keys here: dir, trajectories")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE.replace("repeats: 2", "repeats: five"), "config.yaml: benchmarks[0].repeats: expected int, got str ('five')"),
        (BASE + "seed: [1]\n", "config.yaml: seed: expected int, got a list"),
        (BASE.replace("params: {n: 20}", "params: [20]"), "config.yaml: benchmarks[0].params: expected mapping, got a list"),
        (BASE + "output: {trajectories: maybe}\n", "config.yaml: output.trajectories: expected bool, got str ('maybe')"),
        (
            BASE.replace("model: llama", "model: llama\n    protocol: chat"),
            "config.yaml: services.model.protocol: invalid value 'chat'; expected one of: chat_completions, completions",
        ),
        (BASE.replace("- name: arith", "- nam: arith"), "config.yaml: unknown key 'benchmarks[0].nam'; did you mean 'name'?"),
        ("benchmarks: [{repeats: 1}]\n", "config.yaml: benchmarks[0]: missing required key 'name'"),
        (
            BASE + "cluster: {type: slurm, walltime: 2:00:00}\n",
            "config.yaml: cluster.walltime: expected str, got int (7200); quote the value in YAML",
        ),
        (
            BASE + "cluster: {type: slurm, walltime: '1:00', max_parallel: 0}\n",
            "config.yaml: cluster.max_parallel: must be an integer >= 1, got 0",
        ),
    ],
)
def test_wrong_type_names_path_expected_and_value(in_tmp: Path, text: str, expected: str) -> None:
    assert error(text) == expected


def test_unknown_service_and_cluster_types_suggest(in_tmp: Path) -> None:
    assert error(BASE.replace("type: api", "type: apii")).startswith(
        "config.yaml: services.model.type: unknown service 'apii'; did you mean 'api'?"
    )
    assert error(BASE + "cluster: {type: slurmm}\n").startswith(
        "config.yaml: cluster.type: unknown orchestrator 'slurmm'; did you mean 'slurm'?"
    )
    assert error(BASE.replace("    type: api\n", "")).startswith("config.yaml: services.model: missing required key 'type'")


# --- cross-checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("benchmarks.0.repeats=0", "config.yaml: benchmarks[0].repeats: must be an integer >= 1, got 0"),
        ("benchmarks.0.max_concurrent=0", "config.yaml: benchmarks[0].max_concurrent: must be an integer >= 1, got 0"),
        ("benchmarks.0.max_problems=-1", "config.yaml: benchmarks[0].max_problems: must be an integer >= 1, got -1"),
        ("benchmarks.0.solver.service=modle", "config.yaml: benchmarks[0].solver.service: no service 'modle'; defined: model"),
        ("cluster.shards=0", "config.yaml: cluster.shards: must be an integer >= 1, got 0"),
        ("benchmarks.0.solver.type=simpel", "config.yaml: benchmarks[0].solver.type: unknown solver 'simpel'"),
    ],
)
def test_cross_checks(in_tmp: Path, override: str, expected: str) -> None:
    assert error(BASE, override).startswith(expected)


def test_no_benchmarks_and_duplicate_benchmarks(in_tmp: Path) -> None:
    assert "no benchmarks" in error("services: {}\n")
    assert "no benchmarks" in error("")
    duplicated = BASE + "  - name: arith\n"
    assert error(duplicated).startswith("config.yaml: benchmarks[1].name: 'arith' is already benchmarks[0]")


# --- reading the file --------------------------------------------------------------------------


def test_missing_file_directory_and_non_mapping(in_tmp: Path) -> None:
    with pytest.raises(UsageError, match=r"^nope\.yaml: no such config file$"):
        load_config("nope.yaml", env={})
    os.mkdir("adir")
    with pytest.raises(UsageError, match=r"^adir: is a directory"):
        load_config("adir", env={})
    assert error("- a\n- b\n").startswith("config.yaml: the top level must be a mapping")
    assert error("just a string\n").endswith("not str")


def test_malformed_yaml_names_line_and_column(in_tmp: Path) -> None:
    message = error("services:\n  model:\n    type: api\n    url: [1,\nbenchmarks: []\n")
    assert message.startswith("config.yaml:6:1: invalid YAML:") and "flow sequence at line 4, column 10" in message
    message = error("a: 1\n  b: 2\n")
    assert message.startswith("config.yaml:2:") and "invalid YAML" in message


def test_duplicate_keys_are_errors(in_tmp: Path) -> None:
    message = error(BASE + "benchmarks: []\n")
    assert message.startswith("config.yaml:") and "duplicate key 'benchmarks'" in message


def test_not_utf8(in_tmp: Path) -> None:
    Path("config.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="not a UTF-8 text file"):
        load_config("config.yaml", env={})


# --- ${VAR} expansion --------------------------------------------------------------------------


def test_env_expansion(in_tmp: Path) -> None:
    text = (
        BASE.replace("http://127.0.0.1:9/v1", "http://${HOST}:${PORT:-8000}/v1").replace("repeats: 2", "repeats: ${REPEATS:-3}")
        + "output: {dir: '$${HOME}/out-${EMPTY:-fallback}'}\n"
    )
    config = load(text, env={"HOST": "node17", "EMPTY": ""})
    assert config.services["model"].url == "http://node17:8000/v1"
    assert config.benchmarks[0].repeats == 3  # a number from a variable decodes as an int
    assert config.output.dir == "${HOME}/out-fallback"
    config = load(text, env={"HOST": "h", "PORT": "9000", "REPEATS": "5"})
    assert config.services["model"].url == "http://h:9000/v1" and config.benchmarks[0].repeats == 5


def test_unset_variable_names_variable_and_key_path(in_tmp: Path) -> None:
    message = error(BASE.replace("model: llama", "model: ${MODEL_NAME}"))
    assert message.startswith("config.yaml: services.model.model: environment variable MODEL_NAME is not set")


def test_bad_reference_and_wrong_type_from_a_variable(in_tmp: Path) -> None:
    assert "unterminated" in error(BASE.replace("model: llama", "model: ${MODEL"))
    assert "'${1X}' is not ${VAR}" in error(BASE.replace("model: llama", "model: ${1X}"))
    assert error(BASE.replace("repeats: 2", "repeats: ${R}"), env={"R": "many"}) == (
        "config.yaml: benchmarks[0].repeats: expected int, got str ('many')"
    )


def test_env_defaults_to_os_environ(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDEVAL_TEST_MODEL", "from-os")
    config = load_config(write(BASE.replace("model: llama", "model: ${SHARDEVAL_TEST_MODEL}")))
    assert config.services["model"].model == "from-os"


# --- -O overrides ------------------------------------------------------------------------------


def test_overrides_parse_yaml_values_and_index_lists(in_tmp: Path) -> None:
    config = load(
        BASE,
        "benchmarks.0.repeats=5",
        "benchmarks[0].max_problems=7",
        "benchmarks.0.solver.generation.temperature=0.7",
        "benchmarks.0.solver.generation.stop=[a, b]",
        "benchmarks.0.solver.system_prompt=Answer: yes",
        "services.model.url=http://h:1/v1",
        "seed=42",
        "output.trajectories=false",
        "benchmarks.0.params.n=",
    )
    bench = config.benchmarks[0]
    assert (bench.repeats, bench.max_problems, config.seed) == (5, 7, 42)
    assert bench.solver.generation.temperature == 0.7 and bench.solver.generation.stop == ["a", "b"]
    assert bench.solver.system_prompt == "Answer: yes"
    assert bench.params == {"n": None}
    assert config.services["model"].url == "http://h:1/v1"
    assert config.output.trajectories is False


def test_override_creates_missing_sections(in_tmp: Path) -> None:
    config = load(BASE, "cluster.shards=4", "benchmarks.0.solver.generation.extra.min_p=0.1")
    assert config.cluster.shards == 4 and config.cluster.type == "local"
    assert config.benchmarks[0].solver.generation.extra == {"min_p": 0.1}


@pytest.mark.parametrize("bad", ["foo", "=5", "a..b=1", ""])
def test_bad_override_form(in_tmp: Path, bad: str) -> None:
    assert error(BASE, bad).startswith(f"-O {bad!r} is not KEY.PATH=VALUE")


def test_override_errors_name_the_override(in_tmp: Path) -> None:
    assert error(BASE, "benchmarks.0.repets=5") == (
        "config.yaml: unknown key 'benchmarks[0].repets'; did you mean 'repeats'? (from -O benchmarks.0.repets=5)"
    )
    assert error(BASE, "benchmarks.0.repeats=five").endswith("got str ('five') (from -O benchmarks.0.repeats=five)")
    assert error(BASE, "benchmarks.3.repeats=5") == "-O benchmarks.3.repeats=5: benchmarks is a list of 1; index it with 0..0"
    assert error(BASE, "benchmarks.0.name.x=1").startswith("-O benchmarks.0.name.x=1: benchmarks[0].name is str")


# --- quick mode --------------------------------------------------------------------------------


def test_quick_mode_without_a_file() -> None:
    config = load_config(
        None,
        quick={"bench": "arith", "model_url": "http://node17:8000/v1", "model_id": "llama-70b", "api_key_env": "MY_KEY", "repeats": 3},
        env={},
    )
    service = config.services["model"]
    assert (service.type, service.url, service.model, service.api_key_env) == (
        "api",
        "http://node17:8000/v1",
        "llama-70b",
        "MY_KEY",
    )
    assert service.protocol == "chat_completions"
    assert [(b.name, b.repeats, b.solver.service) for b in config.benchmarks] == [("arith", 3, "model")]


@pytest.mark.parametrize(
    ("url", "base", "protocol"),
    [
        ("http://h:8000/v1", "http://h:8000/v1", "chat_completions"),
        ("http://h:8000/v1/", "http://h:8000/v1", "chat_completions"),
        ("http://h:8000/v1/chat/completions", "http://h:8000/v1", "chat_completions"),
        ("http://h:8000/v1/completions", "http://h:8000/v1", "completions"),
    ],
)
def test_quick_model_url_forms(url: str, base: str, protocol: str) -> None:
    config = load_config(None, quick={"bench": "arith", "model_url": url, "model_id": "m"}, env={})
    service = config.services["model"]
    assert service.url.rstrip("/") == base and service.protocol == protocol


def test_quick_mode_says_what_is_missing() -> None:
    with pytest.raises(UsageError) as err:
        load_config(None, quick={"bench": "arith", "model_url": None}, env={})
    message = str(err.value)
    assert "--model-url" in message and "--model-id" in message and "--bench NAME" in message
    with pytest.raises(UsageError, match=r"--repeats 0: must be an integer >= 1"):
        load_config(None, quick={"bench": "arith", "model_url": "http://h/v1", "model_id": "m", "repeats": 0}, env={})


TWO = """\
services:
  model: {type: api, url: "http://127.0.0.1:9/v1", model: llama}
  judge: {type: api, url: "http://127.0.0.1:9/v1", model: j}
benchmarks:
  - name: arith
  - name: other
    solver: {service: judge}
"""


def test_quick_numbers_and_output_override_a_file(in_tmp: Path) -> None:
    config = load(TWO, quick={"repeats": 4, "max_problems": 10, "max_concurrent": 8, "output_dir": "out"})
    assert [(b.repeats, b.max_problems, b.max_concurrent) for b in config.benchmarks] == [(4, 10, 8)] * 2
    assert config.output.dir == "out"


def test_quick_bench_keeps_one_and_model_flags_touch_only_its_service(in_tmp: Path) -> None:
    config = load(TWO, quick={"bench": "other", "model_id": "judge-2", "api_key_env": "JUDGE_KEY"})
    assert [b.name for b in config.benchmarks] == ["other"]
    judge, model = config.services["judge"], config.services["model"]
    assert (judge.model, judge.api_key_env) == ("judge-2", "JUDGE_KEY")
    assert (model.model, model.api_key_env) == ("llama", None)
    assert error(TWO, quick={"bench": "gsm9k"}) == "--bench gsm9k: config.yaml has no benchmark 'gsm9k'; defined: arith, other"


def test_quick_model_url_turns_a_managed_service_into_api(in_tmp: Path) -> None:
    shutil.copy(SEED, "seed.yaml")
    config = load_config(
        "seed.yaml",
        quick={"model_url": "http://n:1/v1/completions", "model_id": "served", "api_key_env": "K"},
        env={},
    )
    service = config.services["model"]
    assert service.type == "api" and not hasattr(service, "tensor_parallel_size")
    assert (service.url, service.model, service.protocol, service.api_key_env) == (
        "http://n:1/v1",
        "served",
        "completions",
        "K",
    )


# --- config_hash and the manifest --------------------------------------------------------------


@pytest.mark.parametrize(
    "override",
    [
        "services.model.url=http://elsewhere:1234/v1",
        "services.model.api_key_env=OTHER",
        "services.model.timeouts.connect=1",
        "services.model.retries.attempts=9",
        "services.model.stream=false",
        "benchmarks.0.max_concurrent=1",
        "output.dir=/tmp/x",
        "output.trajectories=false",
        "cluster.shards=8",
    ],
)
def test_config_hash_ignores_transport_and_layout(in_tmp: Path, override: str) -> None:
    assert config_hash(load(BASE, override)) == config_hash(load(BASE))


@pytest.mark.parametrize(
    "override",
    [
        "seed=1",
        "shuffle_seed=3",
        "benchmarks.0.repeats=3",
        "benchmarks.0.max_problems=5",
        "benchmarks.0.params.n=21",
        "benchmarks.0.solver.system_prompt=Be brief.",
        "benchmarks.0.solver.generation.temperature=0.5",
        "benchmarks.0.solver.generation.extra.min_p=0.1",
        "services.model.model=other",
        "services.model.protocol=completions",
    ],
)
def test_config_hash_follows_what_changes_results(in_tmp: Path, override: str) -> None:
    assert config_hash(load(BASE, override)) != config_hash(load(BASE))


def test_config_hash_form_and_stability(in_tmp: Path) -> None:
    digest = config_hash(load())
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 16
    assert digest == config_hash(load())


def test_config_hash_of_a_run_started_before_canonical_json_is_unchanged() -> None:
    """The hash moved from msgspec's sorted encoding to canonical JSON (json.dumps, sorted keys,
    compact, UTF-8); runs started before must still resume. The value is what the old code wrote."""
    config = load_config(
        None,
        ["benchmarks.0.params={n: 20, note: 'héllo ✓'}", "benchmarks.0.solver.generation.temperature=0.7", "seed=7"],
        quick={"bench": "arith", "model_url": "http://127.0.0.1:9/v1", "model_id": "m"},
    )
    assert config_hash(config) == "sha256:76de266e07a8fb79"


def test_params_with_non_string_keys_load_and_hash(in_tmp: Path) -> None:
    """YAML allows `{1: a}` inside params; the old hash stopped with a TypeError there."""
    config = load(BASE, "benchmarks.0.params.m={1: a, b: [1.5, null]}")
    assert config_hash(config) != config_hash(load(BASE))


def test_config_for_manifest_is_plain_data_without_secrets(in_tmp: Path) -> None:
    config = load(BASE, "services.model.api_key_env=MY_API_KEY", env={"MY_API_KEY": "sk-secret"})
    data = config_for_manifest(config)
    text = json.dumps(data)
    assert "MY_API_KEY" in text and "sk-secret" not in text
    assert data["benchmarks"][0]["name"] == "arith" and data["services"]["model"]["type"] == "api"
    assert msgspec.json.decode(msgspec.json.encode(data)) == data


# --- the slurm plugin --------------------------------------------------------------------------


def test_slurm_registers_with_its_config() -> None:
    from shardeval.plugins import registry

    entry = registry().get("orchestrators", "slurm", where="test")
    assert entry.config.__name__ == "SlurmClusterConfig"


def test_slurm_plugin_module_is_light() -> None:
    code = "import sys, shardeval_slurm; print(sorted(m for m in ('msgspec', 'aiohttp', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the real CLI: exit 2, one line, no traceback ----------------------------------------------


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardeval: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


SHARD_VARS = ("NEL_SHARD_IDX", "NEL_TOTAL_SHARDS", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "RANK", "WORLD_SIZE")


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`shardeval run ARGS` in tmp_path, without shard variables inherited from the test's own job."""
    inherited = {k: v for k, v in os.environ.items() if k not in SHARD_VARS and not k.startswith("SLURM_")}
    return subprocess.run(
        [sys.executable, "-m", "shardeval", "run", *args],
        env={**inherited, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def test_cli_missing_config_file(tmp_path: Path) -> None:
    assert_one_line_error(shardeval_cmd("run", str(tmp_path / "nope.yaml")), "nope.yaml: no such config file")


@pytest.mark.parametrize(
    ("text", "args", "env", "needles"),
    [
        ("services:\n  model: [1,\n", (), {}, ("config.yaml:", "invalid YAML")),
        (BASE.replace("repeats: 2", "repets: 2"), (), {}, ("unknown key 'benchmarks[0].repets'; did you mean 'repeats'?",)),
        (BASE, ("-O", "benchmarks.0.repeats=five"), {}, ("benchmarks[0].repeats: expected int, got str ('five')",)),
        (BASE, ("--shard", "5/4", "-o", "out"), {}, ("--shard 5/4",)),
        (BASE, ("-o", "out"), {"NEL_SHARD_IDX": "abc", "NEL_TOTAL_SHARDS": "4"}, ("NEL_SHARD_IDX='abc'",)),
        # a service type that is not a name, with --model-url (quick mode asks the service's Struct): a TypeError before
        (
            BASE.replace("type: api\n    url: http://127.0.0.1:9/v1\n    model: llama", "type: [api]"),
            ("--model-url", "http://h/v1"),
            {},
            ("--model-url: service 'model' now reaches that URL and needs the served model: pass --model-id",),
        ),
    ],
    ids=["malformed_yaml", "unknown_key", "wrong_type", "bad_shard_flag", "bad_nel_shard_idx", "type_list_with_model_url"],
)
def test_cli_errors(tmp_path: Path, text: str, args: tuple[str, ...], env: dict[str, str], needles: tuple[str, ...]) -> None:
    (tmp_path / "config.yaml").write_text(text)
    assert_one_line_error(cli(tmp_path, "config.yaml", *args, env=env), *needles)


# --- declared ranges for every numeric limit (hardening, round two) ----------------------------

# Numbers that are identities, not limits: any integer is a valid seed.
NOT_LIMITS = {"seed", "shuffle_seed"}


def _numeric_fields(struct: type, seen: set[type]) -> list[tuple[str, str, bool]]:
    """(Struct.field, type, has a declared range) for every int/float field, recursing into
    nested Structs, lists and dicts of them."""
    import typing

    out = []
    if struct in seen:
        return out
    seen.add(struct)
    for f in msgspec.structs.fields(struct):
        tp = f.type
        todo = [tp]
        while todo:
            t = todo.pop()
            origin = typing.get_origin(t)
            if origin is typing.Annotated:
                base, *metas = typing.get_args(t)
                if base in (int, float):
                    out.append((f"{struct.__qualname__}.{f.name}", base.__name__, any(isinstance(m, msgspec.Meta) for m in metas)))
                else:
                    todo.append(base)
            elif t in (int, float):
                out.append((f"{struct.__qualname__}.{f.name}", t.__name__, False))
            elif origin is not None:
                todo.extend(typing.get_args(t))
            elif isinstance(t, type) and issubclass(t, msgspec.Struct):
                out.extend(_numeric_fields(t, seen))
    return out


def test_every_numeric_limit_of_every_config_section_declares_its_range() -> None:
    """The class, not the cases: core sections, every service and orchestrator plugin's section
    and every benchmark's params Struct; a field without a range is named here."""
    import importlib
    import pkgutil

    import shardeval_benchmarks
    from shardeval.config import RawConfig, ServiceConfig
    from shardeval.plugins import registry
    from shardeval.api.benchmark import ParamsStruct

    structs: list[type] = [RawConfig, ServiceConfig]
    for group in ("services", "orchestrators"):
        structs += [e.config for e in registry().entries[group].values() if e.config is not None]
    for module in pkgutil.iter_modules(shardeval_benchmarks.__path__):
        importlib.import_module(f"shardeval_benchmarks.{module.name}")
    structs += [c for c in _subclasses(ParamsStruct)]
    seen: set[type] = set()
    fields = [f for s in structs for f in _numeric_fields(s, seen)]
    assert len(fields) > 40  # the walk really sees the sections
    missing = sorted({name for name, _, ranged in fields if not ranged and name.rsplit(".", 1)[1] not in NOT_LIMITS})
    assert missing == [], f"numeric config fields without a declared range (msgspec.Meta): {missing}"


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("services.model.timeouts.connect=0", "services.model.timeouts.connect: must be a number > 0.0, got 0"),
        ("services.model.timeouts.first_token=-5", "services.model.timeouts.first_token: must be a number > 0.0, got -5"),
        ("services.model.timeouts.idle=0", "services.model.timeouts.idle: must be a number > 0.0, got 0"),
        ("services.model.timeouts.total=0", "services.model.timeouts.total: must be a number > 0.0, got 0"),
        ("services.model.timeouts.idle=.nan", "services.model.timeouts.idle: must be a number > 0.0, got nan"),
        ("services.model.retries.attempts=0", "services.model.retries.attempts: must be an integer >= 1, got 0"),
        ("services.model.retries.attempts=-3", "services.model.retries.attempts: must be an integer >= 1, got -3"),
        ("services.model.retries.backoff_base=-0.5", "services.model.retries.backoff_base: must be a number >= 0.0, got -0.5"),
        ("services.model.retries.backoff_max=-1", "services.model.retries.backoff_max: must be a number >= 0.0, got -1"),
        ("output.drain_timeout_s=-1", "output.drain_timeout_s: must be a number >= 0.0, got -1"),
        ("output.progress_interval_s=-1", "output.progress_interval_s: must be a number >= 0.0, got -1"),
        ("benchmarks.0.solver.generation.max_tokens=0", "benchmarks[0].solver.generation.max_tokens: must be an integer >= 1, got 0"),
        ("benchmarks.0.solver.generation.temperature=-1", "benchmarks[0].solver.generation.temperature: must be a number >= 0.0, got -1"),
        ("benchmarks.0.solver.generation.top_p=1.5", "benchmarks[0].solver.generation.top_p: must be a number <= 1.0, got 1.5"),
        ("cluster.parallel=0", "cluster.parallel: must be an integer >= 1, got 0"),
    ],
)
def test_nonsense_limits_are_one_line_naming_key_and_value(in_tmp: Path, override: str, expected: str) -> None:
    assert error(BASE, override) == f"config.yaml: {expected} (from -O {override})"


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("{type: sim, accuracy: 1.5}", "services.model.accuracy: must be a number <= 1.0, got 1.5"),
        ("{type: sim, fail_429: -0.1}", "services.model.fail_429: must be a number >= 0.0, got -0.1"),
        ("{type: sim, startup_timeout_s: 0}", "services.model.startup_timeout_s: must be a number > 0.0, got 0"),
        ("{type: vllm, model: m, tensor_parallel_size: 0}", "services.model.tensor_parallel_size: must be an integer >= 1, got 0"),
        ("{type: vllm, model: m, port: 70000}", "services.model.port: must be an integer <= 65535, got 70000"),
        ("{type: vllm, model: m, startup_timeout_s: -1}", "services.model.startup_timeout_s: must be a number > 0.0, got -1"),
        (
            "{type: api, url: 'http://h/v1', model: m, timeouts: {idle: '${IDLE}'}}",
            "services.model.timeouts.idle: must be a number > 0.0, got '0'",
        ),
    ],
)
def test_plugin_sections_declare_their_ranges_too(in_tmp: Path, section: str, expected: str) -> None:
    text = f"services:\n  model: {section}\nbenchmarks: [{{name: arith}}]\n"
    assert error(text, env={"IDLE": "0"}) == f"config.yaml: {expected}"


def test_a_nonsense_limit_stops_the_run_before_anything_is_written(tmp_path: Path) -> None:
    """Before: every request became a `timeout` error and the run exited 0."""
    (tmp_path / "config.yaml").write_text(BASE)
    result = cli(tmp_path, "config.yaml", "--shard", "0/1", "-o", "out", "-O", "services.model.timeouts.first_token=0")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "shardeval: error: config.yaml: services.model.timeouts.first_token: must be a number > 0.0, got 0 "
        "(from -O services.model.timeouts.first_token=0)"
    ]
    assert not (tmp_path / "out").exists()


# --- a value that is exactly one ${...} takes the YAML type where the schema has none -----------


def test_a_whole_expansion_in_params_takes_the_yaml_type(in_tmp: Path) -> None:
    text = BASE.replace(
        "params: {n: 20}",
        "params: {n: '${N:-500}', flag: '${FLAG}', ratio: '${R}', word: '${W}', label: 'n-${N:-500}', xs: ['${N:-500}'], "
        "none: '${EMPTY:-}'}\n    id: '${ID}'",
    ).replace("generation: {temperature: 0.0}", "generation: {temperature: '${R}', extra: {min_p: '${R}', seed_x: '${N:-1}'}}")
    config = load(text, env={"FLAG": "true", "R": "0.5", "W": "hello", "ID": "123"})
    bench = config.benchmarks[0]
    assert bench.params == {"n": 500, "flag": True, "ratio": 0.5, "word": "hello", "label": "n-500", "xs": [500], "none": ""}
    assert bench.id == "123"  # a typed str key keeps the text
    assert bench.solver.generation.temperature == 0.5 and bench.solver.generation.extra == {"min_p": 0.5, "seed_x": 1}
    # the same in a plugin's free-form mapping, and an -O override still wins
    sim = "services:\n  model: {type: sim, bench_params: {n: '${N}'}, model: '${N}'}\nbenchmarks: [{name: arith, params: {n: '${N}'}}]\n"
    config = load(sim, "benchmarks.0.params.n=9", env={"N": "42"})
    assert config.services["model"].bench_params == {"n": 42} and config.services["model"].model == "42"
    assert config.benchmarks[0].params == {"n": 9}


def test_a_whole_expansion_in_params_runs(tmp_path: Path) -> None:
    """`n: ${N:-500}` used to fail in the arith benchmark as "got '500'"."""
    (tmp_path / "config.yaml").write_text(BASE.replace("params: {n: 20}", "params: {n: '${N:-7}'}"))
    result = cli(tmp_path, "config.yaml", "--shard", "0/1", "-o", "out", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "arith: problems [0, 7) of 7" in result.stdout, result.stdout


@pytest.mark.parametrize("kind", ["[api]", "{a: 1}", "7"])
def test_a_service_type_that_is_not_a_name_is_one_line_even_beside_an_expansion(tmp_path, kind):
    """The `${VAR}` typing looks up the service's Struct by its `type` before the section is
    decoded: a list or a mapping there must reach the decoder's one-line error, not the registry."""
    cfg = tmp_path / "bad_type.yaml"
    cfg.write_text(
        f'services: {{model: {{type: {kind}, url: "${{SOME_URL:-http://127.0.0.1:9/v1}}", model: m}}}}\nbenchmarks: [{{name: arith}}]\n'
    )
    result = shardeval_cmd("run", str(cfg), "--dry-run")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "services.model: type: expected str" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "tags, message",
    [
        ('["<think>"]', "services.model.reasoning_tags: expected a list of 2 items, got 1"),
        ('["", "</think>"]', "services.model.reasoning_tags[0]: must not be empty"),
    ],
)
def test_a_value_of_the_wrong_length_is_named_in_words(tmp_path, tags, message):
    """Lengths are declared types too: a tuple's size and a string's minimum are said as such, not
    as msgspec's `Expected array of length 2` or a bare `expected str, got str`."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"services:\n  model: {{type: sim, bench: arith, reasoning_tags: {tags}}}\nbenchmarks:\n  - name: arith\n")
    done = shardeval_cmd("run", str(cfg), "--dry-run", "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.strip().endswith(message), done.stderr
