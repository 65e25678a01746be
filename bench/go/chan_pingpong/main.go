// Ping-pong over two unbuffered channels, the peer of bench/src/bin/chan_pingpong.rs.
// Prints one line per GOMAXPROCS: "pingpong procs=N ns=<median ns per round trip>".
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sort"
	"time"
)

func round(n int) float64 {
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

func main() {
	n := flag.Int("n", 200000, "round trips per round")
	rounds := flag.Int("rounds", 5, "rounds")
	flag.Parse()
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		var v []float64
		for r := 0; r < *rounds; r++ {
			v = append(v, round(*n))
		}
		sort.Float64s(v)
		fmt.Printf("pingpong procs=%d ns=%.1f\n", procs, v[len(v)/2])
	}
}
