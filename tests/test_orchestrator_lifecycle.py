"""The orchestrator lifecycle the core runs (shardeval.launch.lifecycle): the phases in order, the
dry run, --fresh on the launcher, and the end of a launch (refused cells, merge, stop signal,
failed-shard report, exit code) written once. The orchestrators here are fakes that record what
they were asked; the built-in ones are run for real in test_lifecycle, test_preflight,
test_honest_outcomes, test_slurm, test_kubernetes, test_compose and test_ray."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from shardeval.api.orchestrator import CellOutcome, LaunchRequest, Orchestrator, orchestrate
from shardeval.config.loading import load_config
from shardeval.launch import lifecycle


def request(tmp_path, *, shards: int = 2, dry_run: bool = False, fresh: bool = False) -> LaunchRequest:
    quick = {"bench": "arith", "model_url": "http://127.0.0.1:9/v1", "model_id": "m"}
    config = load_config(None, [f"cluster.shards={shards}"], dict(quick))
    return LaunchRequest.create(config, None, [], quick, str(tmp_path / "run"), dry_run=dry_run, fresh=fresh)


class Fake(Orchestrator):
    """Records each phase; every cell ends with the next of `codes`."""

    codes: list[int | None] = [0, 0]
    stop: signal.Signals | None = None

    def __init__(self, request: LaunchRequest) -> None:
        super().__init__(request)
        self.calls: list[str] = []

    def plan(self) -> None:
        self.calls.append("plan")

    def dry_run(self) -> int:
        self.calls.append("dry_run")
        return 0

    def submit(self) -> int:
        self.calls.append("submit")
        return 0

    def wait(self) -> None:
        self.calls.append("wait")

    def collect(self) -> list[CellOutcome]:
        self.calls.append("collect")
        return [CellOutcome(cell, code) for cell, code in zip(self.request.cells(), self.codes)]

    def stopped_by(self) -> signal.Signals | None:
        return self.stop


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What the lifecycle merged and set aside, instead of doing it."""
    seen: dict[str, list[Any]] = {"merged": [], "set_aside": []}
    monkeypatch.setattr(lifecycle, "merge_and_report", seen["merged"].append)
    monkeypatch.setattr(lifecycle, "set_aside_shards", seen["set_aside"].append)
    return seen


def test_the_phases_run_in_order_and_a_launch_that_succeeds_merges_and_exits_0(tmp_path, recorded, capsys):
    fake = Fake(request(tmp_path))
    assert lifecycle.run_lifecycle(fake) == 0
    assert fake.calls == ["plan", "submit", "wait", "collect"]
    assert recorded == {"merged": [str(tmp_path / "run")], "set_aside": []}
    assert capsys.readouterr().err == ""


def test_a_dry_run_plans_and_prints_and_starts_and_moves_nothing(tmp_path, recorded):
    fake = Fake(request(tmp_path, dry_run=True, fresh=True))
    assert lifecycle.run_lifecycle(fake) == 0
    assert fake.calls == ["plan", "dry_run"]
    assert recorded == {"merged": [], "set_aside": []}


def test_fresh_sets_aside_on_the_launcher_before_submitting_unless_it_travels_to_the_nodes(tmp_path, recorded):
    fake = Fake(request(tmp_path, fresh=True))
    assert lifecycle.run_lifecycle(fake) == 0
    assert recorded["set_aside"] == [str(tmp_path / "run")]

    class OnTheNodes(Fake):
        fresh_on_launcher = False
        waits = False

    recorded["set_aside"].clear()
    recorded["merged"].clear()
    on_nodes = OnTheNodes(request(tmp_path, fresh=True))
    assert lifecycle.run_lifecycle(on_nodes) == 0
    assert on_nodes.calls == ["plan", "submit"] and recorded == {"merged": [], "set_aside": []}  # no wait, no merge


