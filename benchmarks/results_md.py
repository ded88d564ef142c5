"""Writes RESULTS.md: the environment, every table, the target verdicts, the pictures and the method."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from results import find, grouped, label, wakeup_probe
from scenarios import LATE_CREDIT_TOKENS
from tables import Table, fmt
from targets import SMOOTH_RATE_ERROR_PCT, beyond_reach

METHOD = """\
- **Processes.** The uncontended scenario runs in fresh child processes, {processes} per loop, one after the
  other, each with every competitor interleaved round-robin (the first one rotates each repetition). One
  process's ratios can sit a few percent off another's for its whole life (its memory layout and hash seed,
  a long spell of load); pooling the samples of several evens that out. Every other run (each repetition of
  each competitor, size and loop) is a fresh child process (`worker.py`) that prints JSON.
- **Loops.** `asyncio`: the default loop of `asyncio.new_event_loop()`; `uvloop`: `uvloop.new_event_loop()`,
  both through `asyncio.Runner(loop_factory=...)`.
- **Uncontended.** One coroutine runs `for _ in range(n): async with limiter: pass` with a limiter built for
  10^12 tokens per second (burst 10^12), so tokens never run out; n = {iterations:,} unless one measurement
  would take longer than {budget:.1f} s, in which case that competitor runs fewer iterations (the table says
  how many). Figures are medians of {reps} repetitions ({processes} × {reps_each}). A ratio (× C floor,
  aiolimiter ÷) is the median of the {reps} ratios of two competitors' times in the same repetition: aiotb, the
  C floor, the bare C bucket and aiolimiter run back to back, so a spell of load on the shared machine weighs
  on both sides of the ratios the targets name. The bare C bucket (`noop/_noopcm.c`) is the C floor plus what
  any exact limiter must do: read `CLOCK_MONOTONIC` and take a token from a GCRA bucket; the same bucket asking
  for the running loop first (bound once) asks asyncio the public way aiotb asks, before it reads the clock: the
  least a limiter that honours the running loop's clock can do. Libraries without
  `async with` run `await limiter.wait()` (asynciolimiter) or `await limiter.try_acquire_async(...)`
  (pyrate-limiter) instead.
- **Releasing waiters.** N tasks are created and each parks on one `asyncio.Event`; the event is set and
  every task then takes its tokens (`async with limiter:` where supported) and records the time it resumed.
  CPU is `time.process_time()` and wall is `time.monotonic()`, both from just before the release to the last
  grant (task creation is excluded; it is reported as `setup_s` in the raw JSON). Peak RSS is
  `ru_maxrss` of the child process right after the last grant, before numpy is imported for statistics.
