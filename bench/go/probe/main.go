// The Go side of `weft-bench probe` and the peer of weft's million example: N goroutines,
// each optionally using 8 or 64 KiB of stack first, all parked on one channel. Memory is read
// from /proc/self/status before the spawn loop, once all are parked, again after -settle-ms
// (time for the scavenger to give memory back: the "settled" fields, as weft's million
// example prints them), and once more after six forced GCs (the original goroutine-memory
// experiment's settling step: the "gc" fields), with the runtime's StackInuse divided by the
// goroutines. Prints one JSON line. Standard library only.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func status() (rss, pte, hwm int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb * 1024
		case "VmPTE:":
			pte = kb * 1024
		case "VmHWM:":
			hwm = kb * 1024
		}
	}
	return
}

//go:noinline
func use8k() byte {
	var buf [8192]byte
	for i := 0; i < len(buf); i += 512 {
		buf[i] = byte(i)
	}
	return buf[len(buf)-1]
}

//go:noinline
func use64k() byte {
	var buf [65536]byte
	for i := 0; i < len(buf); i += 512 {
		buf[i] = byte(i)
	}
	return buf[len(buf)-1]
}

var sink atomic.Int64

func main() {
	n := flag.Int("tasks", 1000000, "goroutines")
	mode := flag.String("mode", "idle", "idle, 8k or 64k")
	settleMs := flag.Int("settle-ms", 1000, "milliseconds to wait once all are parked, then measure again")
	flag.Parse()

	gate := make(chan struct{})
	var parked atomic.Int64
	var wg sync.WaitGroup
	rss0, pte0, _ := status()
	start := time.Now()
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch *mode {
			case "8k":
				sink.Add(int64(use8k()))
			case "64k":
				sink.Add(int64(use64k()))
			}
			parked.Add(1)
			<-gate
		}()
	}
	loop := time.Since(start)
	for parked.Load() < int64(*n) {
		time.Sleep(time.Millisecond)
	}
	allParked := time.Since(start)
	rss1, pte1, _ := status()
	time.Sleep(time.Duration(*settleMs) * time.Millisecond)
	rss2, pte2, hwm := status()
	for i := 0; i < 6; i++ {
		runtime.GC()
	}
	rss3, pte3, _ := status()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	goroutines := runtime.NumGoroutine()
	close(gate)
	wg.Wait()
	per := func(a, b int64) float64 { return float64(b-a) / float64(*n) }
	// The field names of weft's million example, so bench/src/bin/million.rs reads both.
	fmt.Printf("{\"tasks\":%d,\"mode\":%q,\"spawn_ms\":%.1f,\"spawn_loop_ms\":%.1f,\"rss_bytes_per_task\":%.0f,"+
		"\"pte_bytes_per_task\":%.0f,\"settle_ms\":%d,\"settled_rss_bytes_per_task\":%.0f,"+
		"\"settled_pte_bytes_per_task\":%.0f,\"gc_rss_bytes_per_task\":%.0f,\"gc_pte_bytes_per_task\":%.0f,"+
		"\"stack_inuse_per_goroutine\":%.0f,\"peak_rss_bytes\":%d}\n",
		*n, *mode, float64(allParked.Microseconds())/1000, float64(loop.Microseconds())/1000,
		per(rss0, rss1), per(pte0, pte1), *settleMs, per(rss0, rss2), per(pte0, pte2),
		per(rss0, rss3), per(pte0, pte3), float64(ms.StackInuse)/float64(goroutines), hwm)
}
