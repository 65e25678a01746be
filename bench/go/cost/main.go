// The Go side of `weft-bench cost`: one measurement per run, printed as one JSON line.
//
//	-what spawn       N goroutines that bump an atomic; the last one wakes main (ns each)
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
	what := flag.String("what", "spawn", "spawn, sendrecv, pingpong or threadlimit")
	n := flag.Int("n", 100000, "operations")
	procs := flag.Int("procs", 0, "GOMAXPROCS (0: default)")
	limit := flag.Int("limit", 10, "thread limit for -what threadlimit")
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	var ns float64
	switch *what {
	case "spawn":
		ns = spawn(*n)
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
