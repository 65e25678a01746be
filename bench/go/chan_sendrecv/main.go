// Send then receive on one goroutine over a channel of capacity 1, the peer of
// bench/src/bin/chan_sendrecv.rs. Prints "sendrecv ns=<median ns per send+recv>".
package main

import (
	"flag"
	"fmt"
	"sort"
	"time"
)

func main() {
	n := flag.Int("n", 5000000, "pairs per round")
	rounds := flag.Int("rounds", 5, "rounds")
	flag.Parse()
	ch := make(chan int, 1)
	var v []float64
	for r := 0; r < *rounds; r++ {
		start := time.Now()
		for i := 0; i < *n; i++ {
			ch <- i
			<-ch
		}
		v = append(v, float64(time.Since(start).Nanoseconds())/float64(*n))
	}
	sort.Float64s(v)
	fmt.Printf("sendrecv ns=%.2f\n", v[len(v)/2])
}
