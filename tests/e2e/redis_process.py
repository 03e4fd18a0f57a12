"""A redis-server of the e2e suites' own (test_redis_e2e, test_redis_faults_e2e): on a free
loopback port, no snapshots, its files and log in a folder of its own; a plain server, one with
`extra` arguments (an append-only file, a replica of another), or a Sentinel with a config file
of its own. The suites skip when redis-server is not installed (scripts/setup.sh installs
Debian's package)."""
import os
import shutil
import signal
import socket
import subprocess
import time

import server_process as e2e

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
HAVE_REDIS = os.access(REDIS_SERVER, os.X_OK)
SKIP_REASON = ("redis-server is not installed (Debian's redis-server package; "
               "scripts/setup.sh installs it)")


def resp(port, *argv, timeout=5):
    """One command on its own connection, with the reply as redis-cli prints it."""
    out = subprocess.run(["redis-cli", "-p", str(port), *argv], capture_output=True, text=True,
                         timeout=timeout)
    return out.stdout.strip()


class RedisProcess:
    """redis-server in `folder`/`name` (or `folder` itself when `name` is None)."""

    def __init__(self, folder, name=None, extra=(), sentinel=False):
        self.folder = folder if name is None else os.path.join(folder, name)
        os.makedirs(self.folder, exist_ok=True)
        self.port = e2e.free_ports(1)[0]
        self.extra = list(extra)
        self.sentinel = sentinel
        self.proc = None

    @property
    def url(self):
        return f"redis://{e2e.HOST}:{self.port}"

    def start(self, timeout=20):
        """Starts it and returns once it answers PING (or says it is loading its file)."""
        args = [REDIS_SERVER]
        if self.sentinel:
            config = os.path.join(self.folder, "sentinel.conf")
            if not os.path.exists(config):
                open(config, "w").close()
            args += [config, "--sentinel"]
        args += ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--dir", self.folder, "--daemonize", "no",
                 "--logfile", os.path.join(self.folder, "redis.log")]
        if not self.sentinel:
            args += ["--repl-diskless-sync-delay", "0"]
        args += self.extra
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection((e2e.HOST, self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith((b"+PONG", b"-LOADING")):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("redis-server did not answer PING")

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self):
        """A clean shutdown (SIGTERM)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None

    def kill(self):
        """A crash (SIGKILL), of a stopped (SIGSTOP) process too."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None

    def wait_loaded(self, timeout=20):
        deadline = time.monotonic() + timeout
        while "loading:0" not in resp(self.port, "INFO", "persistence"):
            if time.monotonic() > deadline:
                raise AssertionError("redis did not load its append-only file")
            time.sleep(0.05)
