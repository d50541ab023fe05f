"""Batch throughput: the same ``ggtts batch`` job run locally on one worker, locally on two, and on Ray, in one run.

Each configuration is the real command (``python -m ggtts.cli batch ...``) in a fresh process with a fresh output
folder, so its wall time includes the interpreter, the model loads and, for Ray, starting and stopping a local
cluster. While it runs, this script watches the manifest grow (each record timed as it appears, to 0.05 s) and
samples the memory and CPU time of the command's process tree.

    python benchmarks/batch_throughput.py [--items 100] [--configs local1,local2,ray2] [-m MODEL]
    python benchmarks/batch_throughput.py --items 10 --configs local1      # a quick run

Prints per configuration: wall seconds, items/s, seconds of audio per second, the startup (launch to first
record), steady per-worker throughput, per-item overhead, the driver's CPU per item and peak memory; then a
projection for a Ray cluster of N machines like this one, computed from those measurements (not measured).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "manifest.jsonl"
POLL_S = 0.05  # how often the manifest is read
MEMORY_EVERY = 5  # polls between samples of the process tree (0.25 s)
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
MACHINES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Config:
    label: str
    args: tuple[str, ...]
    workers: int
    ray: bool = False


def configs(cpus: int) -> dict[str, Config]:
    return {
        "local1": Config("local, 1 worker, torch default threads", ("--workers", "1"), 1),
        "local2": Config(f"local, 2 workers x {max(1, cpus // 2)} threads", ("--workers", "2"), 2),
        "ray2": Config(
            "Ray (local cluster), 2 actors x 1 thread", ("--ray", "local", "--workers", "2", "--threads", "1"), 2, True
        ),
    }


# ---- input ---------------------------------------------------------------------------------------------------
SUBJECTS = (
    "The old captain",
    "A young engineer",
    "My neighbour",
    "The quiet librarian",
    "Our new teacher",
    "A tired farmer",
    "The curious child",
    "Her brother",
    "The night nurse",
    "A travelling musician",
)
VERBS = ("repaired", "painted", "carried", "found", "opened", "described", "forgot", "sold", "noticed", "cleaned")
OBJECTS = (
    "the wooden gate",
    "a small red boat",
    "the heavy iron key",
    "an old map",
    "the kitchen window",
    "a box of letters",
    "the broken clock",
    "two green bicycles",
    "the garden shed",
    "a silver lamp",
)
TAILS = (
    "before the storm arrived.",
    "near the railway station.",
    "on a sunny Tuesday morning.",
    "after a long day at work.",
    "while everyone else slept.",
    "without saying a word.",
    "at the end of summer.",
    "in the middle of the night.",
)
QUESTIONS = ("Why did {s} say nothing {t}", "Did {s} really see {o} {t}", "How many times had {s} {v} {o}?")


def make_items(n: int, seed: int = 1234) -> list[dict[str, str]]:
    """``n`` short English sentences of 8 to 12 words, varied, the same for the same ``n`` and seed."""
    rng = random.Random(seed)
    items: list[dict[str, str]] = []
    texts: set[str] = set()
    while len(items) < n:
        s, v, o, t = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(TAILS)
        if rng.random() < 0.2:
            q = rng.choice(QUESTIONS)
            text = q.format(s=s.lower(), v=v, o=o, t=t.rstrip(".")).rstrip("?") + "?"
        else:
            text = f"{s} {v} {o} {t}"
        if 8 <= len(text.split()) <= 12 and text not in texts:
            texts.add(text)
            items.append({"id": f"s{len(items):04d}", "text": text})
    return items


# ---- one configuration ----------------------------------------------------------------------------------------
@dataclass
class Run:
    config: Config
    wall_s: float = 0.0
    status: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    seen_s: list[float] = field(default_factory=list)  # when each record appeared, from the launch
    driver_cpu_s: list[float] = field(default_factory=list)  # the command's own CPU time then
    peak_tree_mib: float = 0.0
    peak_tree_pss_mib: float = 0.0  # proportional: a page shared by n processes counted 1/n in each
    peak_process_mib: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # the 1-minute load average before and after
    log: str = ""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree[ppid].append(int(entry))
    return tree


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except OSError:
        return 0.0


def _pss_mib(pid: int) -> float:
    """Proportional set size: each page shared by n processes counted 1/n (weights mapped from one file)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_rss_mib(root: int) -> tuple[float, float, float]:
    """The summed and the largest resident memory of ``root`` and every process under it, and their summed
    proportional set size (RSS counts a page the workers share, the model's weights mapped from one file, once
    in each of them; PSS counts it once in all)."""
    tree, todo, sizes, shares = _children(), [root], [], []
    while todo:
        pid = todo.pop()
        sizes.append(_rss_mib(pid))
        shares.append(_pss_mib(pid))
        todo.extend(tree.get(pid, ()))
    return sum(sizes), max(sizes), sum(shares)


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def run_config(config: Config, source: Path, out: Path, model: str | None, total: int) -> Run:
    cmd = [sys.executable, "-m", "ggtts.cli", "batch", str(source), "--out", str(out), "--no-progress", *config.args]
    if model is not None:
        cmd += ["-m", model]
    run = Run(config)
    manifest = out / MANIFEST
    log_path = out.with_suffix(".log")
    buffer, offset = b"", 0
    before = os.getloadavg()[0]
    with open(log_path, "w+") as log:
        start = time.perf_counter()
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        polls = 0
        while True:
            driver = cpu_s(process.pid)  # before poll(), which reaps the process once it has exited
            finished = process.poll() is not None
            now = time.perf_counter() - start
            if manifest.exists():
                with open(manifest, "rb") as f:
                    f.seek(offset)
                    data = f.read()
                offset += len(data)
                *lines, buffer = (buffer + data).split(b"\n")
                for line in lines:
                    run.records.append(json.loads(line))
                    run.seen_s.append(now)
                    run.driver_cpu_s.append(driver)
            if finished:
                break
            if polls % MEMORY_EVERY == 0:
                tree, largest, proportional = tree_rss_mib(process.pid)
                run.peak_tree_mib = max(run.peak_tree_mib, tree)
                run.peak_tree_pss_mib = max(run.peak_tree_pss_mib, proportional)
                run.peak_process_mib = max(run.peak_process_mib, largest)
            polls += 1
            time.sleep(POLL_S)
        run.wall_s = time.perf_counter() - start
        run.load = (before, os.getloadavg()[0])
        run.status = process.returncode
        log.seek(0)
        run.log = log.read()
    if run.status != 0 or len(run.records) != total:
        print(f"batch_throughput: {config.label}: exit status {run.status}, {len(run.records)} of {total} records")
        print("  " + "\n  ".join(run.log.strip().splitlines()[-15:]))
    return run


