// Command workload is the test bed's stand-in for a real application that is slow to start: it does a
// set amount of real CPU work (CPU-seconds of its own process, so on a busy node it takes longer in wall
// time), and only then listens for HTTP. Its probes are the ones real apps have: /healthz for liveness
// and /readyz for readiness, both refused while it starts. A pod whose liveness probe gives up before the
// start-up work is done is restarted by its kubelet and starts over: that is the thundering herd's restart
// storm on a starved node, for real, not modelled.
//
//	workload [--cpu-seconds 2] [--listen :8080] [--threads 1] [--exit-after S]
//	workload --check http://127.0.0.1:8080/readyz
//
// Environment WORKLOAD_CPU_SECONDS, WORKLOAD_LISTEN and WORKLOAD_THREADS set the same. --exit-after makes a
// batch job of it: once ready it serves S seconds more, then exits 0. It logs one line
// when it starts, one when it is ready (with the wall and CPU seconds it took) and exits 0 on SIGTERM.
//
// --check URL is an exec probe's command (the image has nothing else to run): it GETs URL and exits 0 on a
// 2xx answer within a second, 1 otherwise, as a readiness probe of kind exec would run it.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func envOr(name, fallback string) string {
	if value, ok := os.LookupEnv(name); ok && value != "" {
		return value
	}
	return fallback
}

// cpuSeconds is the CPU time (user and system) this process has used so far.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	seconds := func(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}

// burn hashes until the process has used `total` CPU-seconds, on `threads` goroutines.
func burn(ctx context.Context, total float64, threads int) {
	start := cpuSeconds()
	var group sync.WaitGroup
	for i := 0; i < threads; i++ {
		group.Add(1)
		go func(seed int) {
			defer group.Done()
			sum := sha256.Sum256([]byte(strconv.Itoa(seed)))
			for ctx.Err() == nil && cpuSeconds()-start < total {
				for j := 0; j < 2000; j++ {
					sum = sha256.Sum256(sum[:])
				}
			}
		}(i)
	}
	group.Wait()
}

// checkURL is --check: 0 when a GET of url answers 2xx within a second, else 1.
func checkURL(url string) int {
	client := http.Client{Timeout: time.Second}
	response, err := client.Get(url)
	if err != nil {
		return 1
	}
	_ = response.Body.Close()
	if response.StatusCode < 200 || response.StatusCode > 299 {
		return 1
	}
	return 0
}

func main() {
	defaultCPU, err := strconv.ParseFloat(envOr("WORKLOAD_CPU_SECONDS", "2"), 64)
	if err != nil {
		log.Fatalf("WORKLOAD_CPU_SECONDS: %v", err)
	}
	defaultThreads, err := strconv.Atoi(envOr("WORKLOAD_THREADS", "1"))
	if err != nil {
		log.Fatalf("WORKLOAD_THREADS: %v", err)
	}
	cpu := flag.Float64("cpu-seconds", defaultCPU, "CPU-seconds of start-up work before it listens")
	listen := flag.String("listen", envOr("WORKLOAD_LISTEN", ":8080"), "address of /healthz and /readyz")
	threads := flag.Int("threads", defaultThreads, "goroutines doing the start-up work")
	exitAfter := flag.Float64("exit-after", -1, "once ready, exit 0 after this many seconds (a Job's pod); <0: never")
	check := flag.String("check", "", "an exec probe: GET this URL, exit 0 on 2xx, else 1")
	flag.Parse()
	if *check != "" {
		os.Exit(checkURL(*check))
	}
	if *cpu < 0 || *threads < 1 {
		log.Fatalf("--cpu-seconds must be >= 0 and --threads >= 1")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	began := time.Now()
	log.Printf("starting: %g CPU-seconds of work on %d thread(s)", *cpu, *threads)
	burn(ctx, *cpu, *threads)
	if ctx.Err() != nil {
		log.Printf("stopped during start-up after %.2fs", time.Since(began).Seconds())
		return
	}

	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if *exitAfter >= 0 {
		go func() {
			time.Sleep(time.Duration(*exitAfter * float64(time.Second)))
			log.Printf("done after %.2fs", time.Since(began).Seconds())
			stop()
		}()
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	log.Printf("ready after %.2fs wall, %.2f CPU-seconds; listening on %s",
		time.Since(began).Seconds(), cpuSeconds(), *listen)
	if err := server.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