def test_a_failed_hand_over_is_the_launchs_exit_code(tmp_path, recorded):
    class Refused(Fake):
        def submit(self) -> int:
            return 1

    fake = Refused(request(tmp_path))
    assert lifecycle.run_lifecycle(fake) == 1
    assert recorded["merged"] == []


@pytest.mark.parametrize(
    ("codes", "exit_code", "said"),
    [
        ([3, 3], 3, "2 of 2 shards failed or finished with errors (0, 1)"),
        ([0, 3], 3, "1 of 2 shards failed or finished with errors (1)"),
        ([3, 1], 1, "2 of 2 shards failed or finished with errors (0, 1)"),
        ([143, 0], 1, "1 of 2 shards failed or finished with errors (0)"),
    ],
)
def test_failed_cells_are_merged_then_named_and_the_exit_code_says_how_they_ended(tmp_path, recorded, capsys, codes, exit_code, said):
    fake = Fake(request(tmp_path))
    fake.codes = codes
    assert lifecycle.run_lifecycle(fake) == exit_code
    assert recorded["merged"] == [str(tmp_path / "run")]
    assert f"shardeval: {said}; rerun the same command to resume them" in capsys.readouterr().err


def test_a_refused_cell_stops_the_merge_unless_the_orchestrator_merges_the_rest(tmp_path, recorded, capsys):
    fake = Fake(request(tmp_path))
    fake.codes = [0, 2]
    assert lifecycle.run_lifecycle(fake) == 2
    err = capsys.readouterr().err
    assert "shardeval: shard 1/2 refused to start (exit 2, the reason above); nothing merged: what its directory holds" in err
    assert recorded["merged"] == []

    fake = Fake(request(tmp_path))
    fake.codes = [2, 2]
    assert lifecycle.run_lifecycle(fake) == 2
    assert (
        f"every shard refused to start (exit 2, the reason above); nothing merged: what {tmp_path / 'run'} holds" in capsys.readouterr().err
    )

    class MergesTheRest(Fake):
        refusal_stops_the_merge = False

    rest = MergesTheRest(request(tmp_path))
    rest.codes = [0, 2]
    assert lifecycle.run_lifecycle(rest) == 2  # every failed cell refused
    assert recorded["merged"] == [str(tmp_path / "run")] and "1 of 2 shards failed" in capsys.readouterr().err


def test_a_stop_signal_merges_what_exists_says_so_and_exits_like_the_shards(tmp_path, recorded, capsys):
    fake = Fake(request(tmp_path))
    fake.codes, fake.stop = [143, None], signal.SIGTERM
    assert lifecycle.run_lifecycle(fake) == 143
    err = capsys.readouterr().err
    assert "shardeval: interrupted by SIGTERM; rerun the same command to resume the shards" in err
    assert "failed or finished" not in err and recorded["merged"] == [str(tmp_path / "run")]


def test_cells_cancelled_without_a_signal_here_exit_130_after_the_report(tmp_path, recorded, capsys):
    class NoMerge(Fake):
        def merges(self) -> bool:
            return False

    fake = NoMerge(request(tmp_path))
    fake.codes = [0, None]
    assert lifecycle.run_lifecycle(fake) == 130
    err = capsys.readouterr().err
    assert f"shardeval: not merged (merge: false); `shardeval merge {tmp_path / 'run'}` merges the shards" in err
    assert "1 of 2 shards failed or finished with errors (1)" in err and recorded["merged"] == []


def test_orchestrate_runs_an_orchestrator_through_the_lifecycle_and_the_older_form_as_it_is(tmp_path, recorded):
    assert orchestrate(Fake, request(tmp_path)) == 0 and recorded["merged"] == [str(tmp_path / "run")]
    seen: list[LaunchRequest] = []

    def older(launch: LaunchRequest) -> int:  # a plain function that does the whole launch itself
        seen.append(launch)
        return 7

    the_request = request(tmp_path)
    assert orchestrate(older, the_request) == 7 and seen == [the_request]