# ---- figures --------------------------------------------------------------------------------------------------
def figures(run: Run) -> dict[str, Any]:
    done = [
        (r, t, c) for r, t, c in zip(run.records, run.seen_s, run.driver_cpu_s, strict=True) if r["status"] == "done"
    ]
    audio = sum(r["audio_seconds"] for r, _, _ in done)
    f: dict[str, Any] = {
        "label": run.config.label,
        "workers": run.config.workers,
        "ray": run.config.ray,
        "speaks_here": run.config.workers == 1 and not run.config.ray,  # the command itself speaks the items
        "status": run.status,
        "done": len(done),
        "failed": len(run.records) - len(done),
        "wall_s": run.wall_s,
        "items_per_s": len(done) / run.wall_s,
        "audio_s": audio,
        "audio_per_s": audio / run.wall_s,
        "peak_tree_mib": run.peak_tree_mib,
        "peak_tree_pss_mib": run.peak_tree_pss_mib,
        "peak_process_mib": run.peak_process_mib,
        "load_1m": run.load,
    }
    if len(done) < 2:
        return f  # too few items for the timings
    first_t, last_t = done[0][1], done[-1][1]
    f["first_record_s"] = first_t
    f["teardown_s"] = run.wall_s - last_t
    f["load_s"] = max((r.get("load_seconds", 0.0) for r, _, _ in done), default=0.0)
    # Steady state: each worker's items after its first (which carries the warm-up), audio over busy seconds.
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen_by_worker: dict[str, list[float]] = defaultdict(list)
    for r, t, _ in done:
        by_worker[r["worker"]].append(r)
        seen_by_worker[r["worker"]].append(t)
    rates = []
    for records in by_worker.values():
        later = records[1:]
        busy = sum(r["seconds"] for r in later)
        if busy > 0:
            rates.append(sum(r["audio_seconds"] for r in later) / busy)
    f["worker_processes"] = len(by_worker)
    f["steady_per_worker"] = sum(rates) / len(rates) if rates else float("nan")
    steady = [r for records in by_worker.values() for r in records[1:]]
    if not steady:
        return f
    f["item_busy_s"] = sum(r["seconds"] for r in steady) / len(steady)
    f["item_audio_s"] = sum(r["audio_seconds"] for r in steady) / len(steady)
    # Each worker, from its first record to its last, spoke (or loaded a model for) its later items; the rest of
    # that span is per-item overhead: the call's hand-over and return, waiting for the next item.
    span = spent = 0.0
    for records, seen in zip(by_worker.values(), seen_by_worker.values(), strict=True):
        span += seen[-1] - seen[0]
        spent += sum(r["seconds"] + r.get("load_seconds", 0.0) for r in records[1:])
    f["overhead_raw_per_item_s"] = (span - spent) / len(steady)  # below 0 only by the 0.05 s polling error
    f["overhead_per_item_s"] = max(0.0, f["overhead_raw_per_item_s"])
    # All workers together from the first record to the last, and the command's own CPU time per item meanwhile.
    window = last_t - first_t
    rest = done[1:]
    f["window_audio_per_s"] = sum(r["audio_seconds"] for r, _, _ in rest) / window if window > 0 else float("nan")
    f["driver_cpu_per_item_s"] = (done[-1][2] - done[0][2]) / len(rest)
    return f


