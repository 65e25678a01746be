#!/usr/bin/env bash
# Runs weft-loadtest against the weft echo example and the Go standard-library echo server
# (bench/go/echo) in the same run, one fresh server process per load, and prints a comparison
# table (round trips/s, RTT, server RSS and page tables per connection) and a JSON line.
# `weft-bench echo` runs the same loads with tokio and thread-per-connection servers too,
# with warm-ups, medians and charts, into target/weft-bench/report.md; this script stays for
# quick weft-vs-Go checks.
#
#   bench/echo-compare.sh                 # the issue's four loads
#   RUNS="2000:5:0 10000:5:0" REPEAT=7 bench/echo-compare.sh
#
# RUNS is a list of CONNS:ROUNDS:STAGGER_MS; the whole list runs REPEAT times (default 1), weft
# and Go alternating. A short load's throughput varies by ±30% from run to run on a shared
# 2-vCPU machine, so with REPEAT > 1 the summary gives the median of the per-repeat ratios
# (each weft run against the Go run right after it) and their range. Go is found as $GO, .venv-go/bin/go at the repo
# root, or `go` on PATH (scripts/install-go.sh installs one); without it only weft runs and the
# script says why. All traffic goes to 127.0.0.1; every load is bounded by the load tester's
# own timeouts and by `timeout` here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
RUNS=${RUNS:-"8:200:0 2000:5:0 2000:5:2 10000:5:0"}
REPEAT=${REPEAT:-1}
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
# CPU time (user + system) of process $1 so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for repeat in $(seq "$REPEAT"); do
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
    cpu0=$(cpu_ticks $spid)
    timeout 120 "$loadtest" --addr "127.0.0.1:$port" --conns "$conns" --rounds "$rounds" \
      --stagger-ms "$stagger" >"$out/load.txt" 2>&1 &
    lpid=$!
    while kill -0 $lpid 2>/dev/null; do
      p=$(status $spid VmPTE || echo 0); [ "${p:-0}" -gt "$ptemax" ] && ptemax=$p
      sleep 0.05
    done
    wait $lpid && ok=1 || ok=0
    hwm=$(status $spid VmHWM)
    cpu1=$(cpu_ticks $spid)
    kill $spid; wait $spid 2>/dev/null || true
    tail -n 1 "$out/load.txt" | python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
r.update(server='$server', repeat=$repeat, conns=$conns, rounds=$rounds, stagger_ms=$stagger, exit_ok=$ok,
         rss_before_kb=$rss0, rss_peak_kb=$hwm, pte_before_kb=$pte0, pte_peak_kb=$ptemax,
         server_cpu_s=($cpu1 - $cpu0) / $(getconf CLK_TCK))
print(json.dumps(r))" >>"$out/results.jsonl" || { echo "echo-compare: $server $run failed:"; cat "$out/load.txt"; }
    grep -v '^{' "$out/load.txt" | sed "s/^/  [$server C=$conns R=$rounds stagger=$stagger] /"
  done
done
done

python3 - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print(f"{'load':<24}{'server':<7}{'ok/failed':>12}{'rtts':>8}{'rt/s':>10}{'p50 us':>9}{'p99 us':>9}"
      f"{'RSS/conn':>10}{'PTE/conn':>10}{'cpu/rt us':>10}")
for r in rows:
    load = f"C={r['conns']} R={r['rounds']}" + (f" stagger {r['stagger_ms']}ms" if r['stagger_ms'] else "")
    rss = (r['rss_peak_kb'] - r['rss_before_kb']) * 1024 / r['conns']
    pte = (r['pte_peak_kb'] - r['pte_before_kb']) * 1024 / r['conns']
    # Server CPU over the whole load (dials and accepts included) per round trip.
    cpu = r['server_cpu_s'] * 1e6 / max(r['rtt_count'], 1)
    r['rss_per_conn_b'] = round(rss); r['pte_per_conn_b'] = round(pte)
    r['server_cpu_per_rt_us'] = round(cpu, 2)
    print(f"{load:<24}{r['server']:<7}{str(r['conns_ok'])+'/'+str(r['conns_failed']):>12}{r['rtt_count']:>8}"
          f"{r['round_trips_per_sec']:>10.0f}{r['rtt_p50_us']:>9}{r['rtt_p99_us']:>9}{rss:>9.0f}B{pte:>9.0f}B"
          f"{cpu:>10.2f}")
summary = {}
pairs = {}
for r in rows:
    pairs.setdefault((r['conns'], r['rounds'], r['stagger_ms']), {}).setdefault(r['repeat'], {})[r['server']] = r
def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
for (conns, rounds, stagger), reps in pairs.items():
    load = f"C={conns} R={rounds}" + (f" stagger {stagger}ms" if stagger else "")
    both = [p for p in reps.values() if 'weft' in p and 'go' in p]
    if not both:
        continue
    ratio = lambda key: [p['weft'][key] / max(p['go'][key], 1e-9) for p in both]
    tp, mem, cpu = ratio('round_trips_per_sec'), ratio('rss_per_conn_b'), ratio('server_cpu_per_rt_us')
    print(f"{load:<24}weft/go over {len(both)} run(s), median [min-max]: throughput x{median(tp):.2f} "
          f"[{min(tp):.2f}-{max(tp):.2f}], RSS per connection x{median(mem):.2f}, "
          f"server CPU per round trip x{median(cpu):.2f} [{min(cpu):.2f}-{max(cpu):.2f}]")
    summary[load] = {'runs': len(both), 'throughput_ratio': round(median(tp), 3),
                     'throughput_ratio_min': round(min(tp), 3), 'throughput_ratio_max': round(max(tp), 3),
                     'rss_ratio': round(median(mem), 3), 'server_cpu_ratio': round(median(cpu), 3)}
print(json.dumps({'runs': rows, 'weft_vs_go': summary}))
PY
