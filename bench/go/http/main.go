// Command http is the Go peer of weft's HTTP example for bench/http-compare.sh: the Go
// standard library's net/http server (keep-alive, a goroutine per connection) with the same
// routes: `GET /` answers "hello, world\n"; `GET /deep?kb=N` (0 <= N <= 200) recurses through N
// frames of about 1 KiB each before it answers "deep N\n".
//
//	go run ./bench/go/http 127.0.0.1:8080
package main

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
)

// sink keeps each frame's array alive and written, so the compiler cannot shrink the frame.
var sink byte

// deep recurses through kb frames of 1 KiB each and returns kb, as weft's example does.
//
//go:noinline
func deep(kb int) int {
	var frame [1024]byte
	for i := range frame {
		frame[i] = byte(kb)
	}
	if kb == 0 {
		return 0
	}
	below := deep(kb - 1)
	sink ^= frame[kb%1024]
	return below + 1
}

func main() {
	addr := "127.0.0.1:8080"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("hello, world\n"))
	})
	mux.HandleFunc("GET /deep", func(w http.ResponseWriter, r *http.Request) {
		kb, err := strconv.Atoi(r.URL.Query().Get("kb"))
		if err != nil || kb < 0 || kb > 200 {
			http.Error(w, "kb must be 0..=200", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "deep %d\n", deep(kb))
	})
	fmt.Printf("http: listening on %s\n", addr)
	if err := http.ListenAndServe(addr, mux); err != nil {
		fmt.Fprintf(os.Stderr, "http: %v\n", err)
		os.Exit(1)
	}
}
