"""Console (issue: web console): page load times with many topics and groups, the record
browser on a 1M-record partition, and what an open console costs Kafka-protocol produce.

Not a test: it asserts nothing, prints tables and (unless ``--no-results``) replaces its
own section, "Console (bench/console.py)", in bench/RESULTS.md (appended if absent).

    .venv/bin/python bench/console.py                       # the full run, a few minutes
    .venv/bin/python bench/console.py --topics 50 --groups 5 --records 20000 \\
        --seconds 5 --no-results --skip-browser             # a smoke run

One kcompat broker subprocess (``python -m kcompat broker --port P --data-dir D
--admin-port A``, default settings). Setup: ``--topics`` (1000) topics of 1 partition
(confluent-kafka AdminClient.create_topics, batches of 100); one record produced to each
of the first 5; ``--groups`` (100) consumer groups, each committing offset 1 of those 5
topics with a confluent Consumer (``commit(asynchronous=False)``, no subscription: the
groups are Empty); ``--records`` (1,000,000) records of 100 B produced to one 1-partition
topic ``records`` (linger.ms 20, batch.size 1 MB).

1. **Record browser**: GET ``.../partitions/0/records?offset=N&limit=100`` at offsets 0,
   N/2, N-100 and a ``?timestamp=`` page (the middle record's time), each 5 times
   (median, max); the broker's VmRSS (/proc/<pid>/status) before and after.
2. **Console pages, API**: the requests each page makes, in the order and with the
   concurrency of console.js (``Promise.all`` groups run at once over at most 6
   keep-alive connections, as a browser does for HTTP/1.1): 3 warm-up rounds, then
   10 rounds; median and max per page, and the median of each call.
3. **Console pages, browser**: headless Debian chromium (selenium): ``about:blank``,
   then ``/ui/#/<route>`` until the page's table is in the DOM; 1 warm-up, median of 5.
4. **Produce while the console is open**: a confluent-kafka Producer in a child process
   (acks=all, linger.ms 5, 100-B values, the same as bench/http_produce.py) on a topic of
   6 partitions, ``--warmup`` (5 s) then ``--seconds`` (20 s) measured: alone; with three
   headless chromiums open on Overview, Charts (polls /metrics every 5 s) and a group
   page (polls lags every 5 s); alone again (drift).
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import loadavg  # noqa: E402
from bench.http_produce import (  # noqa: E402
    broker_cpu_s,
    broker_errors,
    code_version,
    kafka_produce,
    machine_line,
    machine_ticks,
    wait_http,
    write_section,
)
from compat_tests._broker import Broker, free_port  # noqa: E402
from compat_tests._browser import new_driver  # noqa: E402

SECTION = "Console (bench/console.py)"
TARGET_PAGE_MS = 300.0
TARGET_REDUCTION_PCT = 10.0
BROWSER_CONNS = 6  # chromium's connections per host for HTTP/1.1
GROUP_TOPICS = 5
# the browsed partitions: the brief's 1 MB batches, and the Java client's default 16 KB
RECORD_TOPICS = [("records", 1_000_000), ("records-16k", 16384)]
API_HEADER = ["page", "median ms", "max ms", "≤ 300 ms (max)", "non-200 answers"]
BROWSER_HEADER = ["page", "median ms", "max ms", "median ≤ 300 ms",
                  "in page: DOMContentLoaded", "first /v3 start", "last /v3 end", "drawn",
                  "/v3 calls"]
REC_HEADER = ["topic", "query", "records (offsets)", "median ms", "max ms"]
LOG_COPY = Path(tempfile.gettempdir()) / "kcompat-bench-console-broker.log"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# -- HTTP clients that behave like the page's fetch() ----------------------------

class Client:
    """A pool of keep-alive connections; ``get`` times one GET, ``all`` runs a
    Promise.all group over at most BROWSER_CONNS connections."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.free: list[http.client.HTTPConnection] = []
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(BROWSER_CONNS)
        self.errors: list[str] = []
        self.bad = 0  # non-200 answers

    def _conn(self) -> http.client.HTTPConnection:
        with self.lock:
            if self.free:
                return self.free.pop()
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def get(self, path: str) -> tuple[float, bytes]:
        conn = self._conn()
        t0 = time.perf_counter()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
        dt = time.perf_counter() - t0
        if resp.status != 200:
            self.bad += 1
        if resp.status != 200 and len(self.errors) < 20:
            self.errors.append(f"GET {path}: HTTP {resp.status} {body[:200]!r}")
        with self.lock:
            self.free.append(conn)
        return dt, body

    def json(self, path: str) -> tuple[float, Any]:
        import json

        dt, body = self.get(path)
        return dt, json.loads(body) if body else None

    def all(self, paths: list[str]) -> tuple[float, list[tuple[float, Any]]]:
        t0 = time.perf_counter()
        out = list(self.pool.map(self.json, paths))
        return time.perf_counter() - t0, out

    def close(self) -> None:
        self.pool.shutdown()
        for c in self.free:
            c.close()


