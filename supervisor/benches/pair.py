#!/usr/bin/env python3
"""Two builds of `garuda sandbox`, paired run by run, as a user runs them (whole process).

    python3 supervisor/benches/pair.py BASE_BIN NEW_BIN [EXECUTORS] [ROUNDS] [PROJECT_DIR]

For each of ROUNDS rounds (default 150) and each executor (default `landlock,bubblewrap`),
one run of each build in alternating order, each after 50 ms idle: the wall time of
`garuda sandbox --executor E -- /bin/true` as `subprocess.run` sees it (its own overhead,
about 0.3 ms, is the same for both). Each build has its own fresh `GARUDA_HOME`; the project
is a fresh `git init` under a temporary folder in `$HOME`; the first five rounds are dropped.
Prints each build's median and the median of the pairs' differences (base - new), which is
what to read on this noisy VM: a run of the whole-CLI bench (`benches/cli.rs`) per build
moves by up to ±0.8 ms from one run to the next.

A build given as `BIN:NAME=VALUE` runs with that variable set (the same binary with a switch).
Each binary is copied into the script's temporary folder first and run from there, so that
both builds run from files written at the same moment (see the comment in `main`).
With PROJECT_DIR (for example the 20,000-file project of `gen-project.sh`) the runs are in
that project instead of a fresh `git init`, so that the project walk and its cache are
measured: each build runs twice first (its walk cache is made), then the script waits 2.5 s
(longer than the cache's racy margin, so that the folders read as still, as in a project a
user works in).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    builds = {"base": sys.argv[1], "new": sys.argv[2]}
    executors = (sys.argv[3] if len(sys.argv) > 3 else "landlock,bubblewrap").split(",")
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 150
    work = tempfile.mkdtemp(prefix="garuda-pair-", dir=os.environ["HOME"])
    given = sys.argv[5] if len(sys.argv) > 5 else None
    project = os.path.abspath(given) if given else os.path.join(work, "project")
    if not given:
        os.makedirs(project)
        subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    runs = {}
    for name, spec in builds.items():
        binary, _, assignment = spec.partition(":")
        env = dict(os.environ, GARUDA_HOME=os.path.join(work, name))
        if assignment:
            key, _, value = assignment.partition("=")
            env[key] = value
        # A fresh copy of each binary, written now: on this VM the same binary ran 0.3-0.4 ms
        # faster per run from a file written minutes before than from one written an hour
        # before (170 against 162 page faults for `--version` alone; the older file's page
        # cache is most likely held in smaller pieces), which would favour whichever build
        # was built last.
        copy = os.path.join(work, name + ".bin")
        shutil.copy2(os.path.abspath(binary), copy)
        runs[name] = (copy, env)
    def run(b, e):
        binary, env = runs[b]
        t = time.perf_counter()
        r = subprocess.run(
            [binary, "sandbox", "--executor", e, "--", "/bin/true"],
            cwd=project, env=env, stdin=subprocess.DEVNULL,
        )
        took = (time.perf_counter() - t) * 1000
        if r.returncode != 0:
            sys.exit(f"{b} {e}: exit {r.returncode}")
        return took

    if given:
        for b in builds:
            for e in executors:
                run(b, e)
                run(b, e)
        time.sleep(2.5)
    times = {(b, e): [] for b in builds for e in executors}
    for i in range(rounds):
        for e in executors:
            for b in (["base", "new"] if i % 2 == 0 else ["new", "base"]):
                time.sleep(0.05)
                took = run(b, e)
                if i >= 5:
                    times[(b, e)].append(took)
    shutil.rmtree(work, ignore_errors=True)
    for e in executors:
        base, new = times[("base", e)], times[("new", e)]
        diff = statistics.median(x - y for x, y in zip(base, new))
        print(f"{e}: base {statistics.median(base):.2f} ms, new {statistics.median(new):.2f} ms, "
              f"median of the pairs' differences (base - new) {diff:+.2f} ms, {len(base)} pairs")


if __name__ == "__main__":
    main()
