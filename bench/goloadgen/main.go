// Command goloadgen is the benchmark's second HTTPS load generator (issue 15): the same phases and
// latency measurement as bench/loadgen.py, in Go; it prints the raw latencies, which bench/loadgen.py
// summarizes exactly as it does its own. Python's client costs about as much CPU per request as the
// servers it measures and lags its schedule by milliseconds now and then, so on this 2-core machine
// it caps the fastest server's throughput and sends late requests in bursts. This one stays out of
// the way: what it reports is the server's.
//
//	goloadgen -url https://127.0.0.1:8443/mutate -ca ca.crt -body review.json \
//	    -rates 1000 -seconds 2 -connections 8 -saturation-seconds 3
package main

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	warmupRequests  = 600
	poolConnections = 32
	requestTimeout  = 10 * time.Second
	phasePause      = 300 * time.Millisecond
)

// The review's uid in the body, replaced by a fresh one per request (bench/clusters.py UID_PLACEHOLDER).
var uidPlaceholder = []byte("00000000-0000-4000-8000-000000000000")

type tally struct {
	mu        sync.Mutex
	latencies []float64 // seconds, from the actual send
	fromDue   []float64 // seconds, from when the request was due
	errors    int
	remote    int
	first     string
}

func (t *tally) fail(text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errors++
	if t.first == "" {
		if len(text) > 300 {
			text = text[:300]
		}
		t.first = text
	}
}

type target struct {
	client *http.Client
	url    string
	body   []byte
}

func newUID() []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return []byte(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}

func (t *target) send(into *tally, due time.Time) {
	data := bytes.Replace(t.body, uidPlaceholder, newUID(), 1)
	started := time.Now()
	response, err := t.client.Post(t.url, "application/json", bytes.NewReader(data))
	if err != nil {
		into.fail(err.Error())
		return
	}
	payload, err := io.ReadAll(response.Body)
	response.Body.Close()
	done := time.Now()
	if err != nil {
		into.fail(err.Error())
		return
	}
	allowed := bytes.Contains(payload, []byte(`"allowed": true`)) || bytes.Contains(payload, []byte(`"allowed":true`))
	if response.StatusCode != http.StatusOK || !allowed {
		into.fail(fmt.Sprintf("HTTP %d: %q", response.StatusCode, payload[:min(len(payload), 200)]))
		return
	}
	if due.IsZero() {
		due = started
	}
	into.mu.Lock()
	into.latencies = append(into.latencies, done.Sub(started).Seconds())
	into.fromDue = append(into.fromDue, done.Sub(due).Seconds())
	if bytes.Contains(payload, []byte(`"warnings"`)) {
		into.remote++
	}
	into.mu.Unlock()
}

// runClosed: `connections` workers back to back for `seconds`, or until `count` requests in all.
func runClosed(t *target, connections int, seconds float64, count int) (*tally, float64) {
	into := &tally{}
	deadline := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	var remaining sync.Mutex
	left := count
	var wg sync.WaitGroup
	began := time.Now()
	for w := 0; w < connections; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if count > 0 {
					remaining.Lock()
					if left <= 0 {
						remaining.Unlock()
						return
					}
					left--
					remaining.Unlock()
				}
				t.send(into, time.Time{})
			}
		}()
	}
	wg.Wait()
	return into, time.Since(began).Seconds()
}

// runOpen: request i is due at start + i/rate whether or not earlier ones have returned.
func runOpen(t *target, rate, seconds float64) (*tally, float64, float64) {
	into := &tally{}
	total := max(1, int(rate*seconds))
	interval := time.Duration(float64(time.Second) / rate)
	began := time.Now().Add(5 * time.Millisecond)
	worstLag := 0.0
	var wg sync.WaitGroup
	for i := 0; i < total; i++ {
		due := began.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		worstLag = math.Max(worstLag, time.Since(due).Seconds())
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.send(into, due)
		}()
	}
	wg.Wait()
	return into, time.Since(began).Seconds(), worstLag
}

