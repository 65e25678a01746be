// Spawn benchmarks for comparison with weft's bench/src/bin/spawn.rs: spawn+join (a
// WaitGroup per goroutine, as a JoinHandle is one per task) and spawn+complete counted by an
// atomic, N goroutines per round, median ns per goroutine over the rounds. Standard library only.
package main

import (
	"flag"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func main() {
	n := flag.Int("n", 100000, "goroutines per round")
	rounds := flag.Int("rounds", 5, "rounds")
	flag.Parse()

	var joinNs, completeNs []float64
	for r := 0; r < *rounds; r++ {
		start := time.Now()
		handles := make([]*sync.WaitGroup, *n)
		for i := 0; i < *n; i++ {
			wg := new(sync.WaitGroup)
			wg.Add(1)
			handles[i] = wg
			go func() { wg.Done() }()
		}
		for _, wg := range handles {
			wg.Wait()
		}
		joinNs = append(joinNs, float64(time.Since(start).Nanoseconds())/float64(*n))

		var count atomic.Int64
		done := make(chan struct{})
		start = time.Now()
		for i := 0; i < *n; i++ {
			go func() {
				if count.Add(1) == int64(*n) {
					close(done)
				}
			}()
		}
		<-done
		completeNs = append(completeNs, float64(time.Since(start).Nanoseconds())/float64(*n))
	}
	fmt.Printf("{\"spawn_join_ns\":%.1f,\"spawn_complete_ns\":%.1f}\n", median(joinNs), median(completeNs))
}
