// Command service is the weft-gostack profiling fixture: an in-process
// "service" whose handler goroutines recurse to a known depth with known
// frame sizes, run under runtime/pprof CPU profiling.
//
// Each request is handled on a fresh goroutine (as net/http does per
// connection). The handler recurses `depth` levels through recurse, whose
// frame holds a frameBuf-byte array, and ends in leaf, whose frame holds a
// leafBuf-byte array. The leaf's big frame is what pushes the stack over the
// 32 KiB boundary, so the last stack growth of every goroutine happens at its
// deepest point. The program prints the true stack need it measured: the
// address of a local in the goroutine's top frame (handle) minus the address
// of a local in the deepest frame (leaf).
//
// Standard library only; no network. The run is bounded by -duration.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const (
	depth    = 44       // recursion levels below handle
	frameBuf = 480      // bytes of recurse's local array
	leafBuf  = 24 << 10 // bytes of leaf's local array
)

var maxNeed atomic.Uintptr

type request struct {
	id   int
	done chan<- uintptr
}

//go:noinline
func recurse(n int, top *byte) uintptr {
	var buf [frameBuf]byte
	buf[n%frameBuf] = byte(n)
	if n == 0 {
		return leaf(top) + uintptr(buf[0])
	}
	r := recurse(n-1, top)
	return r + uintptr(buf[(n*7)%frameBuf])
}

//go:noinline
func leaf(top *byte) uintptr {
	var buf [leafBuf]byte
	for i := 0; i < len(buf); i += 64 {
		buf[i] = byte(i >> 6)
	}
	// top points into handle's frame; stack copies move it along with the
	// stack, so both addresses are taken on the stack as it is now.
	need := uintptr(unsafe.Pointer(top)) - uintptr(unsafe.Pointer(&buf[0]))
	for {
		old := maxNeed.Load()
		if need <= old || maxNeed.CompareAndSwap(old, need) {
			break
		}
	}
	return uintptr(buf[need%leafBuf])
}

//go:noinline
func handle(req request) {
	var anchor [8]byte
	anchor[req.id%8] = 1
	req.done <- recurse(depth, &anchor[0]) + uintptr(anchor[0])
}

// serve accepts requests from the queue and hands each to its own goroutine.
func serve(queue <-chan request, wg *sync.WaitGroup) {
	defer wg.Done()
	for req := range queue {
		go handle(req)
	}
}

func main() {
	duration := flag.Duration("duration", 3*time.Second, "how long to run the load")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()

	// Adaptive starting stacks (Go 1.19+) would hide the growth this fixture
	// exists to show; run with fixed 2 KiB starting stacks.
	if !strings.Contains(os.Getenv("GODEBUG"), "adaptivestackstart=0") {
		exe, err := os.Executable()
		if err == nil {
			env := append(os.Environ(), "GODEBUG=adaptivestackstart=0")
			err = syscall.Exec(exe, os.Args, env)
		}
		fmt.Fprintln(os.Stderr, "service: cannot re-exec with GODEBUG=adaptivestackstart=0:", err)
		os.Exit(1)
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "service:", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "service:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}

	queue := make(chan request, 256)
	var wg sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go serve(queue, &wg)
	}
	done := make(chan uintptr, 256)
	start := time.Now()
	var sum uintptr
	handled := 0
	for time.Since(start) < *duration {
		const batch = 128
		for i := 0; i < batch; i++ {
			queue <- request{id: handled + i, done: done}
		}
		for i := 0; i < batch; i++ {
			sum += <-done
		}
		handled += batch
	}
	close(queue)
	wg.Wait()
	fmt.Printf("handled=%d checksum=%d\n", handled, sum&0xff)
	fmt.Printf("depth=%d frame_buf=%d leaf_buf=%d\n", depth, frameBuf, leafBuf)
	fmt.Printf("true_stack_need_bytes=%d\n", maxNeed.Load())
}