// phase: what one phase measured, raw; bench/loadgen.py summarizes it as it does its own.
type phase struct {
	Kind        string    `json:"kind"` // "open" or "closed"
	OfferedRPS  float64   `json:"offered_rps,omitempty"`
	Connections int       `json:"connections,omitempty"`
	Latencies   []float64 `json:"latencies_s"`
	FromDue     []float64 `json:"from_due_s"`
	Errors      int       `json:"errors"`
	FirstError  string    `json:"first_error"`
	Remote      int       `json:"remote_responses"`
	ElapsedS    float64   `json:"elapsed_s"`
	MaxLagS     float64   `json:"max_send_lag_s"`
}

func record(kind string, into *tally, elapsed float64) phase {
	return phase{
		Kind: kind, Latencies: into.latencies, FromDue: into.fromDue, Errors: into.errors,
		FirstError: into.first, Remote: into.remote, ElapsedS: elapsed,
	}
}

func progress(label string, p phase) {
	fmt.Fprintf(os.Stderr, "      %-14s %8.1f req/s  errors %d\n", label, float64(len(p.Latencies))/p.ElapsedS, p.Errors)
}

func parseRates(text string) ([]float64, error) {
	var rates []float64
	for _, field := range strings.Split(text, ",") {
		if field == "" {
			continue
		}
		rate, err := strconv.ParseFloat(field, 64)
		if err != nil || rate <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a positive number", field)
		}
		rates = append(rates, rate)
	}
	return rates, nil
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

func run() error {
	url := flag.String("url", "", "https://127.0.0.1:<port>/mutate")
	caFile := flag.String("ca", "", "CA certificate that signed the server's")
	bodyFile := flag.String("body", "", "AdmissionReview JSON to send")
	ratesText := flag.String("rates", "250,500,1000", "offered rates (req/s), comma-separated")
	seconds := flag.Float64("seconds", 2, "length of each open-loop phase")
	connections := flag.Int("connections", 8, "closed-loop concurrency")
	saturation := flag.Float64("saturation-seconds", 3, "0 skips the closed loop")
	flag.Parse()
	if *url == "" || *caFile == "" || *bodyFile == "" {
		return errors.New("-url, -ca and -body are required")
	}
	rates, err := parseRates(*ratesText)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("-ca %s: no PEM certificate in it", *caFile)
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		return err
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: max(poolConnections, *connections),
		ForceAttemptHTTP2:   false, // the servers speak HTTP/1.1, as the Python client does
	}
	t := &target{client: &http.Client{Transport: transport, Timeout: requestTimeout}, url: *url, body: body}
	began := time.Now()
	warm, _ := runClosed(t, poolConnections, 30, warmupRequests)
	if warm.errors > 0 {
		return fmt.Errorf("warm-up failed: %d errors, first: %s", warm.errors, warm.first)
	}
	sent := len(warm.latencies)
	phases := []phase{}
	for _, rate := range rates {
		time.Sleep(phasePause)
		into, elapsed, lag := runOpen(t, rate, *seconds)
		p := record("open", into, elapsed)
		p.OfferedRPS, p.MaxLagS = rate, lag
		sent += len(into.latencies) + into.errors
		phases = append(phases, p)
		progress(fmt.Sprintf("open %g/s", rate), p)
	}
	if *saturation > 0 {
		time.Sleep(phasePause)
		into, elapsed := runClosed(t, *connections, *saturation, 0)
		p := record("closed", into, elapsed)
		p.Connections = *connections
		sent += len(into.latencies) + into.errors
		phases = append(phases, p)
		progress(fmt.Sprintf("closed x%d", *connections), p)
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"client":         "go",
		"body_bytes":     len(body),
		"phases":         phases,
		"requests_total": sent,
		"client_cpu_s":   cpuSeconds(),
		"elapsed_s":      time.Since(began).Seconds(),
	})
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goloadgen:", err)
		os.Exit(2)
	}
}
