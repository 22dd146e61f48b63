"""`shardeval watch`: evaluate a training run's checkpoints as they appear, each once, when whole.

One loop, one process per sweep root (its lease: <out>/watch/shard.lock, heartbeat.json):

1. **Poll.** Resolve `sweep.checkpoints.paths` again; for every folder that is no temporary name,
   take a snapshot (shardeval.watch.readiness) and decide: still waiting (and for what), ready,
   rewritten in place since it was evaluated (its results are moved to watch/superseded/ and it
   waits to be whole again: a new identity, never mixed with the old rows), or deleted.
2. **Launch.** Each checkpoint that became ready is launched once, through the configured
   orchestrator (shardeval.watch.launcher), and recorded in watch/state.json before the poll ends.
3. **Collect.** A launch whose cells all ended (read from their manifests) is merged into the
   sweep at once: that model's merged/, then sweep.json, sweep.md, sweep.html, and the `export:`
   trackers at its step (shardeval.results.sweep_merge.IncrementalSweep: the cost of adding one
   checkpoint does not grow with the number before it). A launch that failed (cells that never
   ended) is launched again, up to `watch.retries` times, then marked failed; the watch goes on.

A restarted watcher (after a crash, a SIGKILL, a reboot) reads state.json and adopts what it
finds: a launch whose process or cells are alive is waited for, one that ended is collected, one
that died is launched again (its cells resume). So nothing that finished or still runs is ever
launched twice.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any

from shardeval import plugins
from shardeval.config.loading import load_config
from shardeval.config.schema import Config, WatchConfig
from shardeval.config.sweep import checkpoint_name, expand_paths, natural
from shardeval.errors import EXIT_WITH_ERRORS, ShardError, UsageError
from shardeval.launch import log, setup_logging
from shardeval.results import trackers
from shardeval.results.incremental import IncrementalSweep
from shardeval.store.discover import PLAN_FILE, WATCH_DIR
from shardeval.store.atomic import atomic_write
from shardeval.store.liveness import ShardLease, clock
from shardeval.store.records import SweepPlan, pretty_json
from shardeval.store.watch_state import ENDED, CheckpointState, WatchState, read_watch_state, write_watch_state
from shardeval.watch.launcher import CellsOutcome, LaunchSpec, cells_outcome, launcher_alive, process_start, stop_launcher
from shardeval.watch.readiness import is_temporary, snapshot, waiting_for

STOP_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}
TICK_S = 0.5  # how often the loop looks at its launches between polls
READY = "whole; waiting for a launch slot"  # a checkpoint's `why` between its poll and its launch


def run_watch(config_path: str, overrides: tuple[str, ...], output_dir: str | None, once: bool) -> int:
    """`shardeval watch`: its logging on stderr, the watch checked, then run to its exit code."""
    setup_logging()
    return Watcher.create(config_path, overrides, output_dir, once=once).run()


class WatchLease(ShardLease):
    """One watcher per sweep root: the lease of <out>/watch/ (a second watcher is refused)."""

    def _refusal(self, holder: Any) -> str:
        who = f"pid {holder.pid} on {holder.host} since {clock(holder.started_at)}" if holder is not None else "another process"
        root = os.path.dirname(self.out_dir)
        return f"{root} is already watched by {who}; one watcher per sweep: stop that one first (SIGTERM), or watch into another -o"


class Watcher:
    """One watch of one sweep root (see the module doc); `create` checks everything it can first."""

    def __init__(self, config: Config, config_path: str, overrides: tuple[str, ...], root: str, once: bool) -> None:
        assert config.sweep is not None and config.sweep.checkpoints is not None
        self.config, self.root, self.once = config, root, once
        self.checkpoints = config.sweep.checkpoints
        self.rule = self.checkpoints.ready_rule()
        self.settings = config.sweep.watch or WatchConfig()
        generated = {checkpoint_name(path, self.checkpoints.prefix) for path in self._found()}
        self.fixed = [name for name in config.sweep.services if name not in generated]
        self.spec = LaunchSpec(config_path, overrides, root, config.cluster.shards or 1)
        self.stop: signal.Signals | None = None
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.last_news = time.time()
        self.slots: int | None = self.settings.parallel or 1  # launches at once (None: no limit)
        self.held_until: dict[str, float] = {}  # checkpoint -> until when its scheduler is taken to still hold its cells
        self.state = WatchState(config=os.path.abspath(config_path), started_at=time.time(), poll_s=self.settings.poll_s)
        self.sweep = IncrementalSweep(root)

    @classmethod
    def create(cls, config_path: str, overrides: tuple[str, ...], output_dir: str | None, once: bool = False) -> Watcher:
        """The watch of `config_path`, refused in one line (exit 2) before anything starts when it
        cannot watch: no checkpoints to find, an orchestrator that runs nothing itself."""
        config = load_config(config_path, list(overrides), {}, sweep_may_be_empty=True)  # no checkpoint yet is the usual start
        sweep = config.sweep
        if sweep is None or sweep.checkpoints is None:
            raise UsageError(
                f"{config_path}: `shardeval watch` evaluates the checkpoints a sweep finds; add `sweep.checkpoints` "
                "(its template and paths, docs/watch.md)"
            )
        factory = plugins.registry().get("orchestrators", config.cluster.type, "cluster.type").factory
        factory = factory.load() if hasattr(factory, "load") else factory
        if not getattr(factory, "results_on_launcher", True):
            raise UsageError(
                f"cluster.type {config.cluster.type}: its cells write their results where this machine cannot read them "
                "(a volume of the cluster), and a watcher reads each cell's manifest; run the watch where the results are "
                "(local, slurm or ray on a shared filesystem), or launch each checkpoint with `shardeval run` yourself"
            )
        if not getattr(factory, "runs_cells", True):
            raise UsageError(
                f"cluster.type {config.cluster.type}: it writes the files that run the cells and prints how to start them, so "
                "a watcher cannot know when a checkpoint's cells run; watch with one that runs or submits them "
                "(local, slurm, ray), or launch each checkpoint with `shardeval run` yourself"
            )
        watcher = cls(config, config_path, overrides, output_dir or config.output.dir, once)
        if watcher.settings.parallel is None and not getattr(factory, "waits", True):
            watcher.slots = None  # a scheduler queues the cells: every ready checkpoint is submitted at once
        return watcher

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> int:
        lease = WatchLease(os.path.join(self.root, WATCH_DIR))
        os.makedirs(lease.out_dir, exist_ok=True)
        lease.acquire()
        for sig in STOP_CODES:
            signal.signal(sig, self._on_signal)
        try:
            self.state = self._adopt()
            return self._loop()
        finally:
            lease.release()

    def _on_signal(self, sig: int, frame: object) -> None:
        first = self.stop is None
        self.stop = signal.Signals(sig)
        for child in self.children.values():  # local launches drain, as `run`'s shards do on a stop signal
            stop_launcher(child.pid, self.stop)
        if first:
            log.info("%s: no more polls; waiting for the launches this watcher started to drain", self.stop.name)

    def _loop(self) -> int:
        while True:
            self._poll()
            self._collect()
            self._launch_ready()
            if self.once or self.stop is not None:
                self._drain()
                return self._finish("--once" if self.stop is None else self.stop.name)
            if (why := self._until()) is not None:
                return self._finish(why)
            deadline = time.time() + self.settings.poll_s
            self.state.next_poll_at = deadline
            self._save()
            while time.time() < deadline and self.stop is None:
                time.sleep(min(TICK_S, max(deadline - time.time(), 0.0)))
                if self._collect():
                    self._launch_ready()
                    self._save()

    def _drain(self) -> None:
        """Wait for the launches this process started (after a stop signal, which they were given:
        they drain); with --once, launch the ready ones still waiting for a slot as slots free."""
        while True:
            while any(child.poll() is None for child in self.children.values()):
                time.sleep(TICK_S)
            self._collect(final=self.stop is not None)
            if self.stop is None:
                self._launch_ready()
            if all(child.poll() is not None for child in self.children.values()):
                return  # what is left runs on a scheduler (the next watch merges it)

    def _finish(self, why: str) -> int:
        code = self._exit_code()
        self.state.stopped, self.state.exit_code, self.state.next_poll_at = why, code, None
        self._save()
        counts = {status: sum(c.status == status for c in self.state.checkpoints.values()) for status in ("done", "errors", "failed")}
        running = sum(c.status == "running" for c in self.state.checkpoints.values())
        log.info(
            "watch ended (%s): %d done, %d with errors, %d failed%s; exit %d",
            why,
            *counts.values(),
            f", {running} still running on their orchestrator" if running else "",
            code,
        )
        return code

    def _exit_code(self) -> int:
        if self.stop is not None:
            return STOP_CODES[self.stop]
        statuses = {c.status for c in self.state.checkpoints.values()}
        return 1 if "failed" in statuses else EXIT_WITH_ERRORS if "errors" in statuses else 0

    def _until(self) -> str | None:
        """Why the watch ends now (`watch.until`), or None."""
        until = self.settings.until
        if until is None or self._running():
            return None
        target = self.state.checkpoints.get(until.checkpoint) if until.checkpoint else None
        if target is not None and target.status in ENDED:
            return f"until: {until.checkpoint} evaluated"
        if until.idle_s is not None and time.time() - self.last_news >= until.idle_s:
            return f"until: nothing new for {until.idle_s:g} s"
        return None

    def _running(self) -> list[CheckpointState]:
        return [c for c in self.state.checkpoints.values() if c.status == "running"]

    # -- state ----------------------------------------------------------------------------------

    def _adopt(self) -> WatchState:
        """The state a previous watcher left (its launches still running are waited for, not launched again)."""
        state = read_watch_state(self.root)
        if state is None:
            return self.state
        state.stopped = state.exit_code = None
        state.poll_s = self.settings.poll_s
        adopted = [c.name for c in state.checkpoints.values() if c.status == "running"]
        if adopted:
            log.info("resuming the watch of %s: %d launch(es) from before: %s", self.root, len(adopted), ", ".join(adopted))
        return state

    def _save(self) -> None:
        write_watch_state(self.root, self.state)

    # -- poll -----------------------------------------------------------------------------------

    def _found(self) -> list[str]:
        """The checkpoint paths the config's globs find now that exist, in natural order."""
        return [path for path in expand_paths(self.checkpoints.paths) if os.path.exists(path)]

    def _poll(self) -> None:
        now = time.time()
        self.state.polls += 1
        self.state.last_poll_at = now
        for name in self.fixed:  # a service the sweep names: launched once, when the watch starts
            if name not in self.state.checkpoints:
                self.state.checkpoints[name] = CheckpointState(name=name, path="", first_seen=now, why=READY)
        seen = set()
        for path in self._found():
            if is_temporary(path, self.rule):
                continue
            name = checkpoint_name(path, self.checkpoints.prefix)
            seen.add(name)
            self._look_at(name, path, now)
        for c in self.state.checkpoints.values():
            if c.path and c.name not in seen and c.deleted_at is None and not os.path.exists(c.path):
                self._deleted(c, now)
        self._save()

    def _look_at(self, name: str, path: str, now: float) -> None:
        """One checkpoint the glob finds: new, still waiting, ready (launch it), or rewritten."""
        c = self.state.checkpoints.get(name)
        if c is None:
            c = self.state.checkpoints[name] = CheckpointState(name=name, path=path, first_seen=now)
            self.last_news = now
            log.info("checkpoint %s: found (%s)", name, path)
        if c.status == "running":
            return
        snap = snapshot(path, self.rule.marker)
        if not snap.exists:
            return
        c.deleted_at = None
        if c.status in ENDED:
            if c.fingerprint is None or snap.fingerprint == c.fingerprint:
                return
            self._rewritten(c, now)
        c.status = "waiting"
        c.why = waiting_for(snap, self.rule, now) or ""
        if c.why:
            c.ready_at = None
            return
        c.ready_at = c.ready_at or now
        c.fingerprint = snap.fingerprint
        c.why = READY

    def _launch_ready(self) -> None:
        """Launch the checkpoints found whole, in natural order, while launch slots are free."""
        for c in sorted(self.state.checkpoints.values(), key=lambda c: (bool(c.path), natural(c.name))):  # named services first
            if c.status != "waiting" or c.why != READY or self.stop is not None:
                continue
            if self.slots is not None and len(self._running()) >= self.slots:
                c.why = READY  # still whole; it waits for a slot
                return
            if c.path and snapshot(c.path, self.rule.marker).fingerprint != c.fingerprint:  # changed since the poll: look again then
                c.why, c.ready_at = "changed since it was found whole; looked at again at the next poll", None
                continue
            self._launch(c, time.time())

    def _rewritten(self, c: CheckpointState, now: float) -> None:
        """Same name, other bytes: a new identity. Its earlier results leave the sweep (kept under
        watch/superseded/; the table shows it as not started meanwhile), and it is evaluated
        again once whole."""
        old = os.path.join(self.root, c.name)
        if os.path.isdir(old):
            aside = os.path.join(self.root, WATCH_DIR, "superseded", f"{c.name}.{c.fingerprint}.{int(now)}")
            os.makedirs(os.path.dirname(aside), exist_ok=True)
            shutil.move(old, aside)
            c.superseded = [*c.superseded, os.path.relpath(aside, self.root)]
        log.info("checkpoint %s: rewritten in place (new files); its earlier results moved to watch/superseded/, evaluated again", c.name)
        c.status, c.failures, c.exit_code, c.ready_at, c.finished_at = "waiting", 0, None, None, None
        self.last_news = now
        self._merge([])

    def _deleted(self, c: CheckpointState, now: float) -> None:
        c.deleted_at = now
        if c.status == "waiting":
            c.status, c.why = "deleted", "deleted before it was whole; never launched"
            log.info("checkpoint %s: deleted before it was whole; not evaluated", c.name)
            return
        kept = self.settings.keep_results_of_deleted
        log.info("checkpoint %s: deleted by the trainer; its results %s", c.name, "stay in the sweep" if kept else "leave the sweep")
        if not kept and c.status in ENDED:
            self._merge([])

    # -- launch and collect ---------------------------------------------------------------------

    def _in_plan(self) -> list[CheckpointState]:
        """The checkpoints the sweep's table holds: every one launched, in natural order (one the
        trainer deleted only while keep_results_of_deleted)."""
        keep = self.settings.keep_results_of_deleted
        listed = [
            c for c in self.state.checkpoints.values() if c.path and c.launches and (keep or c.deleted_at is None or c.status == "running")
        ]
        return sorted(listed, key=lambda c: natural(c.name))

    def _plan(self) -> SweepPlan | None:
        """The sweep's models now: the named services, then the checkpoints launched (running or ended)."""
        fixed = [name for name in self.fixed if name in self.state.checkpoints and self.state.checkpoints[name].launches]
        names = fixed + [c.name for c in self._in_plan()]
        if not names:
            return None
        sweep = self.config.sweep
        baseline = sweep.baseline if sweep is not None and sweep.baseline in names else names[0]
        return SweepPlan(services=names, baseline=baseline, shards=self.spec.shards, gate=sweep.gate if sweep is not None else None)

    def _launch(self, c: CheckpointState, now: float) -> None:
        c.status, c.launches, c.launched_at, c.finished_at, c.exit_code = "running", c.launches + 1, now, None, None
        plan = self._plan()
        assert plan is not None  # it holds this checkpoint now
        child = self.spec.start(c.name, [x.path for x in self._in_plan()], plan.baseline, c.launches)
        self.children[c.name] = child
        c.launcher_pid, c.launcher_start = child.pid, process_start(child.pid)
        c.why = f"launched ({self.config.cluster.type}); log: {os.path.relpath(self.spec.log_path(c.name, c.launches), self.root)}"
        self._save()  # before anything else can happen: a restarted watcher must know this launch exists
        log.info("checkpoint %s: whole; launch %d of its cells (%s)", c.name, c.launches, self.config.cluster.type)

    def _collect(self, final: bool = False) -> bool:
        """Settle every launch whose cells all ended; True when one was settled."""
        settled = [c.name for c in self._running() if self._settle(c, final)]
        if settled:
            self._merge(settled)
        return bool(settled)

    def _settle(self, c: CheckpointState, final: bool) -> bool:
        """Whether this launch ended now (and its model is to be merged)."""
        child = self.children.get(c.name)
        if child is not None and child.poll() is None:
            return False
        if child is None and launcher_alive(c.launcher_pid, c.launcher_start):
            return False
        outcome = cells_outcome(self.root, c.name, self.spec.shards)
        if outcome.running:
            return False
        if self._held_by_scheduler(c, outcome, child):
            return False
        launch_code = child.returncode if child is not None else None
        self.children.pop(c.name, None)
        c.launcher_pid = c.launcher_start = None
        c.finished_at = self.last_news = time.time()
        if outcome.all_ended:
            c.status, c.exit_code = ("done", 0) if outcome.exit_code == 0 else ("errors", outcome.exit_code)
            c.why = "every cell complete" if c.status == "done" else "every cell ended; some pairs in errors"
            log.info("checkpoint %s: %s", c.name, c.why)
            return True
        if (self.stop is not None or final) and launch_code in STOP_CODES.values():
            c.status, c.why = "waiting", "stopped with the watch; the next watch resumes it"
            return False
        c.failures += 1
        c.exit_code = launch_code if launch_code not in (None, 0) else 1
        if c.failures <= self.settings.retries and self.stop is None and not final:
            log.warning("checkpoint %s: launch %d failed (%s); launching it again", c.name, c.launches, outcome.why)
            self._launch(c, time.time())
            return False
        c.status, c.why = "failed", f"failed after {c.launches} launch(es): {outcome.why}"
        log.warning("checkpoint %s: %s", c.name, c.why)
        return True

    def _held_by_scheduler(self, c: CheckpointState, outcome: CellsOutcome, child: subprocess.Popen[bytes] | None) -> bool:
        """Whether the scheduler a launch submitted to still holds cells of it (queued or running),
        asked (when its launch exited 0, or is gone after a restart, and some cell has not ended)
        through the launch_pending hook, at most once a poll: a SLURM launch exits once its array
        is queued, and a queued array is waited for, never submitted again. The checkpoint is then
        left to the scheduler, as after a restart."""
        if outcome.all_ended or (child is not None and child.returncode != 0):
            return False
        now = time.time()
        if now < self.held_until.get(c.name, 0.0):
            return True
        if not plugins.hooks().launch_pending(run_dir=self.root, service=c.name):  # False, or None: no plugin can tell
            self.held_until.pop(c.name, None)
            return False
        if c.name not in self.held_until:
            log.info("checkpoint %s: its cells are queued on %s (or running there); waited for", c.name, self.config.cluster.type)
        self.held_until[c.name] = now + self.settings.poll_s
        self.children.pop(c.name, None)
        c.launcher_pid = c.launcher_start = None
        c.why = f"queued on {self.config.cluster.type} (or running there); waited for, not launched again"
        return True

    def _merge(self, changed: list[str]) -> None:
        """The sweep updated in place: the plan, the changed models' merges, the sweep files, the trackers."""
        plan = self._plan()
        if plan is None:
            return
        atomic_write(os.path.join(self.root, PLAN_FILE), pretty_json(plan))
        try:
            merged = self.sweep.update(plan, changed)
        except (UsageError, ShardError) as exc:  # the watch goes on; `shardeval merge` says the same
            log.warning("warning: the sweep was not updated (%s): %s", ", ".join(changed) or "a model left", exc)
            return
        for line in merged.warnings:
            log.warning("warning: %s", line)
        log.info("sweep updated (%s): %s", ", ".join(changed) or "a model left", merged.verdict)
        if changed:  # each model's tracker runs once, at its step, when its cells ended
            trackers.export_after_merge(
                merged, lambda line: log.warning("warning: %s", line), lambda line: log.info("%s", line), services=changed
            )
