// Command stackstart is weft-gostack apply's test program: it tells whether goroutines
// start with a stack big enough for their work.
//
// It runs -rounds rounds of -goroutines goroutines each (all started, then all awaited),
// with a forced GC after every round, as a service's request goroutines come and go. Each
// goroutine recurses -depth levels through a frame holding a 1 KiB array (about 17 KiB for
// the default 16). It passes a pointer into its first frame down the chain and compares,
// at the bottom, the address the pointer holds now with the one it had at the start: the
// runtime moves a goroutine's frames (and rewrites pointers to them) only when it copies
// the stack to grow it, so a changed address means the goroutine started too small.
//
// It prints, after the last round: how many goroutines of that round grew their stack,
// the runtime's starting stack size (/gc/stack/starting-size:bytes, which the GC
// recomputes unless GODEBUG=adaptivestackstart=0 or the recomputation is patched out),
// and the stack memory in use. Standard library only.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"unsafe"
)

//go:noinline
func recurse(n int, top *byte, start uintptr) bool {
	var buf [1024]byte
	buf[n%len(buf)] = byte(n)
	if n == 0 {
		return uintptr(unsafe.Pointer(top)) != start || buf[0] == 0xff
	}
	return recurse(n-1, top, start) || buf[(n*7)%len(buf)] == 0xff
}

//go:noinline
func handle(depth int, grew *atomic.Int64, wg *sync.WaitGroup) {
	defer wg.Done()
	var anchor [8]byte
	if recurse(depth, &anchor[0], uintptr(unsafe.Pointer(&anchor[0]))) {
		grew.Add(1)
	}
}

func main() {
	rounds := flag.Int("rounds", 6, "rounds")
	n := flag.Int("goroutines", 1000, "goroutines per round")
	depth := flag.Int("depth", 16, "recursion depth (1 KiB frames)")
	flag.Parse()
	var grew atomic.Int64
	for r := 0; r < *rounds; r++ {
		grew.Store(0)
		var wg sync.WaitGroup
		wg.Add(*n)
		for i := 0; i < *n; i++ {
			go handle(*depth, &grew, &wg)
		}
		wg.Wait()
		runtime.GC()
	}
	s := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(s)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("goroutines=%d\n", *n)
	fmt.Printf("grew=%d\n", grew.Load())
	fmt.Printf("starting_size=%d\n", s[0].Value.Uint64())
	fmt.Printf("stack_inuse=%d\n", ms.StackInuse)
}