def print_table(results: list[dict[str, Any]]) -> None:
    header = (
        f"{'configuration':<42}{'wall s':>8}{'items/s':>9}{'audio s/s':>10}{'1st rec s':>10}{'model s':>8}"
        f"{'steady/wkr':>11}{'ovh ms/it':>10}{'drv ms/it':>10}{'tree MiB':>9}{'tree PSS':>9}{'proc MiB':>9}"
        f"{'loadavg':>11}"
    )
    print(header)
    for f in results:
        if "item_busy_s" not in f:
            why = "too few items per worker for the timings" if f["status"] == 0 else f"exit status {f['status']}"
            print(f"{f['label']:<42}  {why}: {f['done']} items done in {f['wall_s']:.1f} s")
            continue
        driver = "-" if f["speaks_here"] else f"{f['driver_cpu_per_item_s'] * 1e3:.0f}"
        print(
            f"{f['label']:<42}{f['wall_s']:>8.1f}{f['items_per_s']:>9.2f}{f['audio_per_s']:>10.2f}"
            f"{f['first_record_s']:>10.1f}{f['load_s']:>8.1f}{f['steady_per_worker']:>11.2f}"
            f"{f['overhead_per_item_s'] * 1e3:>10.0f}{driver:>10}"
            f"{f['peak_tree_mib']:>9.0f}{f['peak_tree_pss_mib']:>9.0f}{f['peak_process_mib']:>9.0f}"
            f"{'{:.1f}>{:.1f}'.format(*f['load_1m']):>11}"
        )
    print(
        "  wall s: launch to exit of the command (interpreter, model loads, Ray start/stop included); "
        "1st rec s: launch to the first item in the manifest;\n"
        "  model s: the slowest worker's model load; steady/wkr: seconds of audio per busy second of one worker, "
        "each worker's first item left out;\n"
        "  ovh ms/it: per item, the part of each worker's span from its first record to its last not spent speaking "
        "or loading (item and result hand-over);\n"
        "  drv ms/it: CPU time of the command's own process per item in that window (- where it speaks the items "
        "itself);\n"
        f"  tree MiB: peak of the summed RSS of the command and every process under it (Ray's daemons and workers "
        f"included; shared pages counted per process), proc MiB: the largest single process; sampled every "
        f"{POLL_S * MEMORY_EVERY:g} s;\n"
        f"  loadavg: the machine's 1-minute load average before > after (this job alone brings it towards "
        f"{os.cpu_count()}; more means other work shared the CPUs)"
    )


