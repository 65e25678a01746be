// Command echo is the Go peer of weft's echo example: the Go standard library's
// goroutine-per-connection TCP echo server, 16 KiB buffer, TCP_NODELAY (Go's default).
//
//	go run ./bench/go/echo 127.0.0.1:7001
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

func main() {
	addr := "127.0.0.1:7001"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "echo: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("echo: listening on %s\n", ln.Addr())
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				if backoff == 0 {
					backoff = 5 * time.Millisecond
				} else if backoff *= 2; backoff > time.Second {
					backoff = time.Second
				}
				time.Sleep(backoff)
				continue
			}
			fmt.Fprintf(os.Stderr, "echo: accept: %v\n", err)
			os.Exit(1)
		}
		backoff = 0
		go serve(conn)
	}
}

func serve(conn net.Conn) {
	defer conn.Close()
	conn.(*net.TCPConn).SetNoDelay(true)
	buf := make([]byte, 16*1024)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return
		}
		if _, err := conn.Write(buf[:n]); err != nil {
			return
		}
	}
}
