// The Go side of `weft-bench growth`: every request is a new goroutine whose handler calls
// through a chain of seven non-inlined frames with 128, 512, 1024, 2600, 4096, 6144 and
// 3000 bytes of locals (about 17 KiB) before it answers on a channel; -inflight requests are
// in flight at once. A goroutine starts with a small stack and grows it by copying
// (runtime.newstack → copystack) on its way down the chain: the cost this measures. Writes a
// CPU profile (-cpuprofile) for `weft-gostack analyze`, and prints one JSON line.
// Standard library only.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"syscall"
	"time"
)

//go:noinline
func f7(i int) int {
	var buf [3000]byte
	buf[i%len(buf)] = byte(i)
	return int(buf[(i*7)%len(buf)]) + 1
}

//go:noinline
func f6(i int) int {
	var buf [6144]byte
	buf[i%len(buf)] = byte(i)
	return f7(i+1) + int(buf[(i*7)%len(buf)])
}

//go:noinline
func f5(i int) int {
	var buf [4096]byte
	buf[i%len(buf)] = byte(i)
	return f6(i+1) + int(buf[(i*7)%len(buf)])
}

//go:noinline
func f4(i int) int {
	var buf [2600]byte
	buf[i%len(buf)] = byte(i)
	return f5(i+1) + int(buf[(i*7)%len(buf)])
}

//go:noinline
func f3(i int) int {
	var buf [1024]byte
	buf[i%len(buf)] = byte(i)
	return f4(i+1) + int(buf[(i*7)%len(buf)])
}

//go:noinline
func f2(i int) int {
	var buf [512]byte
	buf[i%len(buf)] = byte(i)
	return f3(i+1) + int(buf[(i*7)%len(buf)])
}

//go:noinline
func handle(i int) int {
	var buf [128]byte
	buf[i%len(buf)] = byte(i)
	return f2(i+1) + int(buf[(i*7)%len(buf)])
}

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	n := flag.Int("requests", 200000, "requests")
	inflight := flag.Int("inflight", 64, "requests in flight")
	profile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "growth: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "growth: %v\n", err)
			os.Exit(1)
		}
	}
	answers := make(chan int, *inflight)
	serve := func(i int) { answers <- handle(i) }
	cpu0 := cpu()
	start := time.Now()
	started := 0
	for ; started < *inflight && started < *n; started++ {
		go serve(started)
	}
	sum := 0
	for done := 0; done < *n; done++ {
		sum += <-answers
		if started < *n {
			go serve(started)
			started++
		}
	}
	elapsed := time.Since(start)
	used := cpu() - cpu0
	if *profile != "" {
		pprof.StopCPUProfile()
	}
	fmt.Printf("{\"requests\":%d,\"inflight\":%d,\"seconds\":%.4f,\"requests_per_sec\":%.0f,\"cpu_ns_per_request\":%.0f,\"checksum\":%d}\n",
		*n, *inflight, elapsed.Seconds(), float64(*n)/elapsed.Seconds(), float64(used.Nanoseconds())/float64(*n), sum)
}
