import subprocess, sys, os, statistics
py = sys.executable
# BEFORE_SRC: the src/ of a checkout at the commit to compare with (git worktree add)
before_src = os.environ.get("BEFORE_SRC", "../before/src")
res = {}
for name in ["resnet18", "mobilenet_v3_small", "bert"]:
    procs = {}
    for tag, src in (("before", before_src), ("after", "src")):
        env = dict(os.environ, PYTHONPATH=src, GRAPHOPT_QUIET="1")
        p = subprocess.Popen([py, "benchmarks/results/split_ab_child.py", name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=".")
        assert p.stdout.readline().strip() == "ready"
        procs[tag] = p
    rows = {("before","opt"):[], ("after","opt"):[], ("before","eager"):[], ("after","eager"):[]}
    for r in range(7):
        for tag, p in procs.items():
            for what in ("opt", "eager"):
                p.stdin.write(what + "\n"); p.stdin.flush()
                rows[(tag, what)].append(float(p.stdout.readline()))
    for p in procs.values(): p.stdin.close(); p.wait()
    out = []
    for tag in ("before", "after"):
        ratios = [o / e for o, e in zip(rows[(tag, "opt")], rows[(tag, "eager")])]
        out.append(f"{tag}: opt {statistics.median(rows[(tag,'opt')]):.2f} ms, ratio to eager {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")
    print(name, "|", " | ".join(out), flush=True)
