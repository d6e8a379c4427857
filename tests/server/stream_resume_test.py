#!/usr/bin/env python3
"""Stream resume (Last-Event-ID) against a real `actorlm serve` process.

  - With --stream-resume-window, every SSE event carries an id "<stream>.<n>", n from 1 up.
  - A client that drops its connection at random points (several times in one stream) and
    sends the same request again with Last-Event-ID gets exactly the events after that id:
    the pieces put together equal the whole uninterrupted stream (and the non-streamed
    text of the same greedy request), no event twice, none missing, one generation (the
    server counts one request; /metrics counts the resumes).
  - A client that comes back after the stream ended (within the window) gets the tail.
  - Refusals, each with a clear message: another body with a valid id (409), an unknown
    stream (404), a malformed id (400), a server without the window (400). A stream whose
    client never comes back is aborted after the window and forgotten.

Usage: python3 tests/server/stream_resume_test.py path/to/actorlm
"""
import http.client
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import ServerProcess  # noqa: E402


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


BIN = sys.argv[1]
BODY = {"prompt": "A long story about a lighthouse keeper and the storm of the century:", "max_tokens": 120,
        "temperature": 0, "ignore_eos": True}


def post(port, body, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def read_events(resp, stop_after=None):
    """(events, ended): events as (id, data) until [DONE] or, with stop_after, that many."""
    events, ev_id, data = [], None, None
    while True:
        raw = resp.readline()
        if not raw:
            return events, False
        line = raw.decode().rstrip("\r\n")
        if line.startswith("id: "):
            ev_id = line[4:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and data is not None:
            events.append((ev_id, data))
            ev_id, data = None, None
            if events[-1][1] == "[DONE]":
                return events, True
            if stop_after is not None and len(events) >= stop_after:
                return events, False


def text_of(events):
    out = []
    for _, data in events:
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        check("error" not in chunk, chunk)
        out.extend(c.get("text", "") for c in chunk.get("choices", []))
    return "".join(out)


def metrics(server):
    return server.metrics()


def check_resumes(server, reference, rng):
    whole = []
    last = ""
    drops = 0
    ended = False
    while not ended:
        conn, resp = post(server.port, {**BODY, "stream": True}, {"Last-Event-ID": last} if last else None)
        if resp.status != 200:
            raise AssertionError((resp.status, resp.read()))
        events, ended = read_events(resp, stop_after=None if drops >= 3 else rng.randint(3, 25))
        whole.extend(events)
        if not ended:
            drops += 1
            conn.sock.shutdown(2)  # gone, mid-stream, without a word
            conn.close()
            time.sleep(rng.uniform(0, 0.5))
            last = events[-1][0]
    ids = [e[0] for e in whole]
    stream = ids[0].rsplit(".", 1)[0]
    check(all(i.rsplit(".", 1)[0] == stream for i in ids), f"events of another stream: {ids}")
    check([int(i.rsplit(".", 1)[1]) for i in ids] == list(range(1, len(ids) + 1)),
          f"events missing or twice: {ids}")
    check(text_of(whole) == reference, f"the resumed stream's text differs:\n{text_of(whole)!r}\n{reference!r}")
    return stream, drops, len(ids)


def main():
    rng = random.Random(11)
    with ServerProcess(BIN, ["--stream-resume-window", "3"]) as server:
        code_body = post(server.port, BODY)[1]
        reference = json.loads(code_body.read())["choices"][0]["text"]
        before = metrics(server)
        for _ in range(3):
            stream, drops, n = check_resumes(server, reference, rng)
        after = metrics(server)
        check(after["actorlm_requests_total"] - before["actorlm_requests_total"] == 3,
              "a resume started a new generation")
        check(after["actorlm_streams_resumed_total"] - before["actorlm_streams_resumed_total"] == 9, after)
        print(f"ok: 3 streams dropped 3 times each at random points and resumed with Last-Event-ID; "
              f"each put together is the uninterrupted text ({n} events, ids consecutive), one generation each")

        # Back after the end: the tail.
        conn, resp = post(server.port, {**BODY, "stream": True})
        events, ended = read_events(resp)
        check(ended, "the stream did not end")
        mid = events[len(events) // 2][0]
        _, resp = post(server.port, {**BODY, "stream": True}, {"Last-Event-ID": mid})
        tail, ended = read_events(resp)
        check(ended and tail == events[len(events) // 2 + 1:], "the tail after the end differs")
        print("ok: a client back after its stream ended gets exactly the events after its last one")

        # Refusals.
        _, resp = post(server.port, {**BODY, "stream": True, "max_tokens": 7}, {"Last-Event-ID": mid})
        body = json.loads(resp.read())
        check(resp.status == 409 and "not the one that started" in body["error"]["message"], (resp.status, body))
        _, resp = post(server.port, {**BODY, "stream": True}, {"Last-Event-ID": "cmpl-0123.4"})
        body = json.loads(resp.read())
        check(resp.status == 404 and "not kept here" in body["error"]["message"], (resp.status, body))
        _, resp = post(server.port, {**BODY, "stream": True}, {"Last-Event-ID": "no-number"})
        check(resp.status == 400, resp.status)
        resp.read()
        _, resp = post(server.port, {**BODY, "stream": True}, {"Last-Event-ID": mid.rsplit(".", 1)[0] + ".99999"})
        body = json.loads(resp.read())
        check(resp.status == 409 and "has sent no event" in body["error"]["message"], (resp.status, body))
        print("ok: another body (409), an unknown stream (404), a malformed id (400), an event never sent (409)")

        # Nobody comes back: aborted after the window, then forgotten.
        generated = metrics(server)["actorlm_generation_tokens_total"]
        conn, resp = post(server.port, {**BODY, "stream": True, "max_tokens": 1500, "prompt": "Endless:"})
        events, _ = read_events(resp, stop_after=3)
        conn.sock.shutdown(2)
        conn.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and metrics(server)["actorlm_streams_kept"] > 0:
            time.sleep(0.5)
        m = metrics(server)
        check(m["actorlm_streams_kept"] == 0, f"a stream nobody came back to is still kept: {m}")
        spent = m["actorlm_generation_tokens_total"] - generated
        check(spent < 1000, f"the stream nobody came back to ran on to {spent:.0f} of its 1500 tokens")
        _, resp = post(server.port, {**BODY, "stream": True, "max_tokens": 1500, "prompt": "Endless:"},
                       {"Last-Event-ID": events[-1][0]})
        check(resp.status == 404, resp.status)
        resp.read()
        print(f"ok: a stream nobody came back to was aborted after the window ({spent:.0f} of 1500 tokens) and forgotten")

    with ServerProcess(BIN) as plain:
        conn, resp = post(plain.port, {**BODY, "stream": True, "max_tokens": 4})
        events, _ = read_events(resp)
        check(all(e[0] is None for e in events), "events carry ids without a resume window")
        _, resp = post(plain.port, {**BODY, "stream": True}, {"Last-Event-ID": "cmpl-1.1"})
        body = json.loads(resp.read())
        check(resp.status == 400 and "--stream-resume-window" in body["error"]["message"], (resp.status, body))
        print("ok: without --stream-resume-window, no ids and a resume is refused naming the flag")
    print("stream resume: all checks passed")


if __name__ == "__main__":
    main()
