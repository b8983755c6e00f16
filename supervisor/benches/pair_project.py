#!/usr/bin/env python3
"""Two builds of `garuda sandbox`, paired run by run on a project you name (whole process).

    python3 supervisor/benches/pair_project.py BASE_BIN NEW_BIN PROJECT_DIR [EXECUTOR] [ROUNDS]

`pair.py` beside it makes a fresh `git init` project; this one runs in PROJECT_DIR (for example
the 20,000-file project of `gen-project.sh`), so that the project walk and its cache are
measured. Each build has its own fresh `GARUDA_HOME`; each runs twice first (the walk cache is
made), then the script waits 2.5 s (longer than the cache's racy margin, so that the folders
read as still, as a project a user works in does). Then for each of ROUNDS rounds (default 60),
one run of each build in alternating order, each after 50 ms idle: the wall time of
`garuda sandbox --executor EXECUTOR -- /bin/true` (default landlock). Prints each build's
median and the median of the pairs' differences (base - new).

A build given as `BIN:NAME=VALUE` runs with that variable set (the same binary with a switch).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    project = sys.argv[3]
    executor = sys.argv[4] if len(sys.argv) > 4 else "landlock"
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 60
    builds = {}
    for name, spec in (("base", sys.argv[1]), ("new", sys.argv[2])):
        binary, _, switch = spec.partition(":")
        extra = dict([switch.split("=", 1)]) if switch else {}
        builds[name] = (os.path.abspath(binary), extra, tempfile.mkdtemp(prefix=f"garuda-pair-{name}-"))

    def run(name):
        binary, extra, home = builds[name]
        env = dict(os.environ, GARUDA_HOME=home, **extra)
        start = time.perf_counter()
        done = subprocess.run(
            [binary, "sandbox", "--executor", executor, "--", "/bin/true"],
            cwd=project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        ms = (time.perf_counter() - start) * 1000
        if done.returncode != 0:
            sys.exit(f"{name}: exit {done.returncode}: {done.stderr.decode(errors='replace')}")
        return ms

    try:
        for name in builds:
            run(name)
            run(name)
        time.sleep(2.5)
        times = {name: [] for name in builds}
        diffs = []
        for i in range(rounds):
            order = ("base", "new") if i % 2 == 0 else ("new", "base")
            got = {}
            for name in order:
                time.sleep(0.05)
                got[name] = run(name)
            for name in builds:
                times[name].append(got[name])
            diffs.append(got["base"] - got["new"])
        print(
            f"{executor} in {project}: base {statistics.median(times['base']):.2f} ms, "
            f"new {statistics.median(times['new']):.2f} ms, median of the pairs' differences "
            f"(base - new) {statistics.median(diffs):+.2f} ms, {rounds} pairs"
        )
    finally:
        for _, _, home in builds.values():
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
