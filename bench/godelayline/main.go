// Command godelayline is the staging benchmark's delay line (bench/delay_line.py starts it): a TCP
// relay on 127.0.0.1 that holds every byte for a fixed time each way before passing it on, so a
// client sees a chosen round trip to a server on the same machine, without a limit on the rate.
// The relay it replaces ran in Python in a thread of the benchmark: it moved about a hundred MiB/s
// at most and took the benchmark process's interpreter lock to do it, a limit for every client it
// carried. This one costs a copy and a timer per read.
//
//	godelayline -target 127.0.0.1:2222 -one-way 25ms
//
// It prints the port it listens on, then relays until its standard input closes (or it is killed).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// What one read takes at most; what it read is held as one piece.
const readBytes = 256 << 10

// Pieces held per direction before the reader waits: at 256 KiB each, far more than any rate
// times the delay that the benchmark reaches (4 GiB at 64 Ki pieces of the largest size).
const heldPieces = 1 << 16

type piece struct {
	due  time.Time
	data []byte
}

// pipe passes src's bytes to dst, each piece `delay` after it was read, in order; at src's end it
// closes dst's writing side, so a half close crosses the line as it would a network.
func pipe(src, dst *net.TCPConn, delay time.Duration) {
	held := make(chan piece, heldPieces)
	go func() {
		defer close(held)
		buf := make([]byte, readBytes)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				held <- piece{time.Now().Add(delay), append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	for p := range held {
		if wait := time.Until(p.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dst.Write(p.data); err != nil {
			src.Close() // the far side is gone: end the reader, and drop what it held
			for range held {
			}
			return
		}
	}
	dst.CloseWrite()
}

func relay(client *net.TCPConn, target string, delay time.Duration) {
	defer client.Close()
	conn, err := net.Dial("tcp", target)
	if err != nil {
		fmt.Fprintf(os.Stderr, "godelayline: %v\n", err)
		return
	}
	server := conn.(*net.TCPConn)
	defer server.Close()
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); pipe(client, server, delay) }()
	go func() { defer both.Done(); pipe(server, client, delay) }()
	both.Wait()
}

func main() {
	target := flag.String("target", "", "host:port the line leads to")
	oneWay := flag.Duration("one-way", 0, "how long every byte is held, each way")
	flag.Parse()
	if *target == "" || *oneWay < 0 {
		fmt.Fprintln(os.Stderr, "usage: godelayline -target host:port -one-way 25ms")
		os.Exit(2)
	}
	listener, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "godelayline: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(listener.Addr().(*net.TCPAddr).Port)
	go func() { // the parent went away (or closed our input): stop
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		client, err := listener.AcceptTCP()
		if err != nil {
			fmt.Fprintf(os.Stderr, "godelayline: %v\n", err)
			os.Exit(1)
		}
		go relay(client, *target, *oneWay)
	}
}
