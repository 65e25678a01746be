#!/usr/bin/env bash
# Drives `wrk` against three HTTP/1.1 keep-alive servers in the same run: weft's HTTP example
# (weft/examples/http.rs), the Go standard library's net/http (bench/go/http) and hyper on
# tokio's multi-thread runtime (bench/src/bin/http_hyper.rs), all with the same route. Each
# load gets a fresh server process; the servers alternate (weft go hyper weft go hyper ...).
# Prints a table (requests/s, latency p50/p99, socket errors, non-2xx answers, server CPU per
# request from /proc/PID/stat, peak RSS) and a JSON line.
#
#   bench/http-compare.sh                            # C = 64, 1000, 10000; 5 s each; GET /
#   CONNS="64 1000" DURATION=3 REPEAT=3 bench/http-compare.sh
#   ROUTE="/deep?kb=64" bench/http-compare.sh        # a handler using 64 KiB of stack
#
# wrk comes from scripts/install-wrk.sh (Debian package); without it the script says why and
# stops. Go is $GO, .venv-go/bin/go at the repo root, or `go` on PATH (scripts/install-go.sh);
# without it the Go server is skipped with a reason. wrk and the servers share this machine's
# CPUs (wrk -t2 by default): compare ratios from one run, not absolute figures across runs.
# All traffic goes to 127.0.0.1; every load is bounded by `timeout`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CONNS=${CONNS:-"64 1000 10000"}
DURATION=${DURATION:-5}
THREADS=${THREADS:-2}
REPEAT=${REPEAT:-1}
ROUTE=${ROUTE:-/}
PORT=${PORT:-7491}
out=$(mktemp -d)
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done; rm -rf "$out"' EXIT

if ! wrk=$(scripts/install-wrk.sh); then
  echo "http-compare: cannot run: no wrk (scripts/install-wrk.sh failed, reason above)" >&2
  exit 1
fi

cargo build --release -q -p weft --example http
cargo build --release -q -p weft-bench --bin http_hyper
# Copies: a later cargo build in this tree may replace the uplifted binaries mid-run.
cp "$root/target/release/examples/http" "$out/weft"
cp "$root/target/release/http_hyper" "$out/hyper"
servers="weft hyper"

go=${GO:-}
[ -z "$go" ] && [ -x "$root/.venv-go/bin/go" ] && go="$root/.venv-go/bin/go"
[ -z "$go" ] && go=$(command -v go || true)
if [ -n "$go" ] && [ -x "$go" ]; then
  GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod "$go" -C bench/go/http build -o "$out/go" .
  servers="weft go hyper"
else
  echo "http-compare: skipping the Go server: no Go toolchain (set GO=, or run scripts/install-go.sh)" >&2
fi

# wrk opens every connection at once: it and the servers need a descriptor limit above C.
ulimit -n "$(ulimit -Hn)"
max_conns=$(for c in $CONNS; do echo "$c"; done | sort -n | tail -1)
if [ "$(ulimit -n)" -lt $((max_conns + 64)) ]; then
  echo "http-compare: the descriptor limit ($(ulimit -n)) is below C=$max_conns: those loads will fail to connect" >&2
fi

status() { awk -v k="$2:" '$1==k {print $2}' "/proc/$1/status"; }
# CPU time (user + system) of process $1 so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for repeat in $(seq "$REPEAT"); do
for conns in $CONNS; do
  for server in $servers; do
    port=$((PORT++))
    "$out/$server" "127.0.0.1:$port" >"$out/server.log" 2>&1 &
    spid=$!
    for _ in $(seq 100); do grep -q listening "$out/server.log" && break; sleep 0.05; done
    rss0=$(status $spid VmRSS)
    cpu0=$(cpu_ticks $spid)
    threads=$THREADS; [ "$threads" -gt "$conns" ] && threads=$conns
    timeout $((DURATION + 60)) "$wrk" -t"$threads" -c"$conns" -d"${DURATION}s" --timeout 5s \
      --latency "http://127.0.0.1:$port$ROUTE" >"$out/wrk.txt" 2>&1 && ok=1 || ok=0
    cpu1=$(cpu_ticks $spid)
    hwm=$(status $spid VmHWM)
    kill $spid; wait $spid 2>/dev/null || true
    python3 - "$out/wrk.txt" >>"$out/results.jsonl" <<PY || { echo "http-compare: $server C=$conns: no result:"; cat "$out/wrk.txt"; }
import json, re, sys
text = open(sys.argv[1]).read()
def ms(v, unit):
    return float(v) * {'us': 1e-3, 'ms': 1.0, 's': 1e3}[unit]
lat = {p: ms(v, u) for p, v, u in re.findall(r'^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$', text, re.M)}
m = re.search(r'(\d+) requests in', text)
errs = re.search(r'Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)', text)
non2xx = re.search(r'Non-2xx or 3xx responses: (\d+)', text)
requests = int(m.group(1))
cpu_s = ($cpu1 - $cpu0) / $(getconf CLK_TCK)
print(json.dumps({
    'server': '$server', 'repeat': $repeat, 'conns': $conns, 'route': '$ROUTE', 'wrk_ok': $ok,
    'requests': requests, 'requests_per_sec': float(re.search(r'Requests/sec:\s+([\d.]+)', text).group(1)),
    'latency_p50_ms': lat.get('50'), 'latency_p99_ms': lat.get('99'),
    'socket_errors': dict(zip(['connect', 'read', 'write', 'timeout'], map(int, errs.groups()))) if errs else {},
    'non_2xx': int(non2xx.group(1)) if non2xx else 0,
    'server_cpu_s': cpu_s, 'server_cpu_per_request_us': round(cpu_s * 1e6 / max(requests, 1), 2),
    'rss_before_kb': $rss0, 'rss_peak_kb': $hwm}))
PY
    echo "  [$server C=$conns] $(grep -E 'Requests/sec' "$out/wrk.txt" | tr -s ' ')" >&2
  done
done
done

python3 - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print(f"{'C':>6} {'server':<7}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'sock err':>10}{'non-2xx':>8}"
      f"{'cpu/req us':>11}{'RSS peak':>10}")
for r in rows:
    errs = sum(r['socket_errors'].values())
    print(f"{r['conns']:>6} {r['server']:<7}{r['requests_per_sec']:>10.0f}{r['latency_p50_ms'] or 0:>9.2f}"
          f"{r['latency_p99_ms'] or 0:>9.2f}{errs:>10}{r['non_2xx']:>8}{r['server_cpu_per_request_us']:>11.2f}"
          f"{r['rss_peak_kb'] / 1024:>8.1f}MB")
def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
summary = {}
for conns in dict.fromkeys(r['conns'] for r in rows):
    by = {}
    for r in rows:
        if r['conns'] == conns:
            by.setdefault(r['server'], []).append(r['requests_per_sec'])
    if 'weft' not in by:
        continue
    ratios = {f"weft_vs_{peer}": round(median(by['weft']) / max(median(v), 1e-9), 3)
              for peer, v in by.items() if peer != 'weft'}
    summary[f"C={conns}"] = ratios
    print(f"C={conns}: median requests/s ratios " + ", ".join(f"{k} x{v:.2f}" for k, v in ratios.items()))
print(json.dumps({'runs': rows, 'ratios': summary}))
PY
