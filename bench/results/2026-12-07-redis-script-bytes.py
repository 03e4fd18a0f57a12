"""What one demo replica sends Redis (jobs.store: redis, cache.redis: true, jobs.lease_ms 1500):
bytes per second while idle (the renewal rounds) and bytes per job (submit, long-poll to the end,
fetch the mesh), with Redis' own command counts (INFO stats, INFO commandstats). Prints JSON.

    cd tests/e2e && CUBE3D_BIN_DIR=$PWD/../../build/bin CUBE3D_SOURCE_DIR=$PWD/../.. \\
        python3 ../../bench/results/2026-12-07-redis-script-bytes.py

JOBS (default 20) sets the number of jobs, IDLE_S (default 10) the idle window.
"""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
import server_process as e2e  # noqa: E402  (tests/e2e)
from redis_process import RedisProcess, resp  # noqa: E402

JOBS = int(os.environ.get("JOBS", "20"))
IDLE_S = float(os.environ.get("IDLE_S", "10"))
OPEN = ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING")


def info(port, section):
    return dict(line.split(":", 1) for line in resp(port, "INFO", section).splitlines()
                if ":" in line and not line.startswith("#"))


def read_bytes(port):
    return int(info(port, "stats")["total_net_input_bytes"])


def main():
    e2e.setUpModule()
    with tempfile.TemporaryDirectory(prefix="cube3d-redis-bytes-") as folder:
        redis = RedisProcess(folder, extra=("--appendonly", "no"))
        redis.start()
        server = e2e.ReplicaProcess(
            ["--redis-url", redis.url, "--set", "jobs.store=redis", "--set", "cache.redis=true",
             "--set", "jobs.lease_ms=1500"], folder, http=True, cache=True)
        server.start()
        try:
            time.sleep(2)  # past start-up
            start = read_bytes(redis.port)
            time.sleep(IDLE_S)
            idle_bytes_per_s = (read_bytes(redis.port) - start) / IDLE_S
            start = read_bytes(redis.port)
            for i in range(JOBS):
                status, _, data = server.http("POST", "/v1/jobs",
                                              {"prompt": f"a chair number {i}",
                                               "resolutionBase": 5})
                assert status == 202, data
                job_id = json.loads(data)["id"]
                while True:
                    status, _, data = server.http("GET", f"/v1/jobs/{job_id}?wait_ms=5000")
                    job = json.loads(data)
                    if job["state"] not in OPEN:
                        break
                assert job["state"] == "JOB_STATE_SUCCEEDED", job
                status, _, _ = server.http("GET", f"/v1/jobs/{job_id}/mesh")
                assert status == 200
            job_bytes = read_bytes(redis.port) - start
            calls = {name.removeprefix("cmdstat_"): int(value.split(",")[0].split("=")[1])
                     for name, value in info(redis.port, "commandstats").items()
                     if name in ("cmdstat_eval", "cmdstat_evalsha")}
        finally:
            server.kill()
            redis.stop()
    print(json.dumps({"jobs": JOBS, "idle_bytes_per_s": round(idle_bytes_per_s),
                      "bytes_per_job": job_bytes // JOBS, "calls": calls}, indent=2))


if __name__ == "__main__":
    main()
