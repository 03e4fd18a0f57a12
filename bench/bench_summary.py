"""What the load benches' summaries share (bench/cache_zipf.sh, bench/compare_protocols.sh): their
Python, run from the repository root, imports it from bench/."""


def provenance(tool, date, revision, nproc, cpu_model, loadavg):
    """A summary's first fields: the bench, the date, the git revision and the machine (nproc,
    the CPU and the load average when the run began, as /proc/loadavg's first three fields)."""
    return {
        "tool": tool,
        "date": date,
        "git_revision": revision,
        "machine": {"nproc": int(nproc), "cpu_model": cpu_model,
                    "loadavg_1_5_15_min_at_start": [float(x) for x in loadavg.split()]},
    }
