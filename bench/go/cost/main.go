// The Go side of `weft-bench cost`: one measurement per run, printed as one JSON line.
//
//	-what spawn       N goroutines that bump an atomic; the last one wakes main (ns each);
//	                  -rounds R of them in this process: "ns" is the median round, "first_ns"
//	                  the first
//	-what spawnjoin   the same rounds, each goroutine joined by its own WaitGroup (as a
//	                  JoinHandle is one per task)
//	-what spawnwg     the same rounds, every goroutine marking one shared WaitGroup done
//	                  (`go func(){ wg.Done() }()`; weft's peer: detached tasks that each
//	                  hold a clone of one channel Sender)
//	-what sendrecv    send then receive on one goroutine, channel of capacity 1 (ns per pair)
//	-what pingpong    two goroutines bounce a value over unbuffered channels (ns per round trip)
//	-what threadlimit debug.SetMaxThreads(-limit), then goroutines that each lock an OS thread
//	                  and block: the runtime dies with "fatal error: thread exhaustion"
//
// GOMAXPROCS comes from -procs (0: the default). Standard library only.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

func spawn(n int) float64 {
	var count atomic.Int64
	done := make(chan struct{})
	start := time.Now()
	for i := 0; i < n; i++ {
		go func() {
			if count.Add(1) == int64(n) {
				close(done)
			}
		}()
	}
	<-done
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

func spawnjoin(n int) float64 {
	start := time.Now()
	handles := make([]*sync.WaitGroup, n)
	for i := 0; i < n; i++ {
		wg := new(sync.WaitGroup)
		wg.Add(1)
		handles[i] = wg
		go func() { wg.Done() }()
	}
	for _, wg := range handles {
		wg.Wait()
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

func spawnwg(n int) float64 {
	var wg sync.WaitGroup
	start := time.Now()
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func() { wg.Done() }()
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// rounds runs f(n) r times and prints the median, the first round and every round.
func rounds(what string, f func(int) float64, n, r int) {
	all := make([]float64, 0, r)
	for i := 0; i < r; i++ {
		all = append(all, f(n))
	}
	first := all[0]
	sorted := append([]float64(nil), all...)
	sort.Float64s(sorted)
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	fmt.Printf("{\"what\":%q,\"n\":%d,\"procs\":%d,\"ns\":%.2f,\"first_ns\":%.2f,\"rounds\":%d}\n",
		what, n, runtime.GOMAXPROCS(0), median, first, r)
}

func sendrecv(n int) float64 {
	ch := make(chan int, 1)
	start := time.Now()
	for i := 0; i < n; i++ {
		ch <- i
		<-ch
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

func pingpong(n int) float64 {
	ping := make(chan int)
	pong := make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
	}()
	for i := 0; i < 1000; i++ {
		ping <- i
		<-pong
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		ping <- i
		<-pong
	}
	el := time.Since(start)
	close(ping)
	return float64(el.Nanoseconds()) / float64(n)
}

func threadlimit(limit int) {
	debug.SetMaxThreads(limit)
	block := make(chan struct{})
	for i := 0; i < 4*limit; i++ {
		go func() {
			runtime.LockOSThread()
			<-block
		}()
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("{\"what\":\"threadlimit\",\"survived\":true}\n")
}

func main() {
	what := flag.String("what", "spawn", "spawn, spawnjoin, spawnwg, sendrecv, pingpong or threadlimit")
	n := flag.Int("n", 100000, "operations")
	r := flag.Int("rounds", 1, "rounds in this process for -what spawn, spawnjoin and spawnwg")
	procs := flag.Int("procs", 0, "GOMAXPROCS (0: default)")
	limit := flag.Int("limit", 10, "thread limit for -what threadlimit")
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	var ns float64
	switch *what {
	case "spawn":
		rounds(*what, spawn, *n, max(*r, 1))
		return
	case "spawnjoin":
		rounds(*what, spawnjoin, *n, max(*r, 1))
		return
	case "spawnwg":
		rounds(*what, spawnwg, *n, max(*r, 1))
		return
	case "sendrecv":
		ns = sendrecv(*n)
	case "pingpong":
		ns = pingpong(*n)
	case "threadlimit":
		threadlimit(*limit)
		return
	default:
		panic("unknown -what " + *what)
	}
	fmt.Printf("{\"what\":%q,\"n\":%d,\"procs\":%d,\"ns\":%.2f}\n", *what, *n, runtime.GOMAXPROCS(0), ns)
}