- **GC.** A `gc.callbacks` hook times every cyclic-GC pause between the release and the last grant ("GC s
  (longest ms)"). With 100k+ live tasks, full collections walk every task and dominate both CPU and the
  worst lateness, for every competitor alike.
- **Grant time and clock.** A grant is stamped with `time.monotonic()` when the task resumes. That is the
  clock `loop.time()` reads on asyncio; uvloop's `loop.time()` is the same clock cached once per loop
  iteration in whole milliseconds, which would hide sub-millisecond lateness, so both loops are stamped the
  same way.
- **Ideal schedule and lateness.** Grants are sorted; the k-th grant (k = 0, 1, ...) is due at
  `first grant + max(0, k - burst + 1) / R`: the bucket schedule of a bucket that is full at the first grant
  (for burst 1 that is `first + k / R`). Lateness = actual − due. "Steady state" keeps the waiters due at
  least 0.5 s after the first grant.
- **Achieved rate** = (grants − burst) / (last grant − first grant), i.e. the paced part after the initial
  burst; the error is against R. **Windows**: for every grant t, the grants in [t, t + 1 s) are counted; the
  token-bucket bound is burst + R × 1 s.
- **Contended burst.** The issue's `Limiter(R, 1)` has burst = R (the default, as in aiolimiter), and with
  R = N / 4 the first R grants go at once and the other 3N/4 take 3 s, which is the "about 3 s" per run
  the issue asks for; the targets (N=10k at 2.5k/s, N=100k at 25k/s) are these runs. Burst 1 is measured
  separately ("Smooth").
- **Smooth.** N waiters on `Limiter(R, 1, burst=1)`: one grant every 1 / R s, less than the whole
  millisecond to which the selector rounds every timeout. aiotb times such waits with its precise timer
  where the platform has one (a timerfd armed at the absolute `CLOCK_MONOTONIC` instant, watched with
  `loop.add_reader`); "loop timer only" is the same engine in a child process started with
  `AIOTB_PRECISE_TIMER=0`, every wait timed by the loop's own timer, the two side by side in one run. Before the
  runs at each rate, one task on each loop sleeps 1 / R s at a time for 2 s: how often the loop wakes it,
  and at what CPU, bounds what a limiter timed by the loop's own timer can reach at burst 1. Two
  lateness figures: "late", every grant against its ideal instant (first grant + k / R), which keeps any
  time lost once (the loop busy, the process stalled) in every later grant; and "wake", every grant against
  the instant the bucket allowed it, replayed over the grants made (one token interval after the previous
  grant was booked; a grant that came later is booked up to {credit:g} of a token before it, the limiter's late
  credit), which is how late the limiter woke it. Lost time shows in the achieved rate. The "paced floor"
  is no limiter: the same release, each waiter awaiting a bare future, and a timerfd the loop watches
  resolving one future at each instant a bucket of burst 1 allows, with the same late credit. What it loses
  is what the loop and the machine cost any burst-1 pacer (the release of N waiters in one loop iteration,
  wake-ups that come late); aiotb and it run alternately ({smooth_reps} of each in this profile), and the
  figures are medians. The smooth targets judge the achieved rate and "wake p99 ms"; a rate the paced floor
  missed as well is out of reach on this machine when aiotb lost at most the tolerance more than the floor.
- **Mixed sizes.** Every {every}th waiter (in arrival order) asks for {big} tokens, the others for 1. "Big vs
  FIFO" is the median of (grant − the time a FIFO bucket would grant it); "bigs after last small" counts big
  requests granted after every small one (starved until the small ones ran out).
- **Churn.** {share:.0%} of the waiters beyond the initial burst are chosen at random (seeded); waiter i is
  cancelled at a uniform time in [0, (1 − {share}) × (i − burst) / R) after the release, so most are still
  waiting. "cancelled" counts the tasks that never got a grant.
- **Limits.** A child stops waiting 3 × the ideal duration + 10 s after the release (120 s at 1M) and reports
  an unfinished run; a competitor whose run at one size did not finish, or took more than 60 s, is not run at
  larger sizes on that loop (listed below).
"""



def _narrowed(meta: dict[str, Any]) -> str:
    """The --only and --loops options of a run that measured less than the whole profile."""
    only, loops = meta.get("scenarios") or [], list(meta.get("loops") or [])
    every = ["uncontended", "contended", "smooth", "mixed", "churn", "classic"]
    words = f" --only {','.join(only)}" if only and list(only) != every else ""
    return words + (f" --loops {','.join(loops)}" if loops and loops != ["asyncio", "uvloop"] else "")

def render(results: dict[str, Any], tables: list[Table], pictures: list[Path], out: Path) -> str:
    meta = results["meta"]
    profile = meta["profile"]
    lines = [
        "# aiotb benchmark results",
        "",
        (f"Generated by `python benchmarks/run.py{' --quick' if profile['name'] == 'quick' else ''}{_narrowed(meta)}` "
         f"({profile['name']} profile, {meta['duration_s'] / 60:.1f} min) on {meta['started']}. "
         "Everything below was measured in that one run; nothing is copied from elsewhere."),
        "",
        "## Machine and software",
        "",
        (f"- Machine: {meta['machine']} ({meta['platform']}); load average "
         f"{', '.join(f'{x:.2f}' for x in meta['load_before'])} before, "
         f"{', '.join(f'{x:.2f}' for x in meta['load_after'])} after (a shared machine: expect noise)"),
        f"- Python: {meta['python']}",
        f"- Loops: asyncio = `{meta['loops']['asyncio']}`, {meta['loops']['uvloop']}",
        f"- aiotb core: `{meta['aiotb_implementation']}`, commit {meta['aiotb_commit']}",
        *(["- aiotb variables set for every child: "
           + ", ".join(f"`{k}={v}`" for k, v in meta["aiotb_variables"].items())] if meta.get("aiotb_variables")
          else []),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        f"- Date: {meta['date']}",
        "",
        "## How to run",
        "",
        "```sh",
        "python -m venv .venv && . .venv/bin/activate",
        "pip install . -r benchmarks/requirements.txt",
        "python benchmarks/run.py            # full profile (this file); progress goes to stderr",
        "python benchmarks/run.py --quick    # smoke profile, indicative only, about 3 minutes, under benchmarks/.cache/quick/",
        "python benchmarks/run.py --only contended --loops asyncio --competitors aiotb,aiolimiter,no-limiter",
        "```",
        "",
    ]
    by_title = {t.title.split(":")[0].split(" (")[0]: t for t in tables}
    summary = by_title.get("Summary")
    target_table = by_title.get("Targets")
    if target_table:
        lines += ["## Targets", "", target_table.markdown(), ""]
    if summary:
        lines += ["## Summary", "", summary.title, "", summary.markdown(), "", summary.note, ""]
    observations = _observations(results)
    if observations:
        lines += ["## Observations computed from this run", "", *observations, ""]
    if pictures:
        lines += ["## Plots", ""]
        for picture in pictures:
            relative = os.path.relpath(picture, out)
            lines += [f"![{picture.stem}]({relative})", ""]
    lines += ["## Tables", ""]
    for table in tables:
        if table in (summary, target_table):
            continue
        lines += [f"### {table.title}", "", table.markdown(), ""]
        if table.note:
            lines += [table.note, ""]
    lines += ["## Competitors and how each is configured", "",
              "| competitor | configuration |", "|:---|:---|"]
    for key, info in results["competitors"].items():
        lines.append(f"| {info['label']} | {info['mapping']} |")
    for key, why in results["unavailable"].items():
        lines.append(f"| {key} | not run: {why} |")
    lines += [
        "",
        ("Not every library can take part everywhere: asynciolimiter and asyncio-throttle cannot weigh a request, "
         "so they are not in the mixed-size scenario; the no-limiter floor is not in the churn scenario (its slots "
         "are handed out on arrival, so a cancelled waiter leaves a hole by design). PyrateLimiter's async API "
         "(`try_acquire_async(name, weight)`) fits and is included; note that it serialises callers on one "
         "`asyncio.Lock` and then polls with `asyncio.sleep` in whole milliseconds on a millisecond clock."),
        "",
        "## Method",
        "",
        METHOD.format(iterations=profile["uncontended_iterations"], budget=profile["uncontended_budget_s"],
                      processes=profile["uncontended_processes"],
                      reps=profile["uncontended_processes"] * profile["uncontended_repetitions"],
                      reps_each=profile["uncontended_repetitions"], every=profile["mixed"]["every"],
                      big=profile["mixed"]["big"], share=profile["churn"]["share"],
                      smooth_reps=profile.get("smooth_repetitions", 1), credit=LATE_CREDIT_TOKENS),
    ]
    if results["skipped"] or results["errors"]:
        lines += ["## Skipped runs and errors", ""]
        for skipped in results["skipped"]:
            lines.append(f"- {skipped['competitor']} on {skipped['loop']}, N = "
                         f"{', '.join(f'{n:,}' for n in skipped['sizes'])}: skipped, {skipped['why']}.")
        for error in results["errors"]:
            lines.append(f"- error: {error}")
        lines.append("")
    return "\n".join(lines)


def _paced(result: dict[str, Any]) -> str:
    """The achieved rate and p99 lateness of one burst-1 run, as a phrase."""
    if "error" in result:
        return "failed"
    late, woke = result.get("lateness_ms") or {}, result.get("wake_lateness_ms") or {}
    return (f"{fmt(result.get('achieved_rate'), 0)}/s, wake p99 {fmt(woke.get('p99'), 3)} ms, p99 against the "
            f"ideal schedule {fmt(late.get('p99'), 2)} ms"
            + ("" if result.get("complete") else " (unfinished)"))


def _observations(results: dict[str, Any]) -> list[str]:
    """Sentences that follow from the figures of this run."""
    out = []
    smooth = grouped(results["smooth"])
    for loop in ("asyncio", "uvloop"):
        for rate, n in sorted({(e["params"]["rate"], e["params"]["n"]) for e in smooth}):
            paced = [e for e in smooth if e["loop"] == loop and e["params"]["rate"] == rate and e["params"]["n"] == n]
            floor = find(paced, loop, "no-limiter")
            if not floor or len(paced) < 2:
                continue
            shown = "; ".join(f"{label(results, e['competitor'])} {_paced(e['result'])}" for e in paced)
            woke = wakeup_probe(results, loop, rate) or {}
            probe = (f" The loop woke a task sleeping {1e3 * woke['period_s']:g} ms {woke['wakes_per_s']:,.0f} "
                     f"times/s at {woke['cpu_pct']:.0f} % CPU." if woke.get("wakes_per_s") else "")
            timed = [e for e in paced if e["competitor"] == "aiotb-looptimer" and e["result"].get("complete")
                     and abs(e["result"].get("rate_error_pct") or 0) > SMOOTH_RATE_ERROR_PCT.get(rate, 0.1)]
            why = beyond_reach(results, "smooth", timed[0]) if timed else None
            out.append(f"- Burst 1, N={n:,} at {rate:,.0f}/s on {loop} (a grant every {1e3 / rate:g} ms, under the "
                       f"selector's 1 ms timeout step): {shown}.{probe}"
                       + (f" With the loop's timer only: {why}." if why else ""))
    contended = grouped(results["contended"])
    for loop in ("asyncio", "uvloop"):
        aiotb, floor = find(contended, loop, "aiotb", n=10_000), find(contended, loop, "no-limiter", n=10_000)
        if aiotb and floor and aiotb.get("cpu_us_per_grant") and floor.get("cpu_us_per_grant"):
            out.append(f"- N=10k on {loop}: aiotb spends {aiotb['cpu_us_per_grant']:.2f} µs of CPU per grant, the "
                       f"no-limiter floor {floor['cpu_us_per_grant']:.2f} µs "
                       f"({aiotb['cpu_us_per_grant'] / floor['cpu_us_per_grant']:.2f} ×).")
    for loop in ("asyncio", "uvloop"):
        for n in sorted({e["params"]["n"] for e in contended if e["params"]["n"] >= 100_000}):
            runs = [(e["competitor"], e["result"]) for e in contended
                    if e["loop"] == loop and e["params"]["n"] == n and e["result"].get("gc")]
            if not runs:
                continue
            worst = max(runs, key=lambda kr: kr[1]["gc"]["max_ms"])
            shown = ", ".join(f"{label(results, k)} {r['gc']['total_s']:.2f} s" for k, r in runs)
            out.append(f"- N={n:,} on {loop}: cyclic GC paused the program for {shown} during the measured part "
                       f"(longest single pause {worst[1]['gc']['max_ms']:,.0f} ms, {label(results, worst[0])}); "
                       "lateness at this size is mostly start-up (waking N tasks at once) and these pauses, and a "
                       "pause longer than burst / R (1 s here) overflows the bucket, which costs rate for good.")
    return out