def page_calls(cl: Client, base: str, page: str, topic: str, group: str) -> dict[str, float]:
    """One load of ``page`` as console.js makes it: {call: seconds, 'total': seconds}."""
    t: dict[str, float] = {}
    t0 = time.perf_counter()
    if page == "overview":
        t["GET overview"] = cl.json(f"{base}/overview")[0]
    elif page == "topics":
        t["GET topics"] = cl.json(f"{base}/topics")[0]
    elif page == "groups":
        dt, groups = cl.json(f"{base}/consumer-groups")
        t["GET consumer-groups"] = dt
        ids = [g["consumer_group_id"] for g in groups["data"]]
        wall, res = cl.all([f"{base}/consumer-groups/{g}/consumers" for g in ids])
        t[f"{len(ids)}x GET consumers (6 conns, wall)"] = wall
        t["  one GET consumers (median)"] = statistics.median(r[0] for r in res) if res else 0
    elif page == "topic":
        p = f"{base}/topics/{topic}"
        wall, res = cl.all([p, f"{p}/partitions", f"{p}/configs"])
        t["GET topic + partitions + configs (wall)"] = wall
        t["  GET topic"], t["  GET partitions"], t["  GET configs"] = (r[0] for r in res)
        parts = [x["partition_id"] for x in res[1][1]["data"]]
        wall, _ = cl.all([f"{p}/partitions/{i}/offsets" for i in parts])
        t[f"{len(parts)}x GET offsets (wall)"] = wall
        t["GET records?limit=20"] = cl.json(f"{p}/partitions/{parts[0]}/records?limit=20")[0]
    elif page == "group":
        g = f"{base}/consumer-groups/{group}"
        wall, res = cl.all([g, f"{g}/consumers"])
        t["GET group + consumers (wall)"] = wall
        t["  GET group"], t["  GET consumers"] = (r[0] for r in res)
        t["GET lags"] = cl.json(f"{g}/lags")[0]
    t["total"] = time.perf_counter() - t0
    return t


# -- browser -----------------------------------------------------------------------

def wait_css(driver: Any, css: str, timeout: float = 60.0) -> None:
    from selenium.webdriver.common.by import By

    deadline = time.perf_counter() + timeout
    while not driver.find_elements(By.CSS_SELECTOR, css):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{css} did not appear in {timeout} s on {driver.current_url}")
        time.sleep(0.002)


IN_PAGE = """
const nav = performance.getEntriesByType('navigation')[0];
const api = performance.getEntriesByType('resource').filter((r) => r.name.includes('/v3/'));
const drawn = performance.getEntriesByName('kcompat:page-drawn');
return [nav ? nav.domContentLoadedEventEnd : 0,
        api.length ? Math.max(...api.map((r) => r.responseEnd)) : 0,
        api.length ? Math.min(...api.map((r) => r.startTime)) : 0, api.length,
        drawn.length ? drawn[0].startTime : 0];
"""


