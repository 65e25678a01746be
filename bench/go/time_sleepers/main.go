// The Go side of `weft-bench sleepers` (bench/src/cli/sleepers.rs): N goroutines each
// sleeping until base + min + a random part of spread (1M, 1-5 s by default). Prints one
// JSON line with the fields of the Rust peers. Standard library only.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func statusMiB(field string) float64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line[len(field)+1:])
			if len(f) > 0 {
				kib, _ := strconv.ParseFloat(f[0], 64)
				return kib / 1024
			}
		}
	}
	return 0
}

func main() {
	n := flag.Int("n", 1000000, "goroutines")
	minMs := flag.Int("min-ms", 1000, "shortest sleep after the base, ms")
	spreadMs := flag.Int("spread-ms", 4000, "sleeps are drawn from [min, min+spread), ms")
	leadMs := flag.Int("lead-ms", 3000, "the base is lead + 6 µs × n after the start, ms")
	flag.Parse()
	spreadUs := uint64(max(*spreadMs, 1)) * 1000
	lateness := make([]uint32, *n)
	var asleep, woken atomic.Int64
	seed := uint64(0x2545f4914f6cdd1d)
	wait := func(c *atomic.Int64) {
		for c.Load() < int64(*n) {
			time.Sleep(2 * time.Millisecond)
		}
	}
	start := time.Now()
	// As in sleepers.rs: deadlines count from a base after every goroutine has started.
	base := start.Add(time.Duration(*leadMs)*time.Millisecond + time.Duration(*n)*6*time.Microsecond)
	for i := 0; i < *n; i++ {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		sleep := time.Duration(*minMs)*time.Millisecond + time.Duration(seed%spreadUs)*time.Microsecond
		go func(i int, deadline time.Time) {
			asleep.Add(1)
			time.Sleep(time.Until(deadline))
			late := time.Since(deadline)
			if late < 0 {
				late = 0
			}
			lateness[i] = uint32(late.Microseconds())
			woken.Add(1)
		}(i, base.Add(sleep))
	}
	wait(&asleep)
	spawn := time.Since(start)
	first := base.Add(time.Duration(*minMs) * time.Millisecond)
	idle := "null"
	ws := time.Now().Add(20 * time.Millisecond)
	we := first.Add(-20 * time.Millisecond)
	if we.After(ws.Add(100 * time.Millisecond)) {
		time.Sleep(time.Until(ws))
		c0 := cpu()
		t0 := time.Now()
		time.Sleep(time.Until(we))
		c := cpu() - c0
		idle = fmt.Sprintf("%.2f", float64(c.Microseconds())/1e3/time.Since(t0).Seconds())
	}
	rss := statusMiB("VmRSS")
	pte := statusMiB("VmPTE")
	time.Sleep(time.Until(we))
	c0 := cpu()
	wait(&woken)
	perWake := float64((cpu() - c0).Nanoseconds()) / 1e3 / float64(*n)
	sort.Slice(lateness, func(a, b int) bool { return lateness[a] < lateness[b] })
	pct := func(p float64) uint32 {
		i := int(float64(*n) * p)
		if i >= *n {
			i = *n - 1
		}
		return lateness[i]
	}
	fmt.Printf("{\"tasks\":%d,\"spawn_ms\":%.1f,\"p50_us\":%d,\"p99_us\":%d,\"max_us\":%d,\"idle_cpu_ms_per_s\":%s,\"cpu_per_wake_us\":%.3f,\"rss_mib\":%.1f,\"pte_mib\":%.1f}\n",
		*n, float64(spawn.Microseconds())/1e3, pct(0.5), pct(0.99), lateness[*n-1], idle, perWake, rss, pte)
}
