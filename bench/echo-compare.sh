#!/usr/bin/env bash
# Runs weft-loadtest against the weft echo example and the Go standard-library echo server
# (bench/go/echo) in the same run, one fresh server process per load, and prints a comparison
# table (round trips/s, RTT, server RSS and page tables per connection) and a JSON line.
#
#   bench/echo-compare.sh                 # the issue's four loads
#   RUNS="2000:5:0 10000:5:0" bench/echo-compare.sh
#
# RUNS is a list of CONNS:ROUNDS:STAGGER_MS. Go is found as $GO, .venv-go/bin/go at the repo
# root, or `go` on PATH (scripts/install-go.sh installs one); without it only weft runs and the
# script says why. All traffic goes to 127.0.0.1; every load is bounded by the load tester's
# own timeouts and by `timeout` here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
RUNS=${RUNS:-"8:200:0 2000:5:0 2000:5:2 10000:5:0"}
PORT=${PORT:-7391}
out=$(mktemp -d)
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done; rm -rf "$out"' EXIT

cargo build --release -q -p weft --example echo
cargo build --release -q -p weft-loadtest
# Copies: a later cargo build in this tree may replace the uplifted binaries mid-run.
cp "$root/target/release/examples/echo" "$out/weft-echo"
cp "$root/target/release/weft-loadtest" "$out/weft-loadtest"
weft_echo="$out/weft-echo"
loadtest="$out/weft-loadtest"

go=${GO:-}
[ -z "$go" ] && [ -x "$root/.venv-go/bin/go" ] && go="$root/.venv-go/bin/go"
[ -z "$go" ] && go=$(command -v go || true)
servers="weft"
if [ -n "$go" ] && [ -x "$go" ]; then
  GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod "$go" -C bench/go/echo build -o "$out/go-echo" .
  servers="weft go"
else
  echo "echo-compare: skipping the Go server: no Go toolchain (set GO=, or run scripts/install-go.sh)" >&2
fi

status() { awk -v k="$2:" '$1==k {print $2}' "/proc/$1/status"; }

for run in $RUNS; do
  IFS=: read -r conns rounds stagger <<<"$run"
  for server in $servers; do
    bin=$weft_echo; [ "$server" = go ] && bin="$out/go-echo"
    port=$((PORT++))
    # The server gets a descriptor limit that fits the load (its own soft limit may be 1024).
    (ulimit -n "$(ulimit -Hn)"; exec "$bin" "127.0.0.1:$port") >"$out/server.log" 2>&1 &
    spid=$!
    for _ in $(seq 100); do grep -q listening "$out/server.log" && break; sleep 0.05; done
    rss0=$(status $spid VmRSS); pte0=$(status $spid VmPTE); ptemax=$pte0
    timeout 120 "$loadtest" --addr "127.0.0.1:$port" --conns "$conns" --rounds "$rounds" \
      --stagger-ms "$stagger" >"$out/load.txt" 2>&1 &
    lpid=$!
    while kill -0 $lpid 2>/dev/null; do
      p=$(status $spid VmPTE || echo 0); [ "${p:-0}" -gt "$ptemax" ] && ptemax=$p
      sleep 0.05
    done
    wait $lpid && ok=1 || ok=0
    hwm=$(status $spid VmHWM)
    kill $spid; wait $spid 2>/dev/null || true
    tail -n 1 "$out/load.txt" | python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
r.update(server='$server', conns=$conns, rounds=$rounds, stagger_ms=$stagger, exit_ok=$ok,
         rss_before_kb=$rss0, rss_peak_kb=$hwm, pte_before_kb=$pte0, pte_peak_kb=$ptemax)
print(json.dumps(r))" >>"$out/results.jsonl" || { echo "echo-compare: $server $run failed:"; cat "$out/load.txt"; }
    grep -v '^{' "$out/load.txt" | sed "s/^/  [$server C=$conns R=$rounds stagger=$stagger] /"
  done
done

python3 - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print(f"{'load':<24}{'server':<7}{'ok/failed':>12}{'rtts':>8}{'rt/s':>10}{'p50 us':>9}{'p99 us':>9}"
      f"{'RSS/conn':>10}{'PTE/conn':>10}")
by = {}
for r in rows:
    load = f"C={r['conns']} R={r['rounds']}" + (f" stagger {r['stagger_ms']}ms" if r['stagger_ms'] else "")
    rss = (r['rss_peak_kb'] - r['rss_before_kb']) * 1024 / r['conns']
    pte = (r['pte_peak_kb'] - r['pte_before_kb']) * 1024 / r['conns']
    r['rss_per_conn_b'] = round(rss); r['pte_per_conn_b'] = round(pte)
    by.setdefault(load, {})[r['server']] = r
    print(f"{load:<24}{r['server']:<7}{str(r['conns_ok'])+'/'+str(r['conns_failed']):>12}{r['rtt_count']:>8}"
          f"{r['round_trips_per_sec']:>10.0f}{r['rtt_p50_us']:>9}{r['rtt_p99_us']:>9}{rss:>9.0f}B{pte:>9.0f}B")
summary = {}
for load, s in by.items():
    if 'weft' in s and 'go' in s:
        tp = s['weft']['round_trips_per_sec'] / max(s['go']['round_trips_per_sec'], 1)
        mem = s['weft']['rss_per_conn_b'] / max(s['go']['rss_per_conn_b'], 1)
        print(f"{load:<24}weft/go: throughput x{tp:.2f}, RSS per connection x{mem:.2f}")
        summary[load] = {'throughput_ratio': round(tp, 3), 'rss_ratio': round(mem, 3)}
print(json.dumps({'runs': rows, 'weft_vs_go': summary}))
PY