def browser_load(driver: Any, url: str, css: str) -> tuple[float, list[float]]:
    """Seconds until ``css`` is in the DOM; and in the page (ms from navigation start):
    DOMContentLoaded, the last /v3 request's end, the first one's start, their count,
    and when the console marked the page's data drawn."""
    driver.get("about:blank")
    t0 = time.perf_counter()
    driver.get(url)
    wait_css(driver, css)
    dt = time.perf_counter() - t0
    return dt, [float(x) for x in driver.execute_script(IN_PAGE)]


# -- setup -------------------------------------------------------------------------

def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(names), 100):
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names[i:i + 100]],
                                      operation_timeout=60, request_timeout=120)
        for fut in futures.values():
            fut.result()


def commit_group(bootstrap: str, group: str, topics: list[str]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "log_level": 0})
    try:
        c.commit(offsets=[TopicPartition(t, 0, 1) for t in topics], asynchronous=False)
    finally:
        c.close()


def record_time(bootstrap: str, topic: str, offset: int) -> int:
    """The timestamp (ms) of the record at ``offset``, read with a Kafka consumer."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-console-reader",
                  "enable.auto.commit": False, "log_level": 0})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                return int(m.timestamp()[1])
        raise RuntimeError(f"no record at {topic}-0@{offset}")
    finally:
        c.close()


def produce_records(bootstrap: str, topic: str, count: int, size: int,
                    batch_size: int) -> float:
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": batch_size,
                  "queue.buffering.max.messages": 1_000_000, "log_level": 0,
                  "on_delivery": lambda err, _m: err and errors.append(str(err))})
    value = b"x" * size
    t0 = time.perf_counter()
    n = 0
    while n < count:
        try:
            p.produce(topic, value, partition=0)
            n += 1
        except BufferError:
            p.poll(0.01)
    left = p.flush(300)
    if left or errors:
        raise RuntimeError(f"producing {topic}: {left} unflushed, errors {errors[:3]}")
    return time.perf_counter() - t0


# -- produce phases ------------------------------------------------------------------

def produce_phase(broker: Broker, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 2 + args.warmup
    end_at = start_at + args.seconds
    child = ctx.Process(target=kafka_produce, args=(broker.bootstrap, topic, 100, start_at,
                                                    end_at, out))
    child.start()
    while time.time() < start_at:
        time.sleep(0.01)
    cpu0 = broker_cpu_s(broker.pid)
    busy0, total0 = machine_ticks()
    while time.time() < end_at:
        time.sleep(0.01)
    cpu1 = broker_cpu_s(broker.pid)
    busy1, total1 = machine_ticks()
    res = out.get(timeout=120)
    child.join(60)
    res["rec_s"] = res["acked"] / res["window_s"]
    res["broker_cpu_s"] = cpu1 - cpu0
    # busy cores of the whole machine over the window, less the broker and the producer
    cores = (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)
    res["busy_cores"] = cores
    res["others_cores"] = cores - (cpu1 - cpu0 + res["cpu_s"]) / res["window_s"]
    res["load"] = loadavg()
    return res


# -- report ------------------------------------------------------------------------

def error_summary(lines: list[str]) -> list[str]:
    """ERROR lines and the exception line ending each traceback, counted."""
    counts: dict[str, int] = {}
    for i, line in enumerate(lines):
        key = None
        m = re.search(r"\b(ERROR|CRITICAL)\b (.*)", line)
        if m:
            key = re.sub(r"/clusters/[^/ ]+", "/clusters/{c}", m.group(0))
        elif not line.startswith((" ", "Traceback")) and i > 0 and \
                lines[i - 1].startswith(" "):
            key = "  -> " + line[:200]
        if key:
            counts[key] = counts.get(key, 0) + 1
    return [f"{n:5d}  {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])][:15]


def ms(x: float) -> str:
    return f"{x * 1000:,.1f}"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def step(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=20.0, help="measured s per produce phase")
    ap.add_argument("--warmup", type=float, default=5.0, help="warm-up s per produce phase")
    ap.add_argument("--rounds", type=int, default=10, help="measured API rounds per page")
    ap.add_argument("--browser-rounds", type=int, default=5)
    ap.add_argument("--skip-browser", action="store_true")
    ap.add_argument("--produce-pairs", type=int, default=2,
                    help="(console open, alone) pairs after the first alone run")
    ap.add_argument("--no-results", action="store_true")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    args = ap.parse_args()

    load_start = loadavg()
    started = time.monotonic()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"machine: {machine_line()}; load average at start {load_start}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="kcompat-bench-console-"))
    admin_port = free_port()
    env = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    broker = Broker(workdir, extra_args=("--admin-port", str(admin_port)), env=env)
    verdicts: list[str] = []
    api_rows: list[list[str]] = []
    call_rows: list[list[str]] = []
    browser_rows: list[list[str]] = []
    rec_rows: list[list[str]] = []
    prod_rows: list[list[str]] = []
    setup_lines: list[str] = []
    http_errors: list[str] = []
    http_bad = 0
    drivers: list[Any] = []
    try:
        broker.start()
        cluster = wait_http(admin_port)
        base = f"/v3/clusters/{cluster}"
        boot = broker.bootstrap
        names = [f"topic-{i:04d}" for i in range(args.topics)]
        step(f"creating {args.topics} topics ...")
        dt, _ = timed(lambda: create_topics(boot, names))
        setup_lines.append(f"{args.topics} topics created in {dt:.1f} s")
        gtopics = names[:GROUP_TOPICS]
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": boot, "log_level": 0})
        for t in gtopics:
            p.produce(t, b"v" * 100, partition=0)
        p.flush(30)
        step(f"committing offsets for {args.groups} groups ...")
        groups = [f"group-{i:03d}" for i in range(args.groups)]
        with ThreadPoolExecutor(8) as ex:
            dt, _ = timed(lambda: list(ex.map(lambda g: commit_group(boot, g, gtopics), groups)))
        setup_lines.append(f"{args.groups} groups committed in {dt:.1f} s")
        create_topics(boot, [t for t, _ in RECORD_TOPICS])
        create_topics(boot, ["produce-load"], partitions=6)
        for rtopic, bs in RECORD_TOPICS:
            step(f"producing {args.records:,} records to {rtopic} ...")
            dt, _ = timed(lambda: produce_records(boot, rtopic, args.records, 100, bs))  # noqa: B023
            setup_lines.append(f"{args.records:,} records of 100 B produced to `{rtopic}` "
                               f"(batch.size {bs}, linger.ms 20) in {dt:.1f} s "
                               f"({args.records / dt:,.0f} rec/s)")
        print("  " + "; ".join(setup_lines), flush=True)

        # 1. record browser
        cl = Client(admin_port)
        rss0 = rss_mb(broker.pid)
        rec_ok = True
        for rtopic, _bs in RECORD_TOPICS:
            rbase = f"{base}/topics/{rtopic}/partitions/0/records"
            mid_ts = record_time(boot, rtopic, args.records // 2)
            probes = ["offset=0&limit=100", f"offset={args.records // 2}&limit=100",
                      f"offset={max(0, args.records - 100)}&limit=100",
                      f"timestamp={mid_ts}&limit=100"]
            for q in probes:
                times = []
                got = ""
                for _ in range(5):
                    dt, doc = cl.json(f"{rbase}?{q}")
                    times.append(dt)
                    if doc and "data" in doc and doc["data"]:
                        got = (f"{len(doc['data'])} ({doc['data'][0]['offset']}.."
                               f"{doc['data'][-1]['offset']})")
                    else:
                        got = f"**HTTP error**: {str(doc)[:80]}"
                        rec_ok = False
                rec_ok &= max(times) <= TARGET_PAGE_MS / 1000
                rec_rows.append([rtopic, f"`?{q}`", got, ms(statistics.median(times)),
                                 ms(max(times))])
        rss1 = rss_mb(broker.pid)
        print("\n".join(md_table(REC_HEADER, rec_rows)), flush=True)
        print(f"broker VmRSS {rss0:.0f} MB before, {rss1:.0f} MB after", flush=True)

        # 2. console pages over the API
        pages = ["overview", "topics", "groups", "topic", "group"]
        step("console pages over the API ...")
        for page in pages:
            for _ in range(3):
                page_calls(cl, base, page, "records", groups[0] if groups else "none")
            bad0 = cl.bad
            runs = [page_calls(cl, base, page, "records", groups[0] if groups else "none")
                    for _ in range(args.rounds)]
            bad = cl.bad - bad0
            totals = [r["total"] for r in runs]
            met = max(totals) <= TARGET_PAGE_MS / 1000
            api_rows.append([page, ms(statistics.median(totals)), ms(max(totals)),
                             "met" if met else "**not met**", str(bad)])
            for k in runs[0]:
                if k != "total":
                    call_rows.append([page, k.replace(" ", "\u00a0", 2) if k.startswith(" ")
                                      else k, ms(statistics.median(r[k] for r in runs))])
        http_errors += cl.errors
        http_bad += cl.bad
        cl.close()
        print("\n".join(md_table(API_HEADER, api_rows)))
        print("\n".join(md_table(["page", "call", "median ms"], call_rows)), flush=True)

        # 3. browser
        ui = f"http://127.0.0.1:{admin_port}/ui/#/"
        routes = [("overview", "", 'table[data-testid="brokers-table"]'),
                  ("topics", "topics", 'table[data-testid="topics-table"]'),
                  ("groups", "groups", 'table[data-testid="groups-table"]')]
        if not args.skip_browser:
            step("console pages in chromium ...")
            d = new_driver(60.0)
            try:
                for name, route, css in routes:
                    browser_load(d, ui + route, css)
                    runs = [browser_load(d, ui + route, css)
                            for _ in range(args.browser_rounds)]
                    times = [r[0] for r in runs]
                    med = statistics.median(times)

                    def mid(i: int, runs: list[tuple[float, list[float]]] = runs) -> str:
                        return f"{statistics.median(r[1][i] for r in runs):,.0f}"
                    browser_rows.append([f"`/ui/#/{route}` ({name})", ms(med), ms(max(times)),
                                         "met" if med <= TARGET_PAGE_MS / 1000
                                         else "**not met**", mid(0), mid(2), mid(1),
                                         mid(4), f"{runs[0][1][3]:.0f}"])
            finally:
                d.quit()
            print("\n".join(md_table(BROWSER_HEADER, browser_rows)), flush=True)

        # 4. produce with the console open: alone, console, alone, console, alone
        alone: list[dict[str, Any]] = []
        console: list[dict[str, Any]] = []
        plan = ["alone"] + (["console", "alone"] * args.produce_pairs
                            if not args.skip_browser else ["alone"])
        for i, kind in enumerate(plan):
            if kind == "console":
                step("opening 3 chromiums (overview, charts, group) ...")
                for route, css in (("", 'table[data-testid="brokers-table"]'),
                                   ("charts", "#main .page h1"),
                                   (f"groups/{groups[0]}",
                                    'table[data-testid="group-lags-table"]')):
                    d = new_driver(60.0)
                    drivers.append(d)
                    d.get(ui + route)
                    wait_css(d, css)
            step(f"produce, {kind} ...")
            r = produce_phase(broker, "produce-load", args)
            label = "kafka alone" if kind == "alone" else \
                "kafka, console open (overview + charts + group)"
            if kind == "console":
                from selenium.webdriver.common.by import By
                alive = [bool(x.find_elements(By.CSS_SELECTOR, "#main .page h1"))
                         for x in drivers]
                errs = [x.find_element(By.CSS_SELECTOR, '[data-testid="error-box"]').text
                        for x in drivers]
                for x in drivers:
                    x.quit()
                drivers.clear()
                console.append(r)
                step(f"  pages alive {alive}; error boxes {errs}")
            else:
                alone.append(r)
            prod_rows.append([f"{i + 1}. {label}", f"{r['rec_s']:,.0f}",
                              f"{r['broker_cpu_s']:.1f}", f"{r['busy_cores']:.2f}",
                              f"{r['others_cores']:.2f}", r["load"]])
            step(f"  {r['rec_s']:,.0f} rec/s, machine busy {r['busy_cores']:.2f} cores")
        produce_errors = sum(r["all_errors"] for r in alone + console)
    finally:
        for x in drivers:
            try:
                x.quit()
            except Exception:  # noqa: BLE001
                pass
        rss_end = rss_mb(broker.pid) if broker.running else float("nan")
        broker.close()
        errors, warnings = broker_errors(broker)
        if broker.log_path.exists():
            shutil.copy(broker.log_path, LOG_COPY)
            print(f"broker log copied to {LOG_COPY}", flush=True)
        shutil.rmtree(workdir, ignore_errors=True)
    load_end = loadavg()
    total = time.monotonic() - started

    # verdicts
    api_met = all(r[3] == "met" for r in api_rows)
    bad_pages = [r[0] for r in api_rows if r[4] != "0"]
    verdicts.append(f"Pages ≤ 300 ms (API, max of {args.rounds} rounds, every page): "
                    + ("**met**" if api_met else "**not met**")
                    + (f" on time, but with non-200 answers on: {', '.join(bad_pages)} (see "
                       "the per-page table; a failing call is fast, so that time is not the "
                       "time of a working page)" if bad_pages else ""))
    if browser_rows:
        b_met = all(r[3] == "met" for r in browser_rows)
        verdicts.append("Pages ≤ 300 ms (chromium, median of "
                        f"{args.browser_rounds}): " + ("**met**" if b_met else "**not met**"))
    verdicts.append(f"Record browser pages through {args.records:,} records without loading "
                    f"them all: every page ≤ 300 ms {'yes' if rec_ok else 'no'}; VmRSS "
                    f"{rss0:.0f} MB before the pages, {rss1:.0f} MB after "
                    f"({rss1 - rss0:+.0f} MB) - **{'met' if rec_ok and rss1 - rss0 < 50 else 'not met'}**")
    if console:
        ref = statistics.mean(r["rec_s"] for r in alone)
        got = statistics.mean(r["rec_s"] for r in console)
        red = (1 - got / ref) * 100
        lo, hi = min(r["rec_s"] for r in alone), max(r["rec_s"] for r in alone)
        # drift-proof: each console run against the mean of the alone runs either side
        brackets = [(1 - c["rec_s"] / ((alone[i]["rec_s"] + alone[i + 1]["rec_s"]) / 2)) * 100
                    for i, c in enumerate(console)]
        worst = max(brackets)
        verdicts.append(
            f"Kafka produce with the console open: mean {got:,.0f} rec/s over {len(console)} "
            f"runs against {ref:,.0f} (mean of {len(alone)} alone runs, which range "
            f"{lo:,.0f}..{hi:,.0f}: the machine drifts): reduction {red:.1f} %; each console "
            "run against the mean of the alone runs just before and after it: "
            + ", ".join(f"{b:.1f} %" for b in brackets) + " - **"
            + ("met" if worst <= TARGET_REDUCTION_PCT else "not met") + "** (≤ 10 %, the "
            "worst of these)" + (" (negative: faster with the console open)"
                                 if worst < 0 else ""))

    cmd = " ".join(["bench/console.py", *sys.argv[1:]])
    version = code_version()
    head = [
        f"Last run {stamp}: `{cmd}`" + (f", code at {version}" if version else "") + ".",
        f"Machine: {machine_line()}. Load average (1/5/15 min) at start {load_start}, at "
        f"end {load_end}; total {total:.0f} s.",
        "One kcompat broker subprocess, default settings. Setup: " + "; ".join(setup_lines)
        + f". Each group committed offset 1 on {GROUP_TOPICS} topics (Empty groups, no "
        "members). The clients and chromium run on the same machine as the broker.",
    ]
    body = [
        "### Targets", "", *[f"* {v}" for v in verdicts], "",
        "### Console pages: the API calls as console.js makes them", "",
        f"3 warm-up rounds then {args.rounds}; `Promise.all` groups run at once over "
        f"{BROWSER_CONNS} keep-alive connections (as a browser). The topic page is the "
        f"1-partition topic with {args.records:,} records; the group page is a group with "
        f"{GROUP_TOPICS} committed partitions. The cluster id (`GET /v3/clusters`, once per "
        "browser tab) is not included.", "",
        *md_table(API_HEADER, api_rows), "",
        "Per call (median; indented: the calls inside a concurrent group):", "",
        *md_table(["page", "call", "median ms"], call_rows), "",
    ]
    if browser_rows:
        body += ["### Console pages in headless chromium", "",
                 "`about:blank`, then `/ui/#/<route>` until the page's table is in the DOM "
                 "(includes /ui, revalidated: 304, and its script and style sheet, named by "
                 "hash and taken from the browser's cache after the warm-up; the cluster id is "
                 "kept in the tab, so `GET /v3/clusters` is asked once); 1 warm-up, then "
                 f"{args.browser_rounds}.", "",
                 *md_table(BROWSER_HEADER, browser_rows), "",
                 "The in-page columns (ms from the navigation's start, Navigation and "
                 "Resource Timing, medians): DOMContentLoaded of /ui; the first and the "
                 "last /v3 request's start and end; \"drawn\": when the console marked "
                 "the page's data drawn (`performance.mark('kcompat:page-drawn')`, after "
                 "its table is built, before the browser paints it). The median column is "
                 "the harsher figure: it also counts selenium's own round trips (the "
                 "navigation, then polling for the table every 2 ms).", ""]
    body += ["### Record browser", "",
             f"`GET .../topics/<topic>/partitions/0/records?...`, 5 times each; broker VmRSS "
             f"{rss0:.0f} MB before, {rss1:.0f} MB after (at the end of the run "
             f"{rss_end:.0f} MB).", "",
             *md_table(REC_HEADER, rec_rows), "",
             "### Kafka produce with the console open", "",
             f"confluent-kafka Producer in a child process, acks=all, linger.ms 5, 100-B "
             f"values, topic of 6 partitions; {args.warmup:g} s warm-up, {args.seconds:g} s "
             "measured; \"others' cores\" is the machine's busy cores less the broker and the "
             "producer (chromium's CPU, in the console runs, and any other work). Console "
             "open = three headless chromiums (Overview; Charts, polling "
             "/metrics every 5 s; a group page, polling lags every 5 s) open before the "
             f"warm-up. Producer delivery errors: {produce_errors}.", "",
             *md_table(["phase (in order)", "acked rec/s", "broker CPU s", "machine busy cores",
                       "others' cores", "load avg at end"], prod_rows),
             ""]
    body.append(f"Broker log: {len(errors)} ERROR/CRITICAL/Traceback lines, {warnings} "
                f"WARNING lines; non-200 answers seen by the bench: {http_bad}.")
    if errors:
        body += ["", "Distinct errors in the broker log (count, message; the cluster id "
                 "elided):", "", "```", *error_summary(errors), "```"]
    if http_errors:
        body += ["", "HTTP errors (distinct, first 6):", "", "```",
                 *list(dict.fromkeys(http_errors))[:6], "```"]
    print()
    print("\n".join([*head, "", *body]))
    if not args.no_results:
        write_section(args.results, f"## {SECTION}\n\n" + "\n\n".join(head) + "\n\n"
                      + "\n".join(body) + "\n", SECTION)
        print(f"\nwrote the section \"{SECTION}\" in {args.results}")


if __name__ == "__main__":
    main()
