"""What the command-line tool tests of this folder share (test_bench_cli, test_generate_cli): run
a tool, check that it failed naming what it should, skip where a CUDA device is present.

ctest runs those suites with WORKING_DIRECTORY tests/tools (as one does by hand), so they import
this module by its name.
"""
import os
import subprocess


def run_tool(binary, args, timeout, check=True):
    """Runs BINARY ARGS to its end (output captured as text); with check, a non-zero exit raises
    AssertionError with the command and its output."""
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{os.path.basename(binary)} {' '.join(args)} failed "
                             f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def assert_failed_naming(test, proc, *needles):
    """proc exited non-zero and its stderr holds every needle."""
    test.assertNotEqual(proc.returncode, 0, proc.stdout)
    for needle in needles:
        test.assertIn(needle, proc.stderr)


def skip_if_cuda_device(test):
    """Skips `test` on a machine where torch sees a CUDA device (without torch: goes on)."""
    try:
        import torch
        if torch.cuda.is_available():
            test.skipTest("this machine has a CUDA device")
    except ImportError:
        pass