def print_projection(f: dict[str, Any], per_machine: int, job_items: int) -> None:
    """Throughput of W = machines x per_machine workers from one worker's measured steady cost per item, capped by
    the driver's measured CPU per item; plus the fixed startup and teardown of one run."""
    per_item = f["item_busy_s"] + f["overhead_per_item_s"]  # one worker's time per item, in steady state
    driver = f["driver_cpu_per_item_s"]
    fixed = f["first_record_s"] + f["teardown_s"]
    print(
        f"\nPROJECTION (computed from the '{f['label']}' measurements above, not measured): a Ray cluster of N "
        f"machines like this one,\n{per_machine} one-thread workers each; per worker {f['item_busy_s']:.3f} s "
        f"speaking + {f['overhead_per_item_s']:.3f} s overhead per item of {f['item_audio_s']:.2f} s audio; the "
        f"driver's {driver * 1e3:.1f} ms CPU per item caps the items/s;\nplus the {fixed:.1f} s fixed cost of a run "
        f"(launch to first record + teardown, here with starting a local cluster), taken as the same at any size."
    )
    print(
        f"{'machines':>8}{'workers':>9}{'items/s':>10}{'audio s/s':>11}{'limited by':>12}{f'{job_items} items, s':>16}"
    )
    for n in MACHINES:
        workers = n * per_machine
        by_workers = workers / per_item
        by_driver = 1 / driver if driver > 0 else float("inf")
        rate = min(by_workers, by_driver)
        print(
            f"{n:>8}{workers:>9}{rate:>10.2f}{rate * f['item_audio_s']:>11.2f}"
            f"{'workers' if by_workers <= by_driver else 'driver':>12}{fixed + job_items / rate:>16.0f}"
        )
    print(
        "  assumes: output on shared storage as fast as this disk, records and items cost no more over a network "
        "than on loopback,\n  every machine as fast as this one, and the per-item overhead spread over the workers "
        "(only the driver's own CPU is serial)."
    )


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} CPUs; {platform.platform()}; Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", default=None, help="GGUF file or built-in name (default: the built-in model)")
    p.add_argument("--items", type=int, default=100, help="items in the job (default 100)")
    p.add_argument("--configs", default="local1,local2,ray2", help="which of local1, local2, ray2, in order")
    p.add_argument(
        "--per-machine", type=int, default=None, help="workers per machine in the projection (default: CPUs)"
    )
    p.add_argument("--project-items", type=int, default=10_000, help="job size for the projection's wall times")
    p.add_argument("--work-dir", default=None, help="where the outputs go (default: a new temporary folder, removed)")
    p.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = p.parse_args(argv)
    cpus = os.cpu_count() or 1
    known = configs(cpus)
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in known]
    if unknown or not chosen or args.items < 2:
        p.error(f"--configs takes {', '.join(known)}; --items at least 2")

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="ggtts-batch-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    source = work / "items.jsonl"
    items = make_items(args.items)
    source.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    words = [len(i["text"].split()) for i in items]
    print(f"machine: {machine()}")
    print(
        f"job: {len(items)} items of {min(words)}-{max(words)} words ({sum(words) / len(words):.1f} mean), "
        f"model {args.model or 'default (built-in kokoro)'}, WAV; load average before: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    results = []
    try:
        for name in chosen:
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            print(f"running {name}: {known[name].label} ...", flush=True)
            results.append(figures(run_config(known[name], source, out, args.model, len(items))))
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + "\n")
    print_table(results)
    ray = next((f for f in results if f["ray"] and "item_busy_s" in f), None)
    if ray is not None:
        print_projection(ray, args.per_machine or cpus, args.project_items)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(f["status"] == 0 and f["failed"] == 0 for f in results) else 1


if __name__ == "__main__":
    sys.exit(main())
