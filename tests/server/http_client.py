"""Raw HTTP/1.1 over a socket for the server tests: exact bytes out, every
response read back in order (pipelining), nothing a client library would
fix up or hide."""
import json
import socket
import time
import urllib.error
import urllib.request


def connect(port, timeout=30.0):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


class Reader:
    """Reads whole responses (Content-Length or chunked) from one socket."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, headers with lower-case names, body bytes)."""
        status_line = self._line()
        status = int(status_line.split(b" ", 2)[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            name, _, value = line.partition(b":")
            headers[name.decode().strip().lower()] = value.decode().strip()
        if status == 100:
            return self.response()
        body = b""
        if headers.get("transfer-encoding") == "chunked":
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    self._line()
                    break
                body += self._exact(size)
                self._line()
        else:
            body = self._exact(int(headers.get("content-length", "0")))
        return status, headers, body


def request(port, data, timeout=30.0):
    """Sends raw bytes and reads one response; (0, {}, b"") when the server
    closes without one."""
    with connect(port, timeout) as s:
        s.sendall(data)
        try:
            return Reader(s).response()
        except (EOFError, ConnectionResetError, socket.timeout):
            return 0, {}, b""


def post_bytes(path, body, port, headers=None):
    h = {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(len(body))}
    h.update(headers or {})
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + body


def post_json(port, path, body, key=None, timeout=300):
    """A JSON POST through urllib: (status, parsed body, headers), also for
    error statuses."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST", headers=headers,
                                 data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def check(cond, message):
    """An assertion that python -O does not remove."""
    if not cond:
        raise AssertionError(message)


def healthy(server, key=None, prompt="Say hi."):
    """/health answers at once, a short chat completion works, and /metrics
    is back to idle (nothing running or waiting, no KV row locked)."""
    port = server.port
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
        check(r.status == 200, f"/health answered {r.status}")
    check(time.monotonic() - t0 < 1.0, f"/health took {time.monotonic() - t0:.2f} s")
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=120) as r:
        reply = json.loads(r.read())
    check(reply["choices"][0]["message"]["content"], f"empty completion: {reply}")
    idle(server, key)


def idle(server, key=None, within=5.0):
    """Waits up to `within` seconds for /metrics to show nothing running,
    waiting or locked; returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        m = server.metrics(key)
        if (m["actorlm_running_requests"] == 0 and m["actorlm_waiting_requests"] == 0
                and m["actorlm_kv_pool_locked_tokens"] == 0):
            return time.monotonic() - t0
        if time.monotonic() - t0 > within:
            raise AssertionError(f"not idle after {within} s: running {m['actorlm_running_requests']}, "
                                 f"waiting {m['actorlm_waiting_requests']}, locked {m['actorlm_kv_pool_locked_tokens']}")
        time.sleep(0.05)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
