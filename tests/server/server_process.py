"""Starts `actorlm serve` on an OS-chosen loopback port for one test and
stops it afterwards (the tests never rely on a server left running)."""
import atexit
import os
import re
import subprocess
import threading
import time
import urllib.request


class ServerProcess:
    def __init__(self, binary, extra_args=(), threads=2, env=None):
        self.args = [binary, "serve", "--port", "0", "--threads", str(threads), *extra_args]
        self.env = env  # None: this process's environment
        self.proc = None
        self.port = None
        self.lines = []  # (arrival time, line) of everything it logs

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, text=True, env=self.env)
        stop_at_exit(self.proc)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.port is None:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise SystemExit(f"server exited early: {self.args}")
            self.lines.append((time.monotonic(), line))
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if m and int(m.group(1)) > 0:
                self.port = int(m.group(1))
        if not self.port:  # explicit: python -O drops asserts
            raise SystemExit(f"server did not announce its port: {self.args}")
        # Keep reading stderr so a chatty server never blocks on a full pipe.
        threading.Thread(target=lambda: [self.lines.append((time.monotonic(), x)) for x in self.proc.stderr],
                         daemon=True).start()
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2)
                break
            except Exception:
                time.sleep(0.1)
        return self

    def metrics(self, key=None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/metrics", headers=headers)
        text = urllib.request.urlopen(req, timeout=30).read().decode()
        return {k: float(v) for k, v in (line.split(" ", 1) for line in text.splitlines()
                                         if line and not line.startswith("#"))}

    def __exit__(self, *exc):
        stop_process(self.proc)
        return False


# Every process started through stop_at_exit, stopped when the test exits,
# also after a failed check left one running: it shares the test's stdout,
# and CTest waits for that to close (a failed check once became a 900 s
# timeout of cluster:nodes).
_started = []
atexit.register(lambda: [stop_process(p) for p in _started])


def stop_at_exit(proc):
    _started.append(proc)


def stop_process(proc):
    """SIGTERM, then SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def default_model():
    """Where the engine finds the default model (model/default_model.hpp)."""
    if os.environ.get("ACTORLM_MODEL"):
        return os.environ["ACTORLM_MODEL"]
    cache = os.environ.get("ACTORLM_CACHE") or os.path.join(os.environ.get("HOME") or "/root", ".cache", "actorlm")
    path = os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"default model not found at {path}")
    return path
